// The fetch against a fake gateway: what it seals, what passes through,
// the key cache, the retry on a departed worker, the typed errors, and
// failing closed on replies that do not open.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CONTENT_TYPE,
  E2ERequiredError,
  InvalidEncryptedRequestError,
  InvalidReplyError,
  KeyDirectoryError,
  NoKeyError,
  NoPrivateInferenceWorkerError,
  PlanRequiredError,
  PrivateInferenceError,
  TruncatedReplyError,
  UnsealableRequestError,
  createPrivateFetch,
  fingerprint,
  privateInferenceError,
  readPrivateInferenceError,
} from "../dist/index.js";
import { decode64 } from "../dist/bytes.js";
import { FakeGateway, SVC, workerKey } from "../testing/gateway.mjs";

const auth = { authorization: "Bearer test-key" };
const post = (body, headers = {}) => ({ method: "POST", headers: { ...auth, "content-type": "application/json", ...headers }, body });
const chat = (prompt, extra = {}) => JSON.stringify({ model: "chat-model", messages: [{ role: "user", content: prompt }], ...extra });

async function setup(...workers) {
  if (workers.length === 0) workers = [await workerKey()];
  const g = new FakeGateway(...workers);
  const reported = [];
  const f = createPrivateFetch({ fetch: g.fetch, onWorker: (w) => reported.push(w) });
  return { g, f, reported, workers };
}

test("chat, streamed and not, embeddings, speech and transcription are sealed and opened", async () => {
  const { g, f, reported } = await setup();
  for (const prefix of ["http://gw.test/v1", "http://gw.test/gw/api/v1"]) {
    const r = await f(`${prefix}/chat/completions`, post(chat("a secret question")));
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/json");
    const comp = await r.json();
    assert.equal(comp.choices[0].message.content, "echo: a secret question");
    assert.deepEqual(comp.svc, SVC, "the clear svc is copied into the opened reply");

    const s = await f(`${prefix}/chat/completions/`, post(chat("another secret", { stream: true })));
    assert.equal(s.headers.get("content-type"), "text/event-stream");
    assert.equal(s.headers.get("content-length"), null);
    const events = (await s.text()).split("\n\n").filter(Boolean);
    assert.equal(events.length, 3);
    assert.equal(events.at(-1), "data: [DONE]");
    assert.equal(events.slice(0, 2).map((e) => JSON.parse(e.slice(6)).choices[0].delta.content).join(""), "echo: another secret");

    const e = await (await f(new URL(`${prefix}/embeddings`), post(JSON.stringify({ model: "embed-model", input: "secret text" })))).json();
    assert.deepEqual(e.data[0].embedding, [0.5, "secret text".length]);

    const sp = await f(new Request(`${prefix}/audio/speech`, post(JSON.stringify({ model: "tts-model", input: "say secret", voice: "nova" }))));
    assert.equal(sp.headers.get("content-type"), "audio/wav");
    assert.equal(await sp.text(), "RIFFsay secret");

    for (const [format, type, want] of [["json", "application/json", '{"text":"heard 4 bytes, prompt secret prompt","svc":'], ["text", "text/plain; charset=utf-8", "heard 4 bytes, prompt secret prompt"]]) {
      const form = new FormData();
      form.set("file", new Blob([new Uint8Array([1, 2, 3, 4])]), "clip.wav");
      form.set("model", " stt-model ");
      form.set("prompt", "secret prompt");
      form.set("response_format", format);
      const tr = await f(`${prefix}/audio/transcriptions`, { method: "POST", headers: auth, body: form });
      assert.equal(tr.headers.get("content-type"), type);
      assert.ok((await tr.text()).startsWith(want), format);
    }
  }
  assert.equal(g.fetches, 2, "keys are fetched once per gateway");
  assert.ok(!g.seen.some((b) => b.includes("secret")), "the gateway saw a secret");
  assert.equal(reported.length, 12);
  assert.deepEqual(reported[0], { id: "w1", name: "böx", version: "0.17.0", requestId: "req-1", model: "chat-model", url: "http://gw.test/v1/chat/completions" });
  assert.equal(reported[1].model, "chat-model");
});

test("a streamed upload body is read and sealed", async () => {
  const { g, f } = await setup();
  const body = new Blob([chat("streamed secret")]).stream();
  const r = await f("http://gw.test/v1/chat/completions", { ...post(body), duplex: "half" });
  assert.equal((await r.json()).choices[0].message.content, "echo: streamed secret");
  assert.ok(!g.seen.some((b) => b.includes("secret")));
});

test("everything else passes through untouched", async () => {
  const { g, f } = await setup();
  assert.equal((await (await f("http://gw.test/v1/models", { headers: auth })).json()).data[0].id, "chat-model");
  const clear = createPrivateFetch({ fetch: g.fetch, allowClear: true });
  assert.deepEqual(await (await clear("http://gw.test/v1/responses", post(chat("clear")))).json(), { clear: true, path: "/v1/responses" });
  // Sealed already: sent as it is.
  await f("http://gw.test/v1/chat/completions", post('{"svc_e2e":1}', { "content-type": CONTENT_TYPE }));
  assert.equal(g.seen.at(-1), '{"svc_e2e":1}');
  assert.equal((await f("data:,")).status, 200, "the OpenAI SDK probes fetch with a data: URL");
  assert.equal(g.fetches, 0);
});

test("inference with no private form is refused, not sent in the clear", async () => {
  const { g, f } = await setup();
  for (const path of ["/v1/responses", "/api/v1/completions", "/v1/messages", "/v1//moderations/", "/v1/audio/translations"]) {
    await assert.rejects(f(`http://gw.test${path}`, post(chat("a secret"))), (err) => {
      assert.ok(err instanceof UnsealableRequestError, path);
      assert.match(err.message, /has no private form and would be sent in the clear/);
      return true;
    });
  }
  assert.equal(g.seen.length, 0);
});

test("a request that cannot be sealed is never sent", async () => {
  const { g, f } = await setup();
  const cases = [
    [post(""), UnsealableRequestError, /no body/],
    [post("not json"), UnsealableRequestError, /not valid JSON/],
    [post('{"messages":[]}'), UnsealableRequestError, /no model/],
    [post('{"model":"chat-model","Model":"x"}'), UnsealableRequestError, /wrong case/],
    [post(chat("hi").replace("chat-model", "other-model")), NoKeyError, /other-model/],
  ];
  for (const [init, cls, msg] of cases) {
    await assert.rejects(f("http://gw.test/v1/chat/completions", init), (e) => e instanceof cls && msg.test(e.message), String(init.body));
  }
  const form = new FormData();
  form.set("file", new Blob(["x"]), "a.wav");
  await assert.rejects(f("http://gw.test/v1/audio/transcriptions", { method: "POST", headers: auth, body: form }), /names no model/);
  await assert.rejects(f("http://gw.test/v1/audio/transcriptions", post('{"model":"stt-model"}')), /multipart\/form-data/);
  await assert.rejects(
    f("http://gw.test/v1/audio/transcriptions", post("garbage", { "content-type": "multipart/form-data; boundary=b" })),
    /not a multipart form/,
  );
  assert.equal(g.requests, 0);
});

test("keys are cached, refetched for an unlisted model, and after a worker leaves", async () => {
  const old = await workerKey();
  const { g, f } = await setup(old);
  await f("http://gw.test/v1/chat/completions", post(chat("one")));
  assert.equal(g.fetches, 1);
  // A worker with a new model joins: the cached list lacks it, so it is
  // fetched once more.
  const fresh = await workerKey(["new-model"]);
  g.connect(fresh);
  const r = await f("http://gw.test/v1/chat/completions", post(chat("two").replace("chat-model", "new-model")));
  assert.equal((await r.json()).choices[0].message.content, "echo: two");
  assert.equal(g.fetches, 2);

  // The worker restarts with a new key; the client still has the old one:
  // one 503, one refetch, one retry.
  g.disconnect(old);
  const next = await workerKey();
  g.connect(next);
  const before = g.requests;
  const r2 = await f("http://gw.test/v1/chat/completions", post(chat("three")));
  assert.equal((await r2.json()).choices[0].message.content, "echo: three");
  assert.deepEqual([g.fetches, g.requests - before], [3, 2]);

  // A key listed whose worker is gone: the retry's 503 is the answer.
  g.disconnect(next);
  g.listed = [next.info];
  const r3 = await f("http://gw.test/v1/chat/completions", post(chat("four")));
  assert.equal(r3.status, 503);
  assert.equal(g.fetches, 4);
  const err = await readPrivateInferenceError(r3);
  assert.ok(err instanceof NoPrivateInferenceWorkerError);
  assert.deepEqual([err.status, err.type, err.requestId], [503, "no_private_inference_worker", "req-err"]);
  assert.match(err.message, /No connected worker holds the key/);
  assert.equal((await r3.json()).detail.error.type, "service_unavailable", "the body is still readable");
});

test("a request gives up on a hung key directory when it is aborted, and passes its fetch options", async () => {
  const { g, f } = await setup();
  g.keysHang = true;
  const ac = new AbortController();
  const pending = f("http://gw.test/v1/chat/completions", { ...post(chat("hi")), signal: ac.signal, dispatcher: "proxy" });
  setTimeout(() => ac.abort(), 20);
  await assert.rejects(pending, (e) => e.name === "AbortError", "the abort did not end the request");
  assert.equal(g.keyInits.length, 1);
  assert.equal(g.keyInits[0].dispatcher, "proxy", "the directory fetch lost the request's options");
  assert.equal(g.keyInits[0].method, "GET");
  assert.equal(g.keyInits[0].body, undefined);
  assert.equal(g.requests, 0);
});

test("e2eeError finds the package's error where an SDK wrapped it", async () => {
  const { e2eeError, NoKeyError, PlanRequiredError } = await import("../dist/index.js");
  const inner = new NoKeyError("m");
  const wrapped = Object.assign(new Error("Connection error."), { cause: inner });
  assert.equal(e2eeError(wrapped), inner);
  assert.ok(e2eeError({ status: 403, headers: {}, error: { detail: { error: { type: "plan_required", message: "pro" } } } }) instanceof PlanRequiredError);
  assert.equal(e2eeError(new Error("other")), undefined);
});

test("an upload whose envelope is over the gateway's audio limit is refused before it is sent", async () => {
  const { g, f } = await setup();
  const form = new FormData();
  form.set("model", "stt-model");
  form.set("file", new Blob([new Uint8Array(20 << 20)]), "big.wav");
  await assert.rejects(f("http://gw.test/v1/audio/transcriptions", { method: "POST", headers: auth, body: form }), (e) =>
    e instanceof UnsealableRequestError && /26 MB limit/.test(e.message),
  );
  assert.equal(g.requests, 0);
});

test("requests waiting for the same keys share one directory fetch", async () => {
  const { g, f } = await setup();
  const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => f("http://gw.test/v1/chat/completions", post(chat(`n${i}`)))));
  for (const r of replies) assert.equal(r.status, 200);
  assert.equal(g.fetches, 1);
});

test("a path the gateway routes as inference is sealed however it is written", async () => {
  const { g, f } = await setup();
  for (const path of ["/v1//chat/completions", "/v1/%63hat/completions", "//api/v1/chat/completions/", "/api//v1/chat%2Fcompletions"]) {
    const r = await f("http://gw.test" + path, post(chat("hidden")));
    assert.equal(r.status, 200, path);
    assert.ok(!g.seen.at(-1).includes("hidden"), `${path} went out in the clear`);
  }
});

test("the cache is per credential and expires", async () => {
  const w = await workerKey();
  const g = new FakeGateway(w);
  const f = createPrivateFetch({ fetch: g.fetch, keyTTL: 0 });
  await f("http://gw.test/v1/chat/completions", post(chat("a")));
  await f("http://gw.test/v1/chat/completions", post(chat("b")));
  assert.equal(g.fetches, 2);
  const f2 = createPrivateFetch({ fetch: g.fetch });
  await f2("http://gw.test/v1/chat/completions", post(chat("a")));
  const r = await f2("http://gw.test/v1/chat/completions", post(chat("b"), { authorization: "Bearer other" }));
  assert.equal(r.status, 401, "another credential asks the directory itself");
  assert.equal(g.fetches, 3);
});

test("pinned fingerprints decide which keys are used", async () => {
  const w = await workerKey();
  const g = new FakeGateway(w);
  const pin = (await fingerprint(decode64(w.info.public_key))).toUpperCase();
  const ok = createPrivateFetch({ fetch: g.fetch, pin: [pin] });
  assert.equal((await ok("http://gw.test/v1/chat/completions", post(chat("hi")))).status, 200);
  const other = createPrivateFetch({ fetch: g.fetch, pin: ["ab".repeat(32)] });
  await assert.rejects(other("http://gw.test/v1/chat/completions", post(chat("hi"))), NoKeyError);
});

test("a request pinned to a worker is sealed to that worker's key", async () => {
  const w1 = await workerKey();
  const w2 = await workerKey();
  const { g, f } = await setup(w1, w2);
  for (let i = 0; i < 12; i++) {
    const r = await f("http://gw.test/v1/chat/completions", post(chat("hi"), { "x-svc-worker-id": w2.info.worker_id }));
    assert.equal(r.status, 200);
  }
  const sealedTo = new Set(g.seen.filter((b) => b.startsWith("{")).map((b) => JSON.parse(b).key_id));
  assert.deepEqual([...sealedTo], [w2.info.key_id]);
  // A worker without a key for the model: nothing is sent.
  const sealed = () => g.seen.filter((b) => b.startsWith("{")).length;
  const before = sealed();
  await assert.rejects(f("http://gw.test/v1/chat/completions", post(chat("hi"), { "x-svc-worker-id": "w-gone" })), (err) => {
    assert.ok(err instanceof NoKeyError);
    assert.equal(err.worker, "w-gone");
    assert.match(err.message, /on the worker w-gone named by X-Svc-Worker-Id/);
    return true;
  });
  assert.equal(sealed(), before);
});

test("the key directory's refusal is the answer, and bad directories fail", async () => {
  const { g, f } = await setup();
  g.keysStatus = 403;
  const r = await f("http://gw.test/v1/chat/completions", post(chat("hi")));
  assert.equal(r.status, 403);
  const err = await readPrivateInferenceError(r);
  assert.ok(err instanceof PlanRequiredError && err instanceof PrivateInferenceError);
  assert.equal(err.message, "private inference needs the Pro plan");
  assert.equal(g.requests, 0, "nothing was sent without a key");

  g.keysStatus = 0;
  for (const body of ["not json", '{"keys":{}}', '{"keys":[{"kem_id":"x"}]}']) {
    g.keysBody = body;
    const f2 = createPrivateFetch({ fetch: g.fetch });
    await assert.rejects(f2("http://gw.test/v1/chat/completions", post(chat("hi"))), KeyDirectoryError, body);
  }
  g.keysBody = "x".repeat((8 << 20) + 1);
  await assert.rejects(createPrivateFetch({ fetch: g.fetch })("http://gw.test/v1/chat/completions", post(chat("hi"))), /larger than/);
  g.keysBody = JSON.stringify({ keys: [{ ...g.listed[0], key_id: "0000000000000000" }, { ...g.listed[0], version: 9 }] });
  await assert.rejects(createPrivateFetch({ fetch: g.fetch })("http://gw.test/v1/chat/completions", post(chat("hi"))), NoKeyError);
  assert.equal(g.requests, 0);
});

test("each private inference error maps to its class", async () => {
  const { g, f } = await setup();
  g.misbehave = "reject-envelope";
  const bad = await f("http://gw.test/v1/chat/completions", post(chat("hi")));
  const e1 = await readPrivateInferenceError(bad);
  assert.ok(e1 instanceof InvalidEncryptedRequestError);
  assert.deepEqual([e1.status, e1.type, e1.message], [400, "invalid_encrypted_request", "unsupported envelope version"]);

  g.misbehave = "";
  g.requireE2E = true;
  const clear = await createPrivateFetch({ fetch: g.fetch, allowClear: true })("http://gw.test/v1/responses", post(chat("clear")));
  assert.ok((await readPrivateInferenceError(clear)) instanceof E2ERequiredError);

  // The OpenAI SDK's errors carry status, headers and the parsed body.
  const headers = new Headers({ "x-svc-error-code": "no_private_inference_worker" });
  assert.ok(privateInferenceError({ status: 503, headers, error: undefined }) instanceof NoPrivateInferenceWorkerError);
  assert.ok(privateInferenceError({ status: 403, headers: new Headers(), error: { detail: { error: { type: "plan_required", message: "m" } } } }) instanceof PlanRequiredError);
  assert.ok(privateInferenceError({ status: 403, headers: {}, error: { type: "e2e_required" } }) instanceof E2ERequiredError);
  assert.ok(privateInferenceError({ status: 400, headers: { "X-Request-Id": "r" }, error: { error: { type: "invalid_encrypted_request" } } }) instanceof InvalidEncryptedRequestError);
  assert.ok(privateInferenceError({ message: "Connection error.", cause: e1 }) === e1, "found through cause");
  for (const other of [
    { status: 403, headers: {}, error: { detail: { error: { type: "permission_denied" } } } },
    { status: 503, headers: {}, error: {} },
    { status: 400, headers: {}, error: "text" },
    new Error("x"),
    undefined,
    "string",
  ]) {
    assert.equal(privateInferenceError(other), undefined);
  }
  assert.equal(await readPrivateInferenceError(new Response("{}")), undefined);
  assert.equal(await readPrivateInferenceError(new Response("not json", { status: 403 })), undefined);
});

test("a worker's sealed error keeps its status and opens", async () => {
  const { f, reported } = await setup();
  const r = await f("http://gw.test/v1/chat/completions", post(chat("too long")));
  assert.equal(r.status, 400);
  assert.equal(r.headers.get("content-type"), "application/json");
  assert.equal((await r.json()).error.message, "prompt too long: too long");
  assert.equal(reported.length, 1);
  assert.equal(reported[0].id, "w1", "named from the headers when the reply has no svc");
});

test("a sealed speech error opens to JSON, not to audio/wav", async () => {
  const { f } = await setup();
  const r = await f("http://gw.test/v1/audio/speech", post(JSON.stringify({ model: "tts-model", input: "x".repeat(5000), voice: "nova" })));
  assert.equal(r.status, 400);
  assert.equal(r.headers.get("content-type"), "application/json");
  assert.equal((await r.json()).error.message, "input over 4,096 characters");
});

test("a body too large to seal is refused before anything is sent", async () => {
  const { g, f } = await setup();
  await assert.rejects(f("http://gw.test/v1/chat/completions", post("x".repeat((32 << 20) + 1))), (e) => e instanceof UnsealableRequestError && /larger than/.test(e.message));
  // Under the limit in the clear, over it once sealed and in base64.
  const big = chat("a".repeat(25 << 20));
  await assert.rejects(f("http://gw.test/v1/chat/completions", post(big)), (e) => e instanceof UnsealableRequestError && /over the 33554432-byte limit/.test(e.message));
  assert.equal(g.requests, 0);
});

test("replies that are not sealed, or cut, or altered are refused", async () => {
  const { g, f } = await setup();
  g.misbehave = "unsealed";
  await assert.rejects(f("http://gw.test/v1/chat/completions", post(chat("hi"))), (e) => e instanceof InvalidReplyError && /not sealed/.test(e.message));
  await assert.rejects(f("http://gw.test/v1/chat/completions", post(chat("hi", { stream: true }))), InvalidReplyError);
  g.misbehave = "body-for-stream";
  await assert.rejects(f("http://gw.test/v1/chat/completions", post(chat("hi", { stream: true }))), /non-streaming 200 reply/);
  for (const [m, cls] of [["tamper", InvalidReplyError], ["reorder", InvalidReplyError], ["drop-final", TruncatedReplyError], ["truncate", TruncatedReplyError], ["error-frame", TruncatedReplyError]]) {
    g.misbehave = m;
    const r = await f("http://gw.test/v1/chat/completions", post(chat("hi", { stream: true })));
    assert.equal(r.status, 200);
    await assert.rejects(r.text(), cls, m);
  }
});

test("a stream names its worker before its [DONE], where SDKs stop reading", async () => {
  const { g, f, reported } = await setup();
  for (const [m, want] of [["", SVC.worker.version], ["no-svc", null]]) {
    g.misbehave = m;
    reported.length = 0;
    const r = await f("http://gw.test/v1/chat/completions", post(chat("hi", { stream: true })));
    const reader = r.body.getReader();
    let got = "";
    while (!got.endsWith("data: [DONE]\n\n")) got += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    assert.equal(reported.length, 1, m);
    // Without the svc event, the headers name it (they carry no version).
    assert.deepEqual(reported[0], { id: "w1", name: "böx", version: want, requestId: "req-1", model: "chat-model", url: "http://gw.test/v1/chat/completions" });
  }
});
