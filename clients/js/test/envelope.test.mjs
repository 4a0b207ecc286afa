// Sealing: the routing fields a body must agree with, the model's form,
// the keys that can be sealed to, and the envelope's shape.

import assert from "node:assert/strict";
import { test } from "node:test";

import { decode64, encode64, hex, text, utf8 } from "../dist/bytes.js";
import { checkModel, header, routingFields, sealRequest } from "../dist/envelope.js";
import { E2EEError, KeyDirectoryError, UnsealableRequestError } from "../dist/errors.js";
import { parseKeys, usableKeys, fingerprint } from "../dist/keys.js";
import { openRequest, workerKey } from "../testing/gateway.mjs";

const worker = await workerKey();

test("routing fields are read strictly", () => {
  assert.deepEqual(routingFields(utf8('{"model":"m","stream":true}')), { model: "m", stream: true });
  assert.deepEqual(routingFields(utf8(' {"stream":null,"x":{"model":"inner","Stream":1},"model":"m"} ')), { model: "m", stream: false });
  assert.deepEqual(routingFields(utf8('{"mod\\u0065l":"m","s":"}\\"{","a":[{"stream":1}]}')), { model: "m", stream: false });
  const refused = [
    ["", /not valid JSON/],
    ["not json", /not valid JSON/],
    ['{"model":"m"} x', /not valid JSON/],
    ["[1]", /not a JSON object/],
    ["null", /not a JSON object/],
    ['{"messages":[]}', /no model/],
    ['{"model":"a","model":"b"}', /exactly one string model/],
    ['{"model":"a","mod\\u0065l":"b"}', /exactly one string model/],
    ['{"model":5}', /exactly one string model/],
    ['{"model":"m","Model":"x"}', /wrong case/],
    ['{"model":"m","STREAM":true}', /wrong case/],
    ['{"model":"m","ſtream":true}', /wrong case/],
    ['{"model":"m","stream":true,"stream":false}', /at most one boolean stream/],
    ['{"model":"m","stream":"yes"}', /at most one boolean stream/],
  ];
  for (const [body, msg] of refused) {
    assert.throws(() => routingFields(utf8(body)), (e) => e instanceof UnsealableRequestError && msg.test(e.message), body);
  }
});

test("the model is something the gateway can route on", () => {
  assert.equal(checkModel("llama-3.1-8b-instruct"), undefined);
  assert.equal(checkModel("é".repeat(128)), undefined);
  assert.match(checkModel(""), /empty/);
  assert.match(checkModel("é".repeat(129)), /longer than 256/);
  assert.match(checkModel("a\nb"), /control/);
  assert.match(checkModel("a\u0085b"), /control/);
  assert.match(checkModel("a\ud800b"), /UTF-8/);
});

test("the header binds every routing field", () => {
  const h = header({ keyId: "c9a3565ffde4f72b", model: "bge-m3", stream: false });
  assert.equal(hex(h), "01647a00010002c9a3565ffde4f72b0000066267652d6d33"); // docs/e2e.md's example
  assert.throws(() => header({ keyId: "zz", model: "m", stream: false }), E2EEError);
});

test("a sealed request opens to its body, with the routing fields in the clear", async () => {
  const body = utf8('{"model":"chat-model","stream":true,"messages":[{"role":"user","content":"secret"}]}');
  const { envelope } = await sealRequest(worker.info, "chat-model", true, body);
  const e = JSON.parse(text(envelope));
  assert.deepEqual(Object.keys(e), ["svc_e2e", "kem_id", "kdf_id", "aead_id", "key_id", "model", "stream", "enc", "ct"]);
  assert.equal(decode64(e.enc).length, 1120);
  assert.ok(!text(envelope).includes("secret"));
  const opened = await openRequest(worker, envelope);
  assert.equal(text(opened.body), text(body));

  // A changed routing field no longer opens: the info binds them.
  for (const change of [{ model: "other" }, { stream: false }]) {
    await assert.rejects(openRequest(worker, utf8(JSON.stringify({ ...e, ...change }))));
  }
});

test("a body that disagrees with the envelope is not sealed", async () => {
  const cases = [
    ['{"model":"other"}', "chat-model", false, /model differs/],
    ['{"model":"chat-model","stream":true}', "chat-model", false, /stream flag differs/],
    ['{"model":"chat-model","Model":"x"}', "chat-model", false, /wrong case/],
    ['{"model":"m"}', "", false, /model is empty/],
  ];
  for (const [body, model, stream, msg] of cases) {
    await assert.rejects(sealRequest(worker.info, model, stream, utf8(body)), (e) => e instanceof UnsealableRequestError && msg.test(e.message), body);
  }
  // A body that is not a JSON object (an upload) is the endpoint's to read.
  await sealRequest(worker.info, "stt-model", false, utf8("multipart/form-data; boundary=x\n--x--"));
});

test("only usable keys are sealed to", async () => {
  const k = worker.info;
  const pub = decode64(k.public_key);
  const outside = pub.slice();
  outside[0] = 0xff; // an ML-KEM coefficient of 4095, outside the field
  outside[1] = 0xff;
  const bad = [
    [{ ...k, version: 2 }, /unsupported version/],
    [{ ...k, kem_id: 0x0020 }, /unsupported suite/],
    [{ ...k, aead_id: 1 }, /unsupported suite/],
    [{ ...k, public_key: encode64(pub.subarray(1)) }, /not 1216 bytes/],
    [{ ...k, public_key: "not base64" }, /not 1216 bytes/],
    [{ ...k, key_id: "0000000000000000" }, /does not match/],
    [{ ...k, public_key: encode64(outside), key_id: hex(new Uint8Array(await crypto.subtle.digest("SHA-256", outside))).slice(0, 16) }, /encapsulation key/],
  ];
  for (const [key, msg] of bad) {
    await assert.rejects(sealRequest(key, "chat-model", false, utf8('{"model":"chat-model"}')), (e) => e instanceof E2EEError && msg.test(e.message), msg.source);
  }
  const fp = await fingerprint(pub);
  assert.deepEqual(await usableKeys([k, { ...k, version: 2 }], undefined), [k]);
  assert.deepEqual(await usableKeys([k], [fp]), [k]);
  assert.deepEqual(await usableKeys([k], ["00".repeat(32)]), []);
});

test("a malformed key directory fails as a whole", () => {
  assert.deepEqual(parseKeys(utf8("{}")), []);
  assert.deepEqual(parseKeys(utf8('{"keys":null}')), []);
  const bad = ["nope", "[]", '{"keys":5}', '{"keys":[5]}', '{"keys":[{"version":"1"}]}', '{"keys":[{"key_id":7}]}',
    '{"keys":[{"models":"m"}]}', '{"keys":[{"models":[1]}]}'];
  for (const b of bad) assert.throws(() => parseKeys(utf8(b)), KeyDirectoryError, b);
});
