// Opening replies: every way a reply can be altered, cut or reordered is
// refused, as in e2ee's TestStreamTampering and TestReplyTampering.

import assert from "node:assert/strict";
import { test } from "node:test";

import { decode64, encode64, text, utf8 } from "../dist/bytes.js";
import { InvalidReplyError, TruncatedReplyError } from "../dist/errors.js";
import { ResponseOpener } from "../dist/reply.js";
import { Sealer, dribble } from "../testing/gateway.mjs";

const secret = crypto.getRandomValues(new Uint8Array(32));
const enc = crypto.getRandomValues(new Uint8Array(1120));
const opener = new ResponseOpener(secret, enc);

async function readAll(stream) {
  let out = "";
  for await (const b of stream) out += text(b);
  return out;
}

// A streamed reply's events (the data payloads), sealed for opener.
async function streamEvents(payloads = ['{"n":1}', '{"n":2}']) {
  const s = await Sealer.create(secret, enc);
  const events = [s.startData()];
  for (const p of payloads) events.push(await s.eventData(p));
  events.push(await s.finalData());
  return events;
}

const frame = (events) => events.map((e) => `data: ${e}\n\n`).concat("data: [DONE]\n\n");

test("a sealed stream opens event by event, across any byte boundary", async () => {
  const events = await streamEvents(['{"n":1}', 'line one\nline two', '{"n":3}']);
  const want = 'data: {"n":1}\n\ndata: line one\ndata: line two\n\ndata: {"n":3}\n\ndata: [DONE]\n\n';
  for (const size of [1, 3, 64, 100000]) {
    assert.equal(await readAll(opener.openStream(dribble(frame(events), size))), want, `pieces of ${size}`);
  }
  // CRLF and CR line ends, comments and clear annotations are all fine.
  const svcs = [];
  const mixed = [": keep-alive\r\n\r\n", `data: ${events[0]}\r\n\r\n`, `data: ${events[1]}\r\r`, 'data: {"svc":{"worker":{"id":"w1"}}}\n\n',
    `data: ${events[2]}\n\n`, `data: ${events[3]}\n\n`, `data: ${events[4]}\n\n`, ": bye\n\n", "data: [DONE]\n\n"];
  assert.equal(await readAll(opener.openStream(dribble(mixed, 5), { onSvc: (svc) => svcs.push(svc) })), want);
  assert.deepEqual(svcs, [{ worker: { id: "w1" } }]);
});

test("a stream is refused when altered, reordered, cut or extended", async () => {
  const events = await streamEvents();
  const flip = (e) => {
    const o = JSON.parse(e);
    const ct = decode64(o.c);
    ct[0] ^= 1;
    return JSON.stringify({ ...o, c: encode64(ct) });
  };
  const cases = [
    ["a chunk altered", [events[0], flip(events[1]), ...events.slice(2)], InvalidReplyError, /chunk 0 does not open/],
    ["chunks reordered", [events[0], events[2], events[1], events[3]], InvalidReplyError, /chunk 0 does not open/],
    ["a chunk dropped", [events[0], events[2], events[3]], InvalidReplyError, /chunk 0 does not open/],
    ["a chunk replayed", [events[0], events[1], events[1], events[3]], InvalidReplyError, /chunk 1 does not open/],
    ["the final marker removed", [...events.slice(0, 3), JSON.stringify({ c: JSON.parse(events[3]).c })], InvalidReplyError, /chunk 2 does not open/],
    ["a chunk marked final", [events[0], JSON.stringify({ ...JSON.parse(events[1]), final: true })], InvalidReplyError, /chunk 0 does not open/],
    ["a chunk before the header", [events[1], events[0]], InvalidReplyError, /before the stream header/],
    ["a second header", [events[0], events[0]], InvalidReplyError, /second header/],
    ["a chunk after the final one", [...events, events[1]], InvalidReplyError, /after the final chunk/],
    ["another version", [JSON.stringify({ ...JSON.parse(events[0]), svc_e2e: 2 }), ...events.slice(1)], InvalidReplyError, /unsupported stream version/],
    ["a short nonce", [JSON.stringify({ svc_e2e: 1, response_nonce: "AAAA" }), ...events.slice(1)], InvalidReplyError, /response_nonce/],
    ["a header without a nonce", ['{"svc_e2e":1}', ...events.slice(1)], InvalidReplyError, /no response_nonce/],
    ["chunk base64 with stray bits", [events[0], '{"c":"AB=="}'], InvalidReplyError, /not standard base64/],
    ["a chunk of the wrong type", [events[0], '{"c":5}'], InvalidReplyError, /wrong shape/],
    ["an event that is not JSON", [events[0], "hello"], InvalidReplyError, /neither sealed nor/],
    ["an event that is a list", [events[0], "[1]"], InvalidReplyError, /neither sealed nor/],
  ];
  for (const [name, evs, cls, msg] of cases) {
    await assert.rejects(readAll(opener.openStream(dribble(frame(evs)))), (e) => e instanceof cls && msg.test(e.message), name);
  }
});

test("a stream that ends before its final chunk is truncated", async () => {
  const events = await streamEvents();
  const cases = [
    ["no final chunk, then [DONE]", [...events.slice(0, 3).map((e) => `data: ${e}\n\n`), "data: [DONE]\n\n"], /\[DONE\] after 2 chunks/],
    ["cut after a chunk", events.slice(0, 2).map((e) => `data: ${e}\n\n`), /ended after 1 chunks/],
    ["cut inside the final event", [...events.slice(0, 3).map((e) => `data: ${e}\n\n`), `data: ${events[3].slice(0, 20)}`], /ended after 2 chunks/],
    ["nothing at all", [], /ended after 0 chunks/],
  ];
  for (const [name, parts, msg] of cases) {
    await assert.rejects(readAll(opener.openStream(dribble(parts))), (e) => e instanceof TruncatedReplyError && msg.test(e.message), name);
  }
});

// readUntilError reads a stream's text until it ends or errors.
async function readUntilError(stream) {
  const reader = stream.getReader();
  let got = "";
  for (;;) {
    try {
      const { done, value } = await reader.read();
      if (done) return { got };
      got += text(value);
    } catch (err) {
      return { got, err };
    }
  }
}

test("a clear error frame is passed on, then the stream fails", async () => {
  const events = await streamEvents();
  const frameData = '{"error":{"message":"worker lost","type":"service_unavailable"}}';
  const parts = [`data: ${events[0]}\n\n`, `data: ${events[1]}\n\n`, `data: ${frameData}\n\n`, `data: ${events[2]}\n\n`];
  const { got, err } = await readUntilError(opener.openStream(dribble(parts)));
  assert.equal(got, `data: {"n":1}\n\ndata: ${frameData}\n\n`);
  assert.ok(err instanceof TruncatedReplyError && /failed after 1 chunks: worker lost/.test(err.message), String(err));

  // llama.cpp's "error:" line reads the same; after the final chunk an
  // error frame changes nothing.
  const late = [...frame(events).slice(0, -1), `error: ${frameData}\n\n`, "data: [DONE]\n\n"];
  assert.equal(await readAll(opener.openStream(dribble(late))), 'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
});

test("only a clear error frame's error goes on: the gateway cannot add text", async () => {
  const events = await streamEvents();
  for (const injected of [
    'data: {"error":{"message":"gone"},"choices":[{"index":0,"delta":{"content":"INJECTED"}}]}\n\n',
    'event: error\ndata: {"choices":[{"index":0,"delta":{"content":"INJECTED"}}]}\n\n',
  ]) {
    const parts = [`data: ${events[0]}\n\n`, `data: ${events[1]}\n\n`, injected];
    const { got, err } = await readUntilError(opener.openStream(dribble(parts)));
    assert.ok(!got.includes("INJECTED") && got.includes('data: {"error":{'), got);
    assert.ok(err instanceof TruncatedReplyError, String(err));
  }
});

test("an event over the size limit fails the stream", async () => {
  const huge = "data: " + "x".repeat((24 << 20) + 10) + "\n\n";
  await assert.rejects(readAll(opener.openStream(dribble([huge], 1 << 20))), (e) => e instanceof InvalidReplyError && /too large/.test(e.message));
});

test("cancelling the clear stream cancels the sealed one", async () => {
  let cancelled = false;
  const src = new ReadableStream({
    pull() {},
    cancel() {
      cancelled = true;
    },
  });
  await opener.openStream(src).cancel("done");
  assert.ok(cancelled);
});

test("a whole reply opens, and is refused when altered or cut", async () => {
  const s = await Sealer.create(secret, enc);
  const reply = JSON.parse(await s.replyBody('{"answer":42}', { worker: { id: "w1" } }));
  assert.equal(text(await opener.openBody(utf8(JSON.stringify(reply)))), '{"answer":42}');

  // A reply of several chunks opens to their concatenation.
  const m = await Sealer.create(secret, enc);
  const multi = { svc_e2e: 1, response_nonce: encode64(m.nonce),
    chunks: [encode64(await m.seal(false, "ab")), encode64(await m.seal(false, "cd")), encode64(await m.seal(true, "ef"))] };
  assert.equal(text(await opener.openBody(utf8(JSON.stringify(multi)))), "abcdef");

  const flipped = decode64(reply.chunks[0]);
  flipped[5] ^= 1;
  const cases = [
    ["not JSON", "nope", InvalidReplyError, /expected shape/],
    ["chunks not strings", JSON.stringify({ ...reply, chunks: [1] }), InvalidReplyError, /expected shape/],
    ["another version", JSON.stringify({ ...reply, svc_e2e: 2 }), InvalidReplyError, /unsupported reply version/],
    ["no nonce", JSON.stringify({ ...reply, response_nonce: undefined }), InvalidReplyError, /response_nonce/],
    ["another nonce", JSON.stringify({ ...reply, response_nonce: encode64(new Uint8Array(32)) }), InvalidReplyError, /does not open as the final/],
    ["an altered chunk", JSON.stringify({ ...reply, chunks: [encode64(flipped)] }), InvalidReplyError, /does not open as the final/],
    ["bad base64", JSON.stringify({ ...reply, chunks: ["A"] }), InvalidReplyError, /not standard base64/],
    ["no chunks", JSON.stringify({ ...reply, chunks: [] }), TruncatedReplyError, /no chunks/],
    ["the final chunk dropped", JSON.stringify({ ...multi, chunks: multi.chunks.slice(0, 2) }), TruncatedReplyError, /stop at 2/],
    ["chunks reordered", JSON.stringify({ ...multi, chunks: [multi.chunks[1], multi.chunks[0], multi.chunks[2]] }), InvalidReplyError, /chunk 0 does not open/],
  ];
  for (const [name, body, cls, msg] of cases) {
    await assert.rejects(opener.openBody(utf8(body)), (e) => e instanceof cls && msg.test(e.message), name);
  }
});
