// The official OpenAI JS SDK with this package's fetch against a running
// gateway: internal/e2e's TestPrivateInferenceJS runs it with `openai` and
// `@svc-dev/e2ee` in node_modules beside it, and reads one JSON line per
// check from stdout.
//
//     SVC_BASE_URL=http://127.0.0.1:8080 SVC_API_KEY=... SVC_MARKER=... node openai-sdk.mjs [mode]
//
// mode: private (default) runs chat streamed and not, embeddings, a
// transcription of SVC_AUDIO and speech, all sealed; refused, a chat the
// worker refuses, whose failure comes sealed; e2e-required and
// plan-required check that the gateway's refusals map to their classes;
// bench times the same chats sealed and in the clear (BenchmarkPrivateJS).

import { readFile } from "node:fs/promises";

import OpenAI, { toFile } from "openai";
import {
  E2ERequiredError,
  PlanRequiredError,
  createPrivateFetch,
  privateInferenceError,
} from "@svc-dev/e2ee";

const base = process.env.SVC_BASE_URL;
const apiKey = process.env.SVC_API_KEY;
const marker = process.env.SVC_MARKER ?? "";
const mode = process.argv[2] ?? "private";

const workers = [];
const privateFetch = createPrivateFetch({ onWorker: (w) => workers.push(w) });
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, fetch: privateFetch, maxRetries: 0 });
const clear = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0 });

async function check(name, fn) {
  const before = workers.length;
  try {
    const detail = await fn();
    const worker = workers.length > before ? workers.at(-1) : null;
    console.log(JSON.stringify({ name, ok: true, worker, ...detail }));
  } catch (err) {
    console.log(JSON.stringify({ name, ok: false, error: `${err?.name}: ${err?.message} ${err?.cause ? "(" + err.cause + ")" : ""}` }));
  }
}

function assert(ok, what) {
  if (!ok) throw new Error(what);
}

async function privateChecks() {
  await check("chat", async () => {
    const c = await client.chat.completions.create({
      model: "sim-chat",
      messages: [{ role: "user", content: `tell me a secret ${marker}\nsim: tokens=12` }],
    });
    assert(c.choices[0].message.content.length > 0 && c.usage.completion_tokens === 12, "chat: " + JSON.stringify(c));
    assert(c.svc?.worker?.id, "no svc.worker in the opened reply");
    return { request_id: c.svc.request_id };
  });

  await check("chat-stream", async () => {
    const stream = await client.chat.completions.create({
      model: "sim-chat",
      stream: true,
      messages: [{ role: "user", content: `stream a secret ${marker}\nsim: tokens=30` }],
    });
    let text = "";
    let chunks = 0;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) text += ch.delta?.content ?? "";
      chunks++;
    }
    assert(chunks >= 30 && text.length > 0, `stream: ${chunks} chunks, ${JSON.stringify(text)}`);
    return { chunks };
  });

  await check("embeddings", async () => {
    const e = await client.embeddings.create({ model: "sim-embed", input: `embed ${marker}` });
    assert(e.data.length === 1 && e.data[0].embedding.length > 0, "embeddings: " + JSON.stringify(e).slice(0, 200));
    return {};
  });

  await check("transcription", async () => {
    const audio = await readFile(process.env.SVC_AUDIO);
    const t = await client.audio.transcriptions.create({
      file: await toFile(audio, "clip.wav", { type: "audio/wav" }),
      model: process.env.SVC_STT_MODEL || "sim-stt",
      prompt: `transcribe ${marker}`,
      response_format: "verbose_json",
    });
    assert(typeof t.text === "string" && t.text.length > 0 && Array.isArray(t.segments), "transcription: " + JSON.stringify(t).slice(0, 300));
    return {};
  });

  await check("speech", async () => {
    const r = await client.audio.speech.create({ model: "sim-tts", voice: "nova", input: `say ${marker}`, response_format: "wav" });
    const wav = Buffer.from(await r.arrayBuffer());
    assert(r.headers.get("content-type") === "audio/wav" && wav.subarray(0, 4).toString() === "RIFF" && wav.length > 1000,
      `speech: ${r.headers.get("content-type")}, ${wav.length} bytes`);
    return {};
  });
}

// refusal runs fn, which must fail with an SDK error that maps to cls.
async function refusal(name, cls, fn) {
  await check(name, async () => {
    try {
      await fn();
    } catch (err) {
      const e = privateInferenceError(err);
      assert(e instanceof cls, `${err?.constructor?.name} ${err?.status} mapped to ${e?.name}`);
      return { status: e.status, type: e.type };
    }
    throw new Error("the request was not refused");
  });
}

async function e2eRequired() {
  await refusal("e2e-required", E2ERequiredError, () =>
    clear.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: "in the clear" }] }));
  // Sealed requests still go.
  await check("sealed-with-require-e2e", async () => {
    const c = await client.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: `sealed ${marker}` }] });
    assert(c.choices[0].message.content.length > 0, "no answer");
    return {};
  });
}

// refused checks a sealed request the worker opens and refuses: its
// failure arrives sealed and is opened into the error the SDK throws,
// streamed or not, naming the field, never the content.
async function refused() {
  for (const stream of [false, true]) {
    await check(stream ? "refused-stream" : "refused", async () => {
      try {
        await client.chat.completions.create({ model: "sim-chat", stream, messages: [{ role: "robot", content: `bad ${marker}` }] });
      } catch (err) {
        assert(err?.status === 400 && String(err?.message).includes("messages.0.role") && !String(err?.message).includes(marker),
          `${err?.constructor?.name} ${err?.status}: ${err?.message}`);
        return { status: err.status };
      }
      throw new Error("the request was not refused");
    });
  }
}

async function planRequired() {
  await refusal("plan-required", PlanRequiredError, () =>
    client.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: `sealed ${marker}` }] }));
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// bench times the same chat, whole (16 tokens) and streamed (200 chunks),
// in the clear and sealed, interleaved so drift affects both alike; raw
// fetch, so the figures are the protocol's and not the SDK's.
async function bench() {
  const n = Number(process.env.SVC_BENCH_N ?? 100);
  const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
  const bodies = {
    unary: JSON.stringify({ model: "sim-chat", messages: [{ role: "user", content: "hello\nsim: tokens=16" }] }),
    stream: JSON.stringify({ model: "sim-chat", stream: true, messages: [{ role: "user", content: "hello\nsim: tokens=200" }] }),
  };
  const fetches = { clear: fetch, sealed: privateFetch };
  const times = { unary: { clear: [], sealed: [] }, stream: { clear: [], sealed: [] } };
  for (let i = 0; i < n + 5; i++) {
    for (const kind of ["unary", "stream"]) {
      for (const how of ["clear", "sealed"]) {
        const start = performance.now();
        const r = await fetches[how](`${base}/v1/chat/completions`, { method: "POST", headers, body: bodies[kind] });
        const body = await r.text();
        assert(r.status === 200 && body.length > 0, `${kind}/${how}: ${r.status}`);
        if (i >= 5) times[kind][how].push(performance.now() - start);
      }
    }
  }
  const m = (kind, how) => median(times[kind][how]);
  console.log(JSON.stringify({
    name: "bench",
    ok: true,
    n,
    unary_clear_ms: m("unary", "clear"),
    unary_sealed_ms: m("unary", "sealed"),
    stream_clear_ms: m("stream", "clear"),
    stream_sealed_ms: m("stream", "sealed"),
    per_request_ms: m("unary", "sealed") - m("unary", "clear"),
    per_chunk_us: ((m("stream", "sealed") - m("stream", "clear") - (m("unary", "sealed") - m("unary", "clear"))) / 200) * 1000,
  }));
}

switch (mode) {
  case "private":
    await privateChecks();
    break;
  case "e2e-required":
    await e2eRequired();
    break;
  case "plan-required":
    await planRequired();
    break;
  case "refused":
    await refused();
    break;
  case "bench":
    await bench();
    break;
  default:
    throw new Error(`unknown mode ${mode}`);
}
