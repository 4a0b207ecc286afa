// The request envelope, byte for byte as e2ee/envelope.go writes
// it; docs/e2e.md is the reference.

import { Aes256Gcm, CipherSuite, HkdfSha256 } from "@hpke/core";
import { XWing } from "@hpke/hybridkem-x-wing";

import { type Bytes, concat, encode64, fromHex, text, utf8 } from "./bytes.js";
import { E2EEError, UnsealableRequestError } from "./errors.js";
import { type PublicKeyInfo, checkKey } from "./keys.js";
import { ResponseOpener } from "./reply.js";

/** The envelope version this package writes and accepts. */
export const VERSION = 1;

/** Content type of a sealed request and of a sealed non-streaming reply. */
export const CONTENT_TYPE = "application/vnd.svc.e2e+json";

/** The one suite of version 1: X-Wing, HKDF-SHA256, AES-256-GCM. */
export const KEM_XWING = 0x647a;
export const KDF_HKDF_SHA256_ID = 0x0001;
export const AEAD_AES_256_GCM_ID = 0x0002;

/** A sealed request must fit the gateway's 32 MB body limit. */
export const MAX_ENVELOPE = 32 << 20;
/** The clear model name is routed on and logged: it is kept short. */
export const MAX_MODEL = 256;

const REQUEST_LABEL = "svc e2e v1 request";
export const RESPONSE_LABEL = "svc e2e v1 response";
export const SECRET_SIZE = 32;
export const ENC_SIZE = 1088 + 32;

let suite: CipherSuite | undefined;

/**
 * hpkeSuite is RFC 9180 HPKE, base mode, with the KEM Go's crypto/hpke
 * calls MLKEM768-X25519 (0x647a, X-Wing): @hpke/core runs the key
 * schedule and AES-256-GCM on the platform's WebCrypto, and
 * @hpke/hybridkem-x-wing supplies X-Wing. The README says why these.
 */
export function hpkeSuite(): CipherSuite {
  suite ??= new CipherSuite({ kem: new XWing(), kdf: new HkdfSha256(), aead: new Aes256Gcm() });
  return suite;
}

/** The clear routing fields the HPKE info binds. */
export interface Routing {
  keyId: string;
  model: string;
  stream: boolean;
}

/**
 * header is the canonical encoding of the clear fields:
 *
 *     version u8 | kem u16 | kdf u16 | aead u16 | key_id [8] | stream u8 |
 *     model length u16 | model
 *
 * Integers are big-endian.
 */
export function header(r: Routing): Bytes {
  const id = fromHex(r.keyId);
  if (!id || id.length !== 8) throw new E2EEError(`e2ee: key id ${JSON.stringify(r.keyId)} is not 16 hex digits`);
  const model = utf8(r.model);
  const b = new Uint8Array(1 + 6 + 8 + 1 + 2 + model.length);
  const v = new DataView(b.buffer);
  v.setUint8(0, VERSION);
  v.setUint16(1, KEM_XWING);
  v.setUint16(3, KDF_HKDF_SHA256_ID);
  v.setUint16(5, AEAD_AES_256_GCM_ID);
  b.set(id, 7);
  v.setUint8(15, r.stream ? 1 : 0);
  v.setUint16(16, model.length);
  b.set(model, 18);
  return b;
}

/** info is the HPKE info string: label, a zero byte, the header. */
export function info(r: Routing): Bytes {
  return concat(utf8(REQUEST_LABEL), new Uint8Array([0]), header(r));
}

/** checkModel keeps the clear model something the gateway can route on and log. */
export function checkModel(m: string): string | undefined {
  if (m === "") return "model is empty";
  if (!m.isWellFormed()) return "model is not UTF-8";
  if (utf8(m).length > MAX_MODEL) return `model is longer than ${MAX_MODEL} bytes`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(m)) return "model contains control characters";
  return undefined;
}

export interface Sealed {
  /** The envelope, the request body to send with CONTENT_TYPE. */
  envelope: Bytes;
  /** Opens the reply to this request and no other. */
  opener: ResponseOpener;
}

/**
 * sealRequest seals body, the clear request, to key. model and stream
 * travel in the clear for routing and must match a JSON body's; the worker
 * refuses a mismatch, so it is refused here first.
 */
export async function sealRequest(key: PublicKeyInfo, model: string, stream: boolean, body: Uint8Array): Promise<Sealed> {
  const pub = await checkKey(key);
  const bad = checkModel(model) ?? checkBody(body, model, stream);
  if (bad) throw new UnsealableRequestError(`e2ee: ${bad}`);
  const r: Routing = { keyId: key.key_id, model, stream };
  const s = hpkeSuite();
  let enc: Bytes, ct: Bytes, secret: Bytes;
  try {
    const recipientPublicKey = await s.kem.deserializePublicKey(pub);
    const sender = await s.createSenderContext({ recipientPublicKey, info: info(r) });
    enc = new Uint8Array(sender.enc);
    ct = new Uint8Array(await sender.seal(body as Bytes));
    secret = new Uint8Array(await sender.export(utf8(RESPONSE_LABEL), SECRET_SIZE));
  } catch (e) {
    // A public key that passed the directory's checks but not the KEM's
    // (an ML-KEM key outside the field): the directory is at fault.
    throw new E2EEError(`e2ee: key ${key.key_id}: ${(e as Error).message}`);
  }
  // The field order is Go's, so the same request seals to the same shape
  // from either client.
  const envelope = utf8(
    JSON.stringify({
      svc_e2e: VERSION,
      kem_id: KEM_XWING,
      kdf_id: KDF_HKDF_SHA256_ID,
      aead_id: AEAD_AES_256_GCM_ID,
      key_id: key.key_id,
      model,
      stream,
      enc: encode64(enc),
      ct: encode64(ct),
    }),
  );
  if (envelope.length > MAX_ENVELOPE) {
    throw new UnsealableRequestError(`e2ee: sealed request is ${envelope.length} bytes, over the ${MAX_ENVELOPE}-byte limit`);
  }
  return { envelope, opener: new ResponseOpener(secret, enc) };
}

/**
 * checkBody holds a JSON object body to the clear routing fields: the
 * gateway routes and bills on the clear model while the worker runs what
 * the body says. Bodies that are not JSON objects (a transcription's
 * upload) are left to the endpoint.
 */
function checkBody(body: Uint8Array, model: string, stream: boolean): string | undefined {
  let i = 0;
  while (i < body.length && (body[i] === 0x20 || body[i] === 0x09 || body[i] === 0x0d || body[i] === 0x0a)) i++;
  if (i === body.length || body[i] !== 0x7b) return undefined;
  let got: BodyFields;
  try {
    got = routingFields(body);
  } catch (e) {
    return (e as Error).message.replace(/^e2ee: /, "");
  }
  if (got.model !== model) return "the request body's model differs from the envelope's";
  if (got.stream !== stream) return "the request body's stream flag differs from the envelope's";
  return undefined;
}

export interface BodyFields {
  model: string;
  stream: boolean;
}

/**
 * routingFields reads model and stream from a JSON object body. Like the
 * Go side it refuses a body with "model" or "stream" twice, or in another
 * letter case: JSON.parse keeps the last duplicate while another parser
 * may keep the first, so such a body could mean one model here and
 * another to the engine.
 */
export function routingFields(body: Uint8Array): BodyFields {
  const src = text(body);
  let obj: unknown;
  try {
    obj = JSON.parse(src);
  } catch {
    throw new UnsealableRequestError("e2ee: the request body is not valid JSON");
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
    throw new UnsealableRequestError("e2ee: the request body is not a JSON object");
  }
  let models = 0;
  let streams = 0;
  for (const key of topLevelKeys(src)) {
    if (key === "model") models++;
    else if (key === "stream") streams++;
    else if (foldsTo(key, "model") || foldsTo(key, "stream")) {
      throw new UnsealableRequestError("e2ee: the request body has a routing field in the wrong case");
    }
  }
  const o = obj as Record<string, unknown>;
  // A null model reads as empty, as encoding/json leaves a string alone on
  // null; checkModel then refuses it.
  if (models > 1 || (models === 1 && o.model !== null && typeof o.model !== "string")) {
    throw new UnsealableRequestError("e2ee: the request body needs exactly one string model");
  }
  if (streams > 1 || (streams === 1 && o.stream !== null && typeof o.stream !== "boolean")) {
    throw new UnsealableRequestError("e2ee: the request body needs at most one boolean stream");
  }
  if (models === 0) throw new UnsealableRequestError("e2ee: the request body has no model");
  return { model: typeof o.model === "string" ? o.model : "", stream: o.stream === true };
}

// foldsTo is Go's strings.EqualFold against an ASCII word, which also
// folds the long s (ſ) and the Kelvin sign to s and k.
function foldsTo(key: string, word: string): boolean {
  return key.toLowerCase() === word || key.toUpperCase().toLowerCase() === word;
}

// topLevelKeys lists the keys of the JSON object src, duplicates
// included. src has been checked by JSON.parse, so the scan only needs to
// find where each key and value ends.
function topLevelKeys(src: string): string[] {
  const keys: string[] = [];
  let i = src.indexOf("{") + 1;
  const ws = () => {
    while (i < src.length && " \t\r\n".includes(src[i]!)) i++;
  };
  const str = () => {
    const start = i++;
    while (src[i] !== '"') i += src[i] === "\\" ? 2 : 1;
    i++;
    return src.slice(start, i);
  };
  for (;;) {
    ws();
    if (src[i] === "}") return keys;
    keys.push(JSON.parse(str()) as string);
    ws();
    i++; // ':'
    ws();
    let depth = 0;
    for (; i < src.length; i++) {
      const c = src[i];
      if (c === '"') {
        str();
        i--;
      } else if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        if (depth === 0) break;
        depth--;
      } else if (c === "," && depth === 0) break;
    }
    if (src[i] === ",") i++;
  }
}
