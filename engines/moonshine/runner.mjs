// Moonshine speech-to-text runner for svc worker's moonshine engine.
//
//   node runner.mjs [--size base|tiny] [--threads N]
//
// It loads Silero VAD v5 and a Moonshine model once, prints a ready line,
// then answers requests from stdin one at a time, on stdout:
//
//   ready    {"ready":true,"model":"moonshine-base","load_ms":900}
//   request  {"id":1,"samples":N} + "\n", then N float32 samples,
//            little-endian, mono, 16 kHz
//   answer   {"id":1,"segments":[{"start":0.4,"end":3.1,"text":"...",
//            "avg_logprob":-0.1,"no_speech_prob":0.02}],"vad_ms":5,"decode_ms":240}
//   failure  {"id":1,"error":"..."}
//
// Broken framing is fatal: the runner exits and svc starts another.
// Diagnostics go to stderr; stdout carries nothing but answers.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import llamaTokenizer from "llama-tokenizer-js";

const RATE = 16000;

// Voice activity detection. Silero VAD v5 rates 32 ms frames; a segment
// starts on a frame at ON or above and ends after MIN_SILENCE below OFF.
const FRAME = 512;
const CONTEXT = 64; // samples of the previous frame Silero v5 reads first
const ON = 0.5;
const OFF = 0.35;
const MIN_SILENCE = Math.round((0.3 * RATE) / FRAME);
const MIN_SPEECH = Math.round((0.25 * RATE) / FRAME);
// Moonshine drops words cut at a segment's edges: keep some audio around.
const PAD = 0.2 * RATE;
// Moonshine handles utterances of up to about 30 s; longer speech is
// split at its quietest frame.
const MAX_SEGMENT = Math.floor((30 * RATE) / FRAME);

// Moonshine decoding: token ids of its tokenizer, and a bound on the text
// a second of speech can produce, against decoding loops.
const BOS = 1;
const EOS = 2;
const TOKENS_PER_SECOND = 6;

// A fatal error ends with a one-line summary: svc quotes the last lines
// of stderr when the runner dies.
process.on("uncaughtException", (err) => {
  console.error(err);
  console.error(`moonshine runner: ${err.message}`);
  process.exit(1);
});

const { values: args } = parseArgs({
  options: {
    size: { type: "string", default: "base" },
    threads: { type: "string", default: "0" },
  },
});
if (!["base", "tiny"].includes(args.size)) {
  throw new Error(`--size ${args.size}: want base or tiny`);
}
if (!/^\d+$/.test(args.threads)) {
  throw new Error(`--threads ${args.threads}: want a whole number`);
}

const models = path.join(path.dirname(fileURLToPath(import.meta.url)), "models");
const options = {
  executionProviders: ["cpu"],
  intraOpNumThreads: Number(args.threads), // 0: one per core
  logSeverityLevel: 3,
};
const started = performance.now();
const vad = await ort.InferenceSession.create(path.join(models, "silero_vad_v5.onnx"), options);
const modelDir = path.join(models, args.size, "quantized");
const encoder = await ort.InferenceSession.create(path.join(modelDir, "encoder_model.onnx"), options);
const decoder = await ort.InferenceSession.create(path.join(modelDir, "decoder_model_merged.onnx"), options);
// The first run of a session is several times slower than the next ones:
// pay it now rather than on the first request.
await transcribe(new Float32Array(RATE));
reply({ ready: true, model: `moonshine-${args.size}`, load_ms: Math.round(performance.now() - started) });

for await (const { id, audio } of requests(process.stdin)) {
  try {
    reply({ id, ...(await recognise(audio)) });
  } catch (err) {
    reply({ id, error: err.message });
  }
}

function reply(msg) {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

// requests reads the framed requests of stdin. Samples are copied straight
// into one buffer per request: long audio arrives in many small chunks.
async function* requests(input) {
  let head = Buffer.alloc(0); // a header line not yet complete
  let req = null; // the header whose samples are being read
  let body, filled;
  for await (let chunk of input) {
    while (chunk.length > 0) {
      if (!req) {
        const nl = chunk.indexOf(10);
        if (nl < 0) {
          head = Buffer.concat([head, chunk]);
          break;
        }
        req = JSON.parse(Buffer.concat([head, chunk.subarray(0, nl)]));
        if (!Number.isSafeInteger(req.samples) || req.samples < 0) {
          throw new Error(`request ${req.id}: bad sample count ${req.samples}`);
        }
        head = Buffer.alloc(0);
        chunk = chunk.subarray(nl + 1);
        body = Buffer.alloc(req.samples * 4);
        filled = 0;
      }
      const n = chunk.copy(body, filled);
      filled += n;
      chunk = chunk.subarray(n);
      if (filled === body.length) {
        // A fresh Buffer.alloc starts its own ArrayBuffer, so the view is
        // aligned; the hosts Node runs on are little-endian.
        yield { id: req.id, audio: new Float32Array(body.buffer, body.byteOffset, req.samples) };
        req = null;
      }
    }
  }
  if (req || head.length > 0) {
    throw new Error("stdin ended inside a request");
  }
}

async function recognise(audio) {
  let t = performance.now();
  const probs = await speechProbabilities(audio);
  const spans = segment(probs, audio.length);
  const vadMs = performance.now() - t;
  t = performance.now();
  const segments = [];
  for (const { start, end, speech } of spans) {
    const { text, avgLogprob } = await transcribe(audio.subarray(start, end));
    segments.push({
      start: start / RATE,
      end: end / RATE,
      text,
      avg_logprob: avgLogprob,
      no_speech_prob: 1 - speech,
    });
  }
  return { segments, vad_ms: Math.round(vadMs), decode_ms: Math.round(performance.now() - t) };
}

// speechProbabilities rates every frame of audio, the last one padded with
// silence.
async function speechProbabilities(audio) {
  let state = new ort.Tensor("float32", new Float32Array(2 * 128), [2, 1, 128]);
  const sr = new ort.Tensor("int64", BigInt64Array.of(BigInt(RATE)), []);
  const input = new Float32Array(CONTEXT + FRAME);
  const probs = new Float32Array(Math.ceil(audio.length / FRAME));
  for (let i = 0; i < probs.length; i++) {
    input.copyWithin(0, FRAME); // the previous frame's tail becomes the context
    input.fill(0, CONTEXT);
    input.set(audio.subarray(i * FRAME, (i + 1) * FRAME), CONTEXT);
    const out = await vad.run({ input: new ort.Tensor("float32", input, [1, input.length]), state, sr });
    state = out.stateN;
    probs[i] = out.output.data[0];
  }
  return probs;
}

// segment turns frame probabilities into spans of samples to transcribe,
// each with the mean speech probability of its frames.
function segment(probs, length) {
  const frames = [];
  let start = -1;
  let silentSince = -1;
  probs.forEach((p, i) => {
    if (p >= ON) {
      if (start < 0) start = i;
      silentSince = -1;
    } else if (start >= 0 && p < OFF) {
      if (silentSince < 0) silentSince = i;
      if (i - silentSince + 1 >= MIN_SILENCE) {
        if (silentSince - start >= MIN_SPEECH) frames.push(...split(probs, start, silentSince));
        start = -1;
        silentSince = -1;
      }
    }
  });
  if (start >= 0 && probs.length - start >= MIN_SPEECH) frames.push(...split(probs, start, probs.length));

  return frames.map(([from, to], i) => {
    // Pads may not reach into the neighbours' speech.
    const lo = i > 0 ? Math.ceil(((frames[i - 1][1] + from) * FRAME) / 2) : 0;
    const hi = i + 1 < frames.length ? Math.floor(((to + frames[i + 1][0]) * FRAME) / 2) : length;
    const speech = probs.subarray(from, to).reduce((a, b) => a + b, 0) / (to - from);
    return { start: Math.max(from * FRAME - PAD, lo), end: Math.min(to * FRAME + PAD, hi), speech };
  });
}

// split cuts frames [start, end) into pieces of at most MAX_SEGMENT
// frames, each cut at the least speech-like frame of the second half.
function split(probs, start, end) {
  const out = [];
  while (end - start > MAX_SEGMENT) {
    let cut = start + MAX_SEGMENT;
    for (let i = start + Math.floor(MAX_SEGMENT / 2); i < start + MAX_SEGMENT; i++) {
      if (probs[i] < probs[cut]) cut = i;
    }
    out.push([start, cut]);
    start = cut;
  }
  out.push([start, end]);
  return out;
}

// transcribe decodes audio greedily, with the mean log-probability of the
// tokens chosen.
async function transcribe(audio) {
  const { last_hidden_state: encoded } = await encoder.run({
    input_values: new ort.Tensor("float32", audio, [1, audio.length]),
  });
  let cache = emptyCache();
  const tokens = [];
  let token = BOS;
  let logprob = 0;
  let steps = 0;
  const limit = Math.ceil((audio.length / RATE) * TOKENS_PER_SECOND);
  while (steps < limit) {
    const out = await decoder.run({
      input_ids: new ort.Tensor("int64", BigInt64Array.of(BigInt(token)), [1, 1]),
      encoder_hidden_states: encoded,
      use_cache_branch: new ort.Tensor("bool", [steps > 0], [1]),
      ...cache,
    });
    // Moonshine sometimes ends a clip before its first word. The VAD
    // heard speech in it, so end-of-text is barred as the first token.
    const pick = best(out.logits.data, steps === 0 ? EOS : -1);
    logprob += pick.logprob;
    steps++;
    if (pick.token === EOS) break;
    tokens.push(pick.token);
    token = pick.token;
    cache = nextCache(cache, out, steps === 1);
  }
  return { text: llamaTokenizer.decode(tokens).trim(), avgLogprob: steps ? logprob / steps : 0 };
}

// best is the most likely token other than barred, with its
// log-probability.
function best(logits, barred) {
  let token = -1;
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i] > max) max = logits[i];
    if (i !== barred && (token < 0 || logits[i] > logits[token])) token = i;
  }
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - max);
  return { token, logprob: logits[token] - max - Math.log(sum) };
}

// emptyCache is the decoder's past keys and values before the first step,
// shaped from the model's own input metadata.
function emptyCache() {
  const cache = {};
  for (const { name, shape } of decoder.inputMetadata) {
    if (!name.startsWith("past_key_values.")) continue;
    cache[name] = new ort.Tensor("float32", new Float32Array(0), [1, shape[1], 0, shape[3]]);
  }
  return cache;
}

// nextCache keeps the decoder's self-attention keys and values of every
// step and its encoder ones from the first: they do not change after it.
function nextCache(cache, out, first) {
  const next = {};
  for (const name of Object.keys(cache)) {
    const keep = !first && name.includes(".encoder.");
    next[name] = keep ? cache[name] : out[name.replace("past_key_values", "present")];
  }
  return next;
}
