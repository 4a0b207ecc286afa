// createPrivateFetch: the fetch counterpart of the Go package's Transport
// (e2ee/transport.go), step for step.

import { type Bytes, concat, hex, sha256, text, utf8 } from "./bytes.js";
import { CONTENT_TYPE, MAX_ENVELOPE, type Sealed, routingFields, sealRequest } from "./envelope.js";
import { ERROR_CODE_HEADER, InvalidReplyError, NO_WORKER_CODE, NoKeyError, UnsealableRequestError, clearMessage } from "./errors.js";
import { DirectoryRefusal, type FetchLike, type PublicKeyInfo, fetchKeys, readLimited, usableKeys } from "./keys.js";
import type { ResponseOpener } from "./reply.js";

/** Bounds a non-streaming sealed reply: base64 around the relay's 64 MB answers. */
export const MAX_REPLY = 96 << 20;

/** The worker that served a private request, as the gateway names it beside the sealed reply. */
export interface ServingWorker {
  id: string | null;
  name: string | null;
  version: string | null;
  /** The gateway's request id (X-Request-Id). */
  requestId: string | null;
  /** The request's model and URL, to tell concurrent requests apart. */
  model: string;
  url: string;
}

export interface PrivateFetchOptions {
  /** The fetch that sends the sealed requests and the key fetches; globalThis.fetch when absent. */
  fetch?: FetchLike;
  /**
   * Fingerprints (SHA-256 of the public key, hex) of the only keys to seal
   * to. The key directory is served by the gateway the requests are hidden
   * from; a client that learns its workers' fingerprints from their
   * operator need not trust it.
   */
  pin?: string[];
  /** How long a fetched key list is used, in milliseconds; 5 minutes when absent. */
  keyTTL?: number;
  /** Called once per sealed reply with the worker that served it. */
  onWorker?: (worker: ServingWorker) => void;
  /**
   * Send inference the gateway has no private form of (text completions,
   * the Responses and Messages APIs, moderations, translations) in the
   * clear. Without it such a request fails with UnsealableRequestError
   * and nothing is sent.
   */
  allowClear?: boolean;
}

export type PrivateFetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

// The /api/v1 forms come first so the gateway's base is cut at the right
// place.
const ROUTES = ["/api/v1/chat/completions", "/api/v1/embeddings", "/api/v1/rerank", "/api/v1/images/generations",
  "/api/v1/audio/speech", "/api/v1/audio/transcriptions",
  "/v1/chat/completions", "/v1/embeddings", "/v1/rerank", "/v1/images/generations", "/v1/audio/speech", "/v1/audio/transcriptions"];

/** The request header that pins a request to one worker. */
const PIN_HEADER = "x-svc-worker-id";

/** Inference routes the gateway serves only in the clear. */
const CLEAR_ONLY = ["/v1/completions", "/v1/responses", "/v1/messages", "/v1/moderations", "/v1/audio/translations"];

/** clearOnly tells whether a request is inference the gateway serves only in the clear. */
function clearOnly(method: string, url: URL, headers: Headers): boolean {
  if (method.toUpperCase() !== "POST" || mediaType(headers) === CONTENT_TYPE) return false;
  const path = routePath(url);
  return CLEAR_ONLY.some((r) => path.endsWith(r));
}

/** A new worker's key goes unused at most this long; a departed worker's is dropped on its first 503. */
const KEY_TTL = 5 * 60 * 1000;
/** Bounds the cache for a process sealing for many gateways or credentials. */
const MAX_CACHED = 1024;
/** Bounds a fetch of the key directory, which several requests may be waiting for. */
const DIRECTORY_TIMEOUT = 30 * 1000;

/** abortable waits for p, or rejects with signal's reason once it aborts. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

function mediaType(h: Headers): string {
  return (h.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
}

/**
 * sealedRoute returns the gateway's base URL (scheme, host and any path
 * before /v1 or /api/v1) for a request to seal, or undefined for one that
 * passes through: not a POST, not an inference route, or sealed already.
 */
function sealedRoute(method: string, url: URL, headers: Headers): URL | undefined {
  if (method.toUpperCase() !== "POST" || mediaType(headers) === CONTENT_TYPE) return undefined;
  const path = routePath(url);
  for (const route of ROUTES) {
    if (path.endsWith(route)) {
      const base = new URL(url.href);
      base.pathname = path.slice(0, path.length - route.length);
      base.search = "";
      base.hash = "";
      return base;
    }
  }
  return undefined;
}

/**
 * routePath is the path the gateway routes url by: percent-encoded bytes
 * decoded and runs of slashes made one, as the gateway reads a path, so
 * that /v1//chat/completions or /v1/%63hat/completions is sealed as the
 * chat completion the gateway serves it as; and no trailing slash. A path
 * that does not decode is kept as it is.
 */
function routePath(url: URL): string {
  let path = url.pathname;
  try {
    path = decodeURIComponent(path);
  } catch {
    // A stray %: the gateway cannot route it either.
  }
  return path.replace(/\/{2,}/g, "/").replace(/\/$/, "");
}

/** transcriptType is the Content-Type a transcript in format has, as the gateway answers it in the clear. */
function transcriptType(format: string): string {
  switch (format) {
    case "text":
      return "text/plain; charset=utf-8";
    case "srt":
      return "application/x-subrip; charset=utf-8";
    case "vtt":
      return "text/vtt; charset=utf-8";
  }
  return "application/json";
}

/** uploadFields reads a transcription upload's model and response format. */
async function uploadFields(contentType: string, body: Bytes): Promise<{ model: string; format: string }> {
  const params = contentType.split(";").slice(1).map((p) => p.trim().toLowerCase());
  if (mediaType(new Headers({ "content-type": contentType })) !== "multipart/form-data" || !params.some((p) => p.startsWith("boundary="))) {
    throw new UnsealableRequestError("e2ee: a transcription is sealed from a multipart/form-data upload");
  }
  let form: FormData;
  try {
    form = await new Response(body, { headers: { "content-type": contentType } }).formData();
  } catch {
    throw new UnsealableRequestError("e2ee: reading the upload: not a multipart form");
  }
  const field = async (name: string) => {
    const v = form.get(name);
    if (v === null) return "";
    return (typeof v === "string" ? v : await v.text()).trim();
  };
  const model = await field("model");
  if (model === "") throw new UnsealableRequestError("e2ee: the upload names no model");
  return { model, format: await field("response_format") };
}

/** workerName reads X-Worker-Name, percent-encoded with the prefix UTF-8'' when not ASCII. */
function workerName(h: Headers): string | null {
  const v = h.get("x-worker-name");
  if (v === null || !v.startsWith("UTF-8''")) return v;
  try {
    return decodeURIComponent(v.slice("UTF-8''".length));
  } catch {
    return v;
  }
}

function strOrNull(v: unknown): string | null {
  return typeof v === "string" ? v : null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * withClearSvc copies the gateway's clear "svc" annotation (the serving
 * worker) into an opened JSON object that has none, so a private reply
 * reads like a clear one. It is the one part of an opened body that is not
 * authenticated, and it says only what the gateway knows anyway.
 */
function withClearSvc(plain: Bytes, svc: unknown): Bytes {
  if (!isObject(svc)) return plain;
  let obj: unknown;
  try {
    obj = JSON.parse(text(plain));
  } catch {
    return plain;
  }
  if (!isObject(obj) || "svc" in obj) return plain;
  // Splice before the closing brace, keeping the worker's bytes.
  const t = text(plain).trim();
  return utf8(t.slice(0, -1) + (Object.keys(obj).length ? "," : "") + '"svc":' + JSON.stringify(svc) + "}");
}

interface Cached {
  keys: PublicKeyInfo[];
  fetched: number;
}

interface Prepared {
  base: URL;
  url: string;
  headers: Headers;
  init: RequestInit | undefined;
  signal: AbortSignal;
  body: Bytes;
  model: string;
  stream: boolean;
  replyType: string;
  /** A transcription: its envelope is held to the gateway's upload limit. */
  upload?: boolean;
}

/**
 * The gateway's limit on a whole transcription upload (the 25 MB file and
 * 1 MB of form), which holds for a sealed one's envelope too.
 */
const MAX_UPLOAD = 26 << 20;

/**
 * createPrivateFetch returns a fetch that seals chat completion,
 * embedding, rerank, image generation, speech and transcription requests
 * to a worker's key and opens the replies. Inference with no private form
 * (text completions, the Responses and Messages APIs, moderations,
 * translations) is refused unless allowClear is set; every other request
 * passes through. A request it cannot seal fails: it is never sent in the
 * clear.
 *
 * The gateway and the credentials come from each request (its URL and its
 * Authorization or X-Api-Key header), so one fetch serves any gateway and
 * organisation; keys are cached per gateway and credential.
 */
export function createPrivateFetch(options: PrivateFetchOptions = {}): PrivateFetch {
  const base: FetchLike = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const pins = options.pin?.map((p) => p.toLowerCase());
  const ttl = options.keyTTL ?? KEY_TTL;
  const cache = new Map<string, Cached>();
  // loading holds the directory fetch under way for a cache entry, which
  // every request that needs it then waits for rather than fetching again.
  const loading = new Map<string, Promise<PublicKeyInfo[] | DirectoryRefusal>>();

  // cachedKeys returns the keys for a gateway and credential, fetching them
  // when refresh is set or the cache is stale; fresh reports a fetch.
  async function cachedKeys(p: Prepared, refresh: boolean): Promise<{ keys: PublicKeyInfo[]; fresh: boolean } | DirectoryRefusal> {
    // Keyed by credential as well: one process may act for several
    // organisations. Hashed so the cache holds no credentials.
    const id = hex(await sha256(utf8(JSON.stringify([p.base.href, p.headers.get("authorization"), p.headers.get("x-api-key")]))));
    const e = cache.get(id);
    if (e && !refresh && Date.now() - e.fetched < ttl) return { keys: e.keys, fresh: false };
    let pending = loading.get(id);
    if (!pending) {
      pending = load(id, p);
      loading.set(id, pending);
      const done = pending;
      const forget = () => {
        if (loading.get(id) === done) loading.delete(id);
      };
      done.then(forget, forget);
    }
    const got = await abortable(pending, p.signal);
    return got instanceof DirectoryRefusal ? got : { keys: got, fresh: true };
  }

  // load fetches the directory for a cache entry and caches its usable
  // keys. It is shared by the requests waiting for it, so it is bounded by
  // time rather than by one of their signals; each of them can still give
  // up on it (cachedKeys).
  async function load(id: string, p: Prepared): Promise<PublicKeyInfo[] | DirectoryRefusal> {
    const init: RequestInit = { ...p.init, signal: AbortSignal.timeout(DIRECTORY_TIMEOUT) };
    const all = await fetchKeys(base, p.base, p.headers, init);
    if (all instanceof DirectoryRefusal) return all;
    // Entries this client cannot use are dropped, not fatal: a directory
    // may list keys for newer clients.
    const keys = await usableKeys(all, pins);
    if (cache.size >= MAX_CACHED) cache.clear();
    cache.set(id, { keys, fetched: Date.now() });
    return keys;
  }

  // pick chooses a key for the model. The key decides the worker, so among
  // several workers serving the model one is chosen at random; a request
  // pinned to a worker (X-Svc-Worker-Id) is sealed to that worker's key,
  // as the gateway refuses one sealed to another's.
  async function pick(p: Prepared, refresh: boolean): Promise<PublicKeyInfo | DirectoryRefusal> {
    const pin = p.headers.get(PIN_HEADER)?.trim() || undefined;
    const serving = (keys: PublicKeyInfo[]) =>
      keys.filter((k) => k.models?.includes(p.model) && (pin === undefined || k.worker_id === pin));
    let got = await cachedKeys(p, refresh);
    if (got instanceof DirectoryRefusal) return got;
    let c = serving(got.keys);
    if (c.length === 0 && !got.fresh) {
      // A worker that came online since the fetch may serve it.
      got = await cachedKeys(p, true);
      if (got instanceof DirectoryRefusal) return got;
      c = serving(got.keys);
    }
    if (c.length === 0) throw new NoKeyError(p.model, pin);
    return c[Math.floor(Math.random() * c.length)]!;
  }

  function report(p: Prepared, resp: Response, svc: unknown) {
    if (!options.onWorker) return;
    const w = isObject(svc) && isObject(svc.worker) ? svc.worker : undefined;
    options.onWorker({
      id: w ? strOrNull(w.id) : resp.headers.get("x-worker-id"),
      name: w ? strOrNull(w.name) : workerName(resp.headers),
      version: w ? strOrNull(w.version) : null,
      requestId: (isObject(svc) ? strOrNull(svc.request_id) : null) ?? resp.headers.get("x-request-id"),
      model: p.model,
      url: p.url,
    });
  }

  // send seals the body to a key for its model, sends it and opens the
  // reply.
  async function send(p: Prepared, refresh: boolean): Promise<Response> {
    const key = await pick(p, refresh);
    if (key instanceof DirectoryRefusal) return key.response();
    const sealed: Sealed = await sealRequest(key, p.model, p.stream, p.body);
    if (p.upload && sealed.envelope.length > MAX_UPLOAD) {
      throw new UnsealableRequestError(
        `e2ee: the sealed upload is ${(sealed.envelope.length / 1e6).toFixed(1)} MB, over the gateway's ${MAX_UPLOAD >> 20} MB limit ` +
          `for audio (sealing adds a third: about ${((MAX_UPLOAD >> 20) * 3) >> 2} MB of audio fits)`,
      );
    }
    const headers = new Headers(p.headers);
    headers.set("content-type", CONTENT_TYPE);
    headers.delete("content-length");
    const init: RequestInit & { duplex?: string } = { ...p.init, method: "POST", headers, body: sealed.envelope, signal: p.signal };
    delete init.duplex;
    const resp = await base(p.url, init);
    return openResponse(p, resp, sealed.opener);
  }

  // openResponse turns the gateway's reply into the clear one. Only a
  // reply that opens is returned as a success; a non-2xx that is not
  // sealed is the gateway's own error, which holds nothing secret, and
  // passes as it is.
  async function openResponse(p: Prepared, resp: Response, opener: ResponseOpener): Promise<Response> {
    const headers = new Headers(resp.headers);
    headers.delete("content-encoding");
    const init = { status: resp.status, statusText: resp.statusText, headers };
    if (resp.ok && p.stream && mediaType(resp.headers) === "text/event-stream" && resp.body) {
      headers.delete("content-length");
      headers.set("content-type", "text/event-stream");
      // The clear {"svc": ...} event names the worker; a gateway that sent
      // none still named it in the headers.
      let reported = false;
      const once = (svc: unknown) => {
        if (!reported) report(p, resp, svc);
        reported = true;
      };
      const body = opener.openStream(resp.body, { onSvc: once, onDone: () => once(undefined) });
      return new Response(body, init);
    }
    const raw = await readLimited(resp.body, MAX_REPLY);
    if (!raw) throw new InvalidReplyError(`e2ee: invalid encrypted reply: reply larger than ${MAX_REPLY} bytes`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text(raw));
    } catch {
      parsed = undefined;
    }
    if (isObject(parsed) && "svc_e2e" in parsed) {
      if (resp.ok && p.stream) {
        // The worker streams what was asked to be streamed; a body in its
        // place was rebuilt by someone else.
        throw new InvalidReplyError(`e2ee: invalid encrypted reply: a streaming request got a non-streaming ${resp.status} reply`);
      }
      const plain = await opener.openBody(raw);
      report(p, resp, parsed.svc);
      // An opened error is the worker's JSON error body, whatever the
      // success would have been.
      const type = resp.ok ? p.replyType : "application/json";
      headers.set("content-type", type);
      const body = type.startsWith("application/json") ? withClearSvc(plain, parsed.svc) : plain;
      headers.set("content-length", String(body.length));
      return new Response(body, init);
    }
    if (resp.ok) {
      const msg = clearMessage(parsed);
      throw new InvalidReplyError(`e2ee: invalid encrypted reply: the ${resp.status} reply is not sealed${msg ? ": " + msg : ""}`);
    }
    return new Response(raw, init);
  }

  return async function privateFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const method = init?.method ?? (input instanceof Request ? input.method : "GET");
    // A relative URL is the page's, as fetch reads it in a browser.
    const here = (globalThis as { location?: { href: string } }).location?.href;
    const url = new URL(input instanceof Request ? input.url : String(input), here);
    const given = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    const gateway = sealedRoute(method, url, given);
    if (!gateway) {
      if (!options.allowClear && clearOnly(method, url, given)) {
        throw new UnsealableRequestError(
          `e2ee: POST ${routePath(url)} has no private form and would be sent in the clear; send it without the private fetch, or set allowClear`,
        );
      }
      return base(input, init);
    }

    // A streamed body needs duplex to be read into a Request.
    const req = new Request(input, { ...init, duplex: "half" } as RequestInit);
    const body = (await readLimited(req.body, MAX_ENVELOPE)) as Bytes | undefined;
    if (!body) throw new UnsealableRequestError(`e2ee: request body larger than ${MAX_ENVELOPE} bytes`);
    if (body.length === 0) throw new UnsealableRequestError("e2ee: the request has no body to seal");
    const p: Prepared = { base: gateway, url: req.url, headers: req.headers, init, signal: req.signal, body,
      model: "", stream: false, replyType: "application/json" };
    const path = routePath(url);
    if (path.endsWith("/audio/transcriptions")) {
      // An upload is sealed with its Content-Type on a line before it, for
      // its multipart boundary; the reply opens to the format asked.
      const ctype = req.headers.get("content-type") ?? "";
      const f = await uploadFields(ctype, body);
      p.model = f.model;
      p.replyType = transcriptType(f.format);
      p.body = concat(utf8(ctype + "\n"), body);
      p.upload = true;
    } else {
      const f = routingFields(body);
      p.model = f.model;
      p.stream = f.stream;
      if (path.endsWith("/audio/speech")) p.replyType = "audio/wav";
    }
    const resp = await send(p, false);
    if (resp.status === 503 && resp.headers.get(ERROR_CODE_HEADER) === NO_WORKER_CODE) {
      // The key left with its worker; the directory lists the current
      // ones. Once: a second miss is the gateway's answer to give.
      await resp.body?.cancel();
      return send(p, true);
    }
    return resp;
  };
}
