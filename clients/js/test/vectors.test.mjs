// The Go envelope's test vectors (e2ee/testdata/vectors.json)
// open here, and every value after the HPKE step recomputes exactly.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import { fromHex, hex, text, utf8 } from "../dist/bytes.js";
import { header, info, sealRequest } from "../dist/envelope.js";
import { keyId } from "../dist/keys.js";
import { ChunkCipher, ResponseOpener } from "../dist/reply.js";
import { openRequest, suite, workerKey } from "../testing/gateway.mjs";

const path = process.env.SVC_E2EE_VECTORS ?? new URL("../../../e2ee/testdata/vectors.json", import.meta.url);
const { vectors } = JSON.parse(await readFile(path, "utf8"));

async function readAll(stream) {
  let out = "";
  for await (const b of stream) out += text(b);
  return out;
}

test("the vectors file has a streamed and a whole reply", () => {
  assert.deepEqual(vectors.map((v) => v.stream).sort(), [false, true]);
});

for (const v of vectors) {
  test(`vector ${v.name}`, async () => {
    const pub = fromHex(v.public_key);
    assert.equal(await keyId(pub), v.key_id);
    assert.deepEqual([v.kem_id, v.kdf_id, v.aead_id], [0x647a, 1, 2]);
    const r = { keyId: v.key_id, model: v.model, stream: v.stream };
    assert.equal(hex(header(r)), v.header);
    assert.equal(hex(info(r)), v.info);

    // The envelope as Go sent it opens with the seed's key.
    const env = JSON.parse(v.envelope);
    assert.deepEqual(
      { svc_e2e: env.svc_e2e, key_id: env.key_id, model: env.model, stream: env.stream },
      { svc_e2e: 1, key_id: v.key_id, model: v.model, stream: v.stream },
    );
    const worker = await workerKey([v.model], fromHex(v.seed), pub);
    const opened = await openRequest(worker, utf8(v.envelope));
    assert.equal(hex(opened.enc), v.enc);
    assert.equal(text(opened.body), v.request_body);
    assert.equal(hex(opened.secret), v.exported_secret);

    // The reply's key schedule. WebCrypto keeps the PRK inside HKDF; it is
    // HMAC-SHA256 keyed with the salt, which is what HKDF-Extract is.
    const nonce = fromHex(v.response_nonce);
    assert.equal(hex(opened.enc) + hex(nonce), v.extract_salt);
    const mac = await crypto.subtle.importKey("raw", fromHex(v.extract_salt), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    assert.equal(hex(new Uint8Array(await crypto.subtle.sign("HMAC", mac, opened.secret))), v.prk);
    const c = await ChunkCipher.create(opened.secret, opened.enc, nonce);
    assert.equal(hex(c.rawKey), v.key);
    assert.equal(hex(c.iv), v.iv);
    for (const [i, ch] of v.chunks.entries()) {
      const final = i === v.chunks.length - 1;
      assert.equal(ch.index, i);
      assert.equal(ch.aad, final ? "final" : "");
      assert.equal(hex(c.nonce(i)), ch.nonce);
      assert.equal(hex(await c.seal(i, final, utf8(ch.plaintext))), ch.ciphertext);
    }

    // The client opens the recorded reply.
    const o = new ResponseOpener(opened.secret, opened.enc);
    if (v.stream) {
      const got = await readAll(o.openStream(new Blob([v.reply]).stream()));
      const want = v.chunks.slice(0, -1).map((ch) => `data: ${ch.plaintext}\n\n`).join("") + "data: [DONE]\n\n";
      assert.equal(got, want);
    } else {
      assert.equal(text(await o.openBody(utf8(v.reply))), v.chunks.map((ch) => ch.plaintext).join(""));
    }
  });
}

test("a request sealed here to a vector's key opens with its seed", async () => {
  const v = vectors[0];
  const pub = fromHex(v.public_key);
  const key = { key_id: v.key_id, version: 1, kem_id: 0x647a, kdf_id: 1, aead_id: 2, public_key: Buffer.from(pub).toString("base64") };
  const { envelope } = await sealRequest(key, v.model, v.stream, utf8(v.request_body));
  const opened = await openRequest(await workerKey([v.model], fromHex(v.seed), pub), envelope);
  assert.equal(text(opened.body), v.request_body);
  assert.ok(suite);
});
