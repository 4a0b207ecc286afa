// The key directory, GET {gateway}/api/v1/e2e/keys, asked with the
// inference request's own credentials, as e2ee/transport.go does.

import { type Bytes, decode64, hex, sha256, text, utf8 } from "./bytes.js";
import { E2EEError, KeyDirectoryError } from "./errors.js";

/** One entry of the key directory, as the gateway serves it. */
export interface PublicKeyInfo {
  key_id: string;
  version: number;
  kem_id: number;
  kdf_id: number;
  aead_id: number;
  /** Standard base64 of the 1216-byte X-Wing public key. */
  public_key: string;
  /** Filled in by the gateway: the worker holding the key. */
  worker_id?: string;
  worker_name?: string;
  /** The models the worker serves privately. */
  models?: string[];
}

export const PUBLIC_KEY_SIZE = 1184 + 32;
/** A key is about 1.7 kB of JSON; this bounds what a fetch reads. */
export const MAX_DIRECTORY = 8 << 20;

/** keyId names a key: the first 8 bytes of SHA-256 of it, in hex. */
export async function keyId(publicKey: Uint8Array): Promise<string> {
  return hex((await sha256(publicKey)).subarray(0, 8));
}

/**
 * fingerprint is the whole SHA-256 of a public key in hex. Pin keys by
 * fingerprint, not by key id: 64 bits are cheap enough to collide for
 * someone able to publish keys.
 */
export async function fingerprint(publicKey: Uint8Array): Promise<string> {
  return hex(await sha256(publicKey));
}

/**
 * checkKey checks an entry and returns its public key. The key id is
 * recomputed, so an entry cannot name one key and carry another.
 */
export async function checkKey(k: PublicKeyInfo): Promise<Bytes> {
  const name = `e2ee: key ${String(k.key_id)}`;
  if (k.version !== 1) throw new E2EEError(`${name}: unsupported version ${String(k.version)}`);
  if (k.kem_id !== 0x647a || k.kdf_id !== 0x0001 || k.aead_id !== 0x0002) {
    throw new E2EEError(`${name}: unsupported suite kem ${String(k.kem_id)}, kdf ${String(k.kdf_id)}, aead ${String(k.aead_id)}`);
  }
  const pub = typeof k.public_key === "string" ? decode64(k.public_key) : undefined;
  if (!pub || pub.length !== PUBLIC_KEY_SIZE) throw new E2EEError(`${name}: the public key is not ${PUBLIC_KEY_SIZE} bytes of base64`);
  if ((await keyId(pub)) !== k.key_id) throw new E2EEError(`${name}: key id does not match the public key`);
  return pub;
}

/**
 * A refusal of the key directory (401, 403 plan_required...). The fetch
 * answers the inference request with it, so the gateway's error reaches
 * the caller as on a clear request.
 */
export class DirectoryRefusal {
  constructor(
    readonly status: number,
    readonly statusText: string,
    readonly headers: Headers,
    readonly body: Bytes,
  ) {}

  response(): Response {
    return new Response(this.body, { status: this.status, statusText: this.statusText, headers: this.headers });
  }
}

export type FetchLike = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/** readLimited reads a body, failing once it passes max bytes. */
export async function readLimited(body: ReadableStream<Uint8Array> | null, max: number): Promise<Bytes | undefined> {
  if (!body) return new Uint8Array();
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > max) {
      await reader.cancel();
      return undefined;
    }
    parts.push(value);
  }
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/**
 * fetchKeys asks the directory of the gateway at base (the URL before
 * /v1 or /api/v1) with the credentials in headers. init is the inference
 * request's own: what it says of how to fetch (a signal, a proxy's
 * dispatcher, credentials mode...) holds for the directory too; its
 * method, headers and body do not.
 */
export async function fetchKeys(
  fetchFn: FetchLike,
  base: URL,
  headers: Headers,
  init?: RequestInit,
): Promise<PublicKeyInfo[] | DirectoryRefusal> {
  const h = new Headers({ Accept: "application/json" });
  for (const name of ["authorization", "x-api-key", "user-agent"]) {
    const v = headers.get(name);
    if (v !== null) h.set(name, v);
  }
  const url = new URL(base.href.replace(/\/*$/, "/") + "api/v1/e2e/keys");
  const opts: RequestInit & { duplex?: string } = { ...init, method: "GET", headers: h };
  delete opts.body;
  delete opts.duplex;
  const resp = await fetchFn(url, opts);
  const body = await readLimited(resp.body, MAX_DIRECTORY);
  if (!resp.ok) {
    // A refusal is passed on whole; one too large to be an error body is
    // cut, as it is not read further.
    return new DirectoryRefusal(resp.status, resp.statusText, resp.headers, body ?? utf8(""));
  }
  if (!body) throw new KeyDirectoryError(`e2ee: key directory larger than ${MAX_DIRECTORY} bytes`);
  return parseKeys(body);
}

/**
 * parseKeys reads {"keys": [...]}. A malformed directory fails as a whole,
 * as encoding/json fails on a field of the wrong type; entries this client
 * cannot use are dropped later, since a directory may list keys for newer
 * clients.
 */
export function parseKeys(body: Uint8Array): PublicKeyInfo[] {
  let v: unknown;
  try {
    v = JSON.parse(text(body));
  } catch {
    throw new KeyDirectoryError("e2ee: key directory: not JSON");
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new KeyDirectoryError("e2ee: key directory: not a JSON object");
  const keys = (v as { keys?: unknown }).keys;
  if (keys === undefined || keys === null) return [];
  if (!Array.isArray(keys)) throw new KeyDirectoryError("e2ee: key directory: keys is not a list");
  return keys.map((k, i) => {
    const bad = (field: string) => new KeyDirectoryError(`e2ee: key directory: entry ${i}: ${field} has the wrong type`);
    if (typeof k !== "object" || k === null || Array.isArray(k)) throw bad("the entry");
    const e = k as Record<string, unknown>;
    for (const f of ["key_id", "public_key", "worker_id", "worker_name"]) {
      if (e[f] !== undefined && e[f] !== null && typeof e[f] !== "string") throw bad(f);
    }
    for (const f of ["version", "kem_id", "kdf_id", "aead_id"]) {
      if (e[f] !== undefined && e[f] !== null && !Number.isInteger(e[f])) throw bad(f);
    }
    if (e.models !== undefined && e.models !== null && !(Array.isArray(e.models) && e.models.every((m) => typeof m === "string"))) {
      throw bad("models");
    }
    return e as unknown as PublicKeyInfo;
  });
}

/** usableKeys drops the entries checkKey refuses, and with pins the keys not pinned. */
export async function usableKeys(keys: PublicKeyInfo[], pins: string[] | undefined): Promise<PublicKeyInfo[]> {
  const out: PublicKeyInfo[] = [];
  for (const k of keys) {
    let pub: Bytes;
    try {
      pub = await checkKey(k);
    } catch {
      continue;
    }
    if (pins && !pins.includes(await fingerprint(pub))) continue;
    out.push(k);
  }
  return out;
}
