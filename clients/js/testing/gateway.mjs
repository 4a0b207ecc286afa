// A fake gateway and the workers behind it, for the tests: the gateway
// routes on the clear envelope only, the workers open requests and seal
// replies as e2ee does on a real worker.

import { Aes256Gcm, CipherSuite, HkdfSha256 } from "@hpke/core";
import { XWing } from "@hpke/hybridkem-x-wing";

import { encode64, decode64, hex, utf8, text, concat } from "../dist/bytes.js";
import { info } from "../dist/envelope.js";
import { keyId } from "../dist/keys.js";
import { ChunkCipher, event } from "../dist/reply.js";

export const suite = new CipherSuite({ kem: new XWing(), kdf: new HkdfSha256(), aead: new Aes256Gcm() });

export const CONTENT_TYPE = "application/vnd.svc.e2e+json";

/** A worker's key: from a seed and its known public key, or fresh. */
export async function workerKey(models = ["chat-model", "embed-model", "tts-model", "stt-model"], seed, publicKey) {
  let privateKey, pub;
  if (seed) {
    privateKey = await suite.kem.deserializePrivateKey(seed);
    pub = publicKey;
  } else {
    const kp = await suite.kem.generateKeyPair();
    privateKey = kp.privateKey;
    pub = new Uint8Array(await suite.kem.serializePublicKey(kp.publicKey));
  }
  const id = await keyId(pub);
  return {
    privateKey,
    publicKey: pub,
    info: { key_id: id, version: 1, kem_id: 0x647a, kdf_id: 1, aead_id: 2, public_key: encode64(pub), worker_id: "w-" + id, worker_name: "box", models },
  };
}

/** openRequest is the worker's side: it opens an envelope addressed to worker. */
export async function openRequest(worker, envelope) {
  const e = JSON.parse(text(envelope));
  const enc = decode64(e.enc);
  const recipient = await suite.createRecipientContext({
    recipientKey: worker.privateKey,
    enc,
    info: info({ keyId: e.key_id, model: e.model, stream: e.stream }),
  });
  const body = new Uint8Array(await recipient.open(decode64(e.ct)));
  const secret = new Uint8Array(await recipient.export(utf8("svc e2e v1 response"), 32));
  return { envelope: e, body, secret, enc };
}

/** Sealer seals one reply, as e2ee.ResponseSealer does. */
export class Sealer {
  static async create(secret, enc, nonce = crypto.getRandomValues(new Uint8Array(32))) {
    const s = new Sealer();
    s.cipher = await ChunkCipher.create(secret, enc, nonce);
    s.nonce = nonce;
    s.next = 0;
    return s;
  }
  async seal(final, pt) {
    return this.cipher.seal(this.next++, final, typeof pt === "string" ? utf8(pt) : pt);
  }
  startData() {
    return JSON.stringify({ svc_e2e: 1, response_nonce: encode64(this.nonce) });
  }
  async eventData(pt) {
    return JSON.stringify({ c: encode64(await this.seal(false, pt)) });
  }
  async finalData() {
    return JSON.stringify({ c: encode64(await this.seal(true, "[DONE]")), final: true });
  }
  async replyBody(pt, svc) {
    const reply = { svc_e2e: 1, response_nonce: encode64(this.nonce), chunks: [encode64(await this.seal(true, pt))] };
    if (svc) reply.svc = svc;
    return JSON.stringify(reply);
  }
}

const sse = (data) => `data: ${data}\n\n`;

/** dribble delivers parts as a stream in small pieces, to cross every boundary. */
export function dribble(parts, size = 7) {
  const all = utf8(parts.join(""));
  let off = 0;
  return new ReadableStream({
    pull(c) {
      if (off >= all.length) return c.close();
      c.enqueue(all.slice(off, off + size));
      off += size;
    },
  });
}

function gatewayError(status, type, message, headers = {}) {
  return new Response(JSON.stringify({ detail: { error: { message, type } } }), {
    status,
    headers: { "content-type": "application/json", "x-request-id": "req-err", ...headers },
  });
}

export const SVC = { worker: { id: "w1", name: "böx", version: "0.17.0" }, request_id: "req-1" };
const WORKER_HEADERS = { "x-worker-id": "w1", "x-worker-name": "UTF-8''b%C3%B6x", "x-request-id": "req-1" };

export class FakeGateway {
  constructor(...workers) {
    this.workers = new Map();
    this.listed = [];
    this.fetches = 0;
    this.requests = 0;
    this.keysStatus = 0;
    this.keysBody = undefined;
    this.misbehave = "";
    this.requireE2E = false;
    // keysHang holds every directory request until its signal aborts.
    this.keysHang = false;
    this.keyInits = []; // the init of every directory request
    this.seen = []; // every request body the gateway received
    for (const w of workers) this.connect(w);
    this.fetch = this.fetch.bind(this);
  }

  connect(w) {
    this.workers.set(w.info.key_id, w);
    this.listed.push(w.info);
  }

  disconnect(w) {
    this.workers.delete(w.info.key_id);
    this.listed = this.listed.filter((k) => k.key_id !== w.info.key_id);
  }

  async fetch(input, init = {}) {
    const req = new Request(input, init);
    const url = new URL(req.url);
    if (url.protocol === "data:") return new Response("");
    const body = new Uint8Array(await req.arrayBuffer());
    this.seen.push(text(body));
    if (req.headers.get("authorization") !== "Bearer test-key") return gatewayError(401, "authentication_error", "bad key");
    const path = url.pathname.replace(/^\/gw/, "").replace(/^\/api/, "");
    if (req.method === "GET" && path === "/v1/e2e/keys") {
      this.fetches++;
      this.keyInits.push(init);
      if (this.keysHang) {
        await new Promise((_, reject) => {
          if (init.signal?.aborted) reject(init.signal.reason);
          init.signal?.addEventListener("abort", () => reject(init.signal.reason), { once: true });
        });
      }
      if (this.keysStatus) return gatewayError(this.keysStatus, "plan_required", "private inference needs the Pro plan");
      if (this.keysBody !== undefined) return new Response(this.keysBody, { headers: { "content-type": "application/json" } });
      return Response.json({ keys: this.listed });
    }
    if (req.method === "GET" && path === "/v1/models") return Response.json({ object: "list", data: [{ id: "chat-model", object: "model" }] });
    if (req.method !== "POST") return new Response("not found", { status: 404 });
    this.requests++;
    if ((req.headers.get("content-type") ?? "").split(";")[0] !== CONTENT_TYPE) {
      if (this.requireE2E) return gatewayError(403, "e2e_required", "this organisation requires end-to-end encryption");
      return Response.json({ clear: true, path });
    }
    return this.inference(path, body);
  }

  async inference(path, body) {
    let env;
    try {
      env = JSON.parse(text(body));
    } catch {
      return gatewayError(400, "invalid_encrypted_request", "envelope is not JSON");
    }
    if (this.misbehave === "reject-envelope") return gatewayError(400, "invalid_encrypted_request", "unsupported envelope version");
    const w = this.workers.get(env.key_id);
    if (!w) {
      return gatewayError(503, "service_unavailable", `No connected worker holds the key ${env.key_id}`, {
        "x-svc-error-code": "no_private_inference_worker",
        "retry-after": "1",
      });
    }
    const opened = await openRequest(w, body);
    const s = await Sealer.create(opened.secret, opened.enc);
    const sealedJSON = (b, status = 200) =>
      new Response(b, { status, headers: { "content-type": CONTENT_TYPE, "content-length": String(utf8(b).length), ...WORKER_HEADERS } });
    if (this.misbehave === "unsealed") {
      return Response.json({ id: "x", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "forged" } }] });
    }
    if (path === "/v1/audio/transcriptions") {
      const clear = text(opened.body);
      const nl = clear.indexOf("\n");
      const form = await new Response(opened.body.slice(utf8(clear.slice(0, nl + 1)).length), {
        headers: { "content-type": clear.slice(0, nl) },
      }).formData();
      const file = form.get("file");
      const said = `heard ${(await file.arrayBuffer()).byteLength} bytes, prompt ${form.get("prompt")}`;
      const out = form.get("response_format") === "text" ? said : JSON.stringify({ text: said });
      return sealedJSON(await s.replyBody(out, SVC));
    }
    const req = JSON.parse(text(opened.body));
    if (path === "/v1/audio/speech" && req.input.length > 4096) {
      return sealedJSON(await s.replyBody(JSON.stringify({ error: { message: "input over 4,096 characters", type: "invalid_request_error" } })), 400);
    }
    if (path === "/v1/audio/speech") {
      return sealedJSON(await s.replyBody(concat(utf8("RIFF"), utf8(req.input)), SVC));
    }
    if (path === "/v1/embeddings") {
      return sealedJSON(await s.replyBody(JSON.stringify({ object: "list", data: [{ object: "embedding", index: 0, embedding: [0.5, req.input.length] }], model: req.model }), SVC));
    }
    const prompt = req.messages.at(-1).content;
    if (prompt === "too long") {
      // The engine's error may quote the prompt, so it is sealed too.
      return sealedJSON(await s.replyBody(JSON.stringify({ error: { message: "prompt too long: too long", type: "invalid_request_error" } })), 400);
    }
    const answer = "echo: " + prompt;
    if (!env.stream || this.misbehave === "body-for-stream") {
      return sealedJSON(
        await s.replyBody(JSON.stringify({ id: "c1", object: "chat.completion", created: 1, model: req.model,
          choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: answer } }] }), SVC),
      );
    }
    const chunk = (content) => JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: req.model,
      choices: [{ index: 0, delta: { content } }] });
    const parts = [": keep-alive\n\n", sse(s.startData())];
    const events = [await s.eventData(chunk("echo: ")), await s.eventData(chunk(prompt))];
    if (this.misbehave === "tamper") {
      const e = JSON.parse(events[1]);
      const ct = decode64(e.c);
      ct[3] ^= 1;
      events[1] = JSON.stringify({ c: encode64(ct) });
    }
    if (this.misbehave === "reorder") events.reverse();
    for (const e of events) parts.push(sse(e), ": keep-alive\n\n");
    if (this.misbehave === "error-frame") {
      parts.push(sse(JSON.stringify({ error: { message: "worker vanished", type: "service_unavailable" } })));
    }
    // As the relay does: the final chunk, the clear svc naming the worker,
    // the clear terminator.
    if (this.misbehave !== "drop-final" && this.misbehave !== "truncate") parts.push(sse(await s.finalData()));
    if (this.misbehave !== "no-svc") parts.push(sse(JSON.stringify({ svc: SVC })));
    if (this.misbehave !== "truncate") parts.push("data: [DONE]\n\n");
    return new Response(dribble(parts), { headers: { "content-type": "text/event-stream", ...WORKER_HEADERS } });
  }
}

export { event, hex };
