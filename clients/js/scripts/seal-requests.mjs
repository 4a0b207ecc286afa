// Seals one request of each sealed kind with this package's fetch, to the
// first key of the Go vectors, and prints what the gateway would receive
// as a JSON list. e2ee's TestJSEnvelopesOpenInGo opens them with
// the vector's seed.
//
//     node scripts/seal-requests.mjs path/to/vectors.json

import { readFile } from "node:fs/promises";

import { createPrivateFetch } from "../dist/index.js";

const [path] = process.argv.slice(2);
const v = JSON.parse(await readFile(path, "utf8")).vectors[0];
const key = {
  key_id: v.key_id,
  version: 1,
  kem_id: v.kem_id,
  kdf_id: v.kdf_id,
  aead_id: v.aead_id,
  public_key: Buffer.from(v.public_key, "hex").toString("base64"),
  models: ["chat-model", "embed-model", "tts-model", "stt-model", "rerank-model", "image-model", "модель ☃"],
};

// The gateway: it lists the key, records each sealed request and refuses
// it, so the fetch returns without a reply to open.
let sent;
async function gateway(input, init) {
  const req = new Request(input, init);
  if (req.method === "GET") return Response.json({ keys: [key] });
  sent = { path: new URL(req.url).pathname, content_type: req.headers.get("content-type"), envelope: await req.text() };
  return new Response('{"detail":"recorded"}', { status: 418 });
}
const f = createPrivateFetch({ fetch: gateway });

const json = (model, extra = {}) => JSON.stringify({ model, ...extra });
const form = new FormData();
form.set("file", new Blob([new Uint8Array([82, 73, 70, 70, 0, 1, 2, 3])], { type: "audio/wav" }), "clip.wav");
form.set("model", "stt-model");
form.set("prompt", "a sealed prompt");
form.set("response_format", "srt");

const cases = [
  ["chat-stream", "/v1/chat/completions", json("chat-model", { stream: true, messages: [{ role: "user", content: "Say hello." }] })],
  ["chat", "/api/v1/chat/completions", json("chat-model", { messages: [{ role: "user", content: "Say hello.\nTwice." }] })],
  ["chat-unicode-model", "/v1/chat/completions", json("модель ☃", { stream: false, messages: [] })],
  ["embeddings", "/v1/embeddings", json("embed-model", { input: ["one", "two"] })],
  ["rerank", "/v1/rerank", json("rerank-model", { query: "q", documents: ["a", "b"] })],
  ["images", "/v1/images/generations", json("image-model", { prompt: "a cat", response_format: "b64_json" })],
  ["speech", "/v1/audio/speech", json("tts-model", { input: "Hello there.", voice: "nova", response_format: "wav" })],
  ["transcription", "/v1/audio/transcriptions", form],
];
const out = [];
for (const [name, p, body] of cases) {
  sent = undefined;
  const headers = { authorization: "Bearer k" };
  if (typeof body === "string") headers["content-type"] = "application/json";
  await f("http://gateway.test" + p, { method: "POST", headers, body });
  out.push({ name, clear: typeof body === "string" ? body : null, ...sent });
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
