// What private inference costs the client in process, with no network:
// sealing a request (X-Wing encapsulation, HPKE seal, export) and opening
// its reply, per request; and opening one streamed chunk, against passing
// the same clear chunk through. The worker's side is played by the test
// helpers and is not timed.
//
//     node bench.mjs            (after ./install.sh)

import { sealRequest } from "./dist/index.js";
import { Sealer, openRequest, workerKey } from "./testing/gateway.mjs";
import { utf8 } from "./dist/bytes.js";

const worker = await workerKey(["sim-chat"]);
const body = utf8(JSON.stringify({ model: "sim-chat", messages: [{ role: "user", content: "hello ".repeat(50) }] }));
const answer = JSON.stringify({ id: "c1", object: "chat.completion", model: "sim-chat",
  choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "word ".repeat(60) } }] });
const chunk = JSON.stringify({ id: "c1", object: "chat.completion.chunk", model: "sim-chat", choices: [{ index: 0, delta: { content: " word" } }] });

async function time(name, n, fn) {
  for (let i = 0; i < Math.min(20, n); i++) await fn(i);
  const start = performance.now();
  for (let i = 0; i < n; i++) await fn(i);
  const per = (performance.now() - start) / n;
  return { name, per };
}

const results = [];

// Per request: seal, then open the reply of one final chunk.
const replies = [];
for (let i = 0; i < 20; i++) {
  const { envelope, opener } = await sealRequest(worker.info, "sim-chat", false, body);
  const o = await openRequest(worker, envelope);
  replies.push({ opener, reply: utf8(await (await Sealer.create(o.secret, o.enc)).replyBody(answer)) });
}
results.push(await time("seal a request", 300, () => sealRequest(worker.info, "sim-chat", false, body)));
results.push(await time("open a whole reply", 2000, (i) => replies[i % replies.length].opener.openBody(replies[i % replies.length].reply)));

// Per streamed chunk: a 200-chunk stream opened, against the same clear
// events read through a plain stream.
const { envelope, opener } = await sealRequest(worker.info, "sim-chat", true, utf8(JSON.stringify({ model: "sim-chat", stream: true, messages: [] })));
const o = await openRequest(worker, envelope);
const s = await Sealer.create(o.secret, o.enc);
const sealedEvents = [`data: ${s.startData()}\n\n`];
for (let i = 0; i < 200; i++) sealedEvents.push(`data: ${await s.eventData(chunk)}\n\n`);
sealedEvents.push(`data: ${await s.finalData()}\n\ndata: [DONE]\n\n`);
const sealedStream = utf8(sealedEvents.join(""));
const clearStream = utf8(Array(200).fill(`data: ${chunk}\n\n`).join("") + "data: [DONE]\n\n");
const stream = (b) => new Blob([b]).stream().pipeThrough(new TransformStream()); // one read per event would favour neither
async function drain(rs) {
  for await (const _ of rs);
}
const sealedPer = await time("open a 200-chunk stream", 100, () => drain(opener.openStream(stream(sealedStream))));
const clearPer = await time("read the same clear stream", 100, () => drain(stream(clearStream)));
results.push(sealedPer, clearPer);

for (const r of results) console.log(`${r.name.padEnd(30)} ${(r.per * 1000).toFixed(0).padStart(7)} µs`);
console.log(`${"per request (seal + open)".padEnd(30)} ${((results[0].per + results[1].per) * 1000).toFixed(0).padStart(7)} µs`);
console.log(`${"per streamed chunk".padEnd(30)} ${(((sealedPer.per - clearPer.per) / 200) * 1000).toFixed(1).padStart(7)} µs`);
console.log(`node ${process.version}, ${process.arch}`);
