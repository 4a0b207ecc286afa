// Opening the worker's reply: the chunked-OHTTP style schedule of
// e2ee/response.go, on WebCrypto's HKDF and AES-256-GCM.

import { type Bytes, concat, decode64, text, utf8 } from "./bytes.js";
import { InvalidReplyError, TruncatedReplyError, clearMessage } from "./errors.js";
import { type SseEvent, SseReader } from "./sse.js";

export const NONCE_SIZE = 32;
const IV_SIZE = 12;
const FINAL_AAD = utf8("final");
const EMPTY = new Uint8Array();
/** Bounds one sealed stream event: base64 of a 16 MB clear event plus framing. */
export const MAX_STREAM_EVENT = 24 << 20;
const DONE = "[DONE]";
const DONE_EVENT = utf8("data: [DONE]\n\n");

function invalid(msg: string): InvalidReplyError {
  return new InvalidReplyError(`e2ee: invalid encrypted reply: ${msg}`);
}

function truncated(msg: string): TruncatedReplyError {
  return new TruncatedReplyError(`e2ee: encrypted reply ended before its final chunk: ${msg}`);
}

/**
 * ChunkCipher seals or opens the chunks of one reply:
 *
 *     prk = HKDF-Extract(salt = enc || response_nonce, ikm = secret)
 *     key = HKDF-Expand(prk, "key", 32)
 *     iv  = HKDF-Expand(prk, "nonce", 12)
 *
 * chunk i under key with nonce iv XOR i (96-bit big-endian), AAD "final"
 * on the last chunk and empty before it. WebCrypto's HKDF is Extract then
 * Expand, so each output is one deriveBits with the same salt.
 */
export class ChunkCipher {
  private constructor(
    private readonly key: CryptoKey,
    /** The base nonce; exposed for test vectors. */
    readonly iv: Bytes,
    /** The AES key's bytes; exposed for test vectors. */
    readonly rawKey: Bytes,
  ) {}

  static async create(secret: Uint8Array, enc: Uint8Array, nonce: Uint8Array): Promise<ChunkCipher> {
    if (nonce.length !== NONCE_SIZE) throw invalid(`response nonce is ${nonce.length} bytes, want ${NONCE_SIZE}`);
    const ikm = await crypto.subtle.importKey("raw", secret as Bytes, "HKDF", false, ["deriveBits"]);
    const salt = concat(enc, nonce);
    const expand = async (label: string, bits: number) =>
      new Uint8Array(await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt, info: utf8(label) }, ikm, bits));
    const rawKey = await expand("key", 256);
    const iv = await expand("nonce", IV_SIZE * 8);
    const key = await crypto.subtle.importKey("raw", rawKey, "AES-GCM", false, ["encrypt", "decrypt"]);
    return new ChunkCipher(key, iv, rawKey);
  }

  /** nonce is iv XOR i; the counter is 64 bits, so iv's first 4 bytes pass through. */
  nonce(i: number): Bytes {
    const n = this.iv.slice();
    const v = new DataView(n.buffer);
    v.setUint32(4, v.getUint32(4) ^ Math.floor(i / 2 ** 32));
    v.setUint32(8, v.getUint32(8) ^ i % 2 ** 32);
    return n;
  }

  async seal(i: number, final: boolean, plaintext: Uint8Array): Promise<Bytes> {
    const params = { name: "AES-GCM", iv: this.nonce(i), additionalData: final ? FINAL_AAD : EMPTY };
    return new Uint8Array(await crypto.subtle.encrypt(params, this.key, plaintext as Bytes));
  }

  /** open returns the plaintext, or undefined when the chunk does not open as chunk i. */
  async open(i: number, final: boolean, ciphertext: Uint8Array): Promise<Bytes | undefined> {
    const params = { name: "AES-GCM", iv: this.nonce(i), additionalData: final ? FINAL_AAD : EMPTY };
    try {
      return new Uint8Array(await crypto.subtle.decrypt(params, this.key, ciphertext as Bytes));
    } catch {
      return undefined;
    }
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isVersion(v: unknown): boolean {
  return v === 1;
}

/**
 * ResponseOpener opens the reply to one sealed request. It holds the
 * secret exported from the request's HPKE context and the request's
 * encapsulated key.
 */
export class ResponseOpener {
  constructor(
    private readonly secret: Bytes,
    private readonly enc: Bytes,
  ) {}

  /**
   * openBody opens a sealed non-streaming reply and returns the clear
   * body: the chunks' plaintexts in order. It fails unless every chunk
   * opens in its place and the last is the final one.
   */
  async openBody(reply: Uint8Array): Promise<Bytes> {
    let w: unknown;
    try {
      w = JSON.parse(text(reply));
    } catch {
      w = undefined;
    }
    if (!isObject(w) || (w.chunks !== undefined && w.chunks !== null && !(Array.isArray(w.chunks) && w.chunks.every((c) => typeof c === "string")))) {
      throw invalid("reply is not a JSON object of the expected shape");
    }
    if (!isVersion(w.svc_e2e)) throw invalid("unsupported reply version");
    const nonce = typeof w.response_nonce === "string" ? decode64(w.response_nonce) : undefined;
    if (!nonce || nonce.length !== NONCE_SIZE) throw invalid(`response_nonce is not ${NONCE_SIZE} bytes of standard base64`);
    const chunks = (w.chunks ?? []) as string[];
    if (chunks.length === 0) throw truncated("the reply has no chunks");
    const c = await ChunkCipher.create(this.secret, this.enc, nonce);
    const out: Uint8Array[] = [];
    for (let i = 0; i < chunks.length; i++) {
      const ct = decode64(chunks[i]!);
      if (!ct) throw invalid(`chunk ${i} is not standard base64`);
      const final = i === chunks.length - 1;
      const pt = await c.open(i, final, ct);
      if (!pt) {
        if (final) {
          if (await c.open(i, false, ct)) throw truncated(`the reply's chunks stop at ${chunks.length}`);
          throw invalid(`chunk ${i} does not open as the final chunk`);
        }
        throw invalid(`chunk ${i} does not open`);
      }
      out.push(pt);
    }
    return concat(...out);
  }

  /**
   * openStream reads a sealed SSE stream and yields the clear one: a
   * "data: <plaintext>" event per chunk, ending with "data: [DONE]".
   *
   * Chunks are passed on as they open, so a consumer sees tokens as they
   * arrive; only their completeness waits for the end. Anything that does
   * not open in order errors the stream, and a stream that ends before
   * its final chunk errors with TruncatedReplyError, so a consumer that
   * reads to the end never takes a cut or altered reply for a whole one.
   * Keep-alive comments and clear events without a chunk are skipped; a
   * clear {"svc": ...} annotation goes to hooks.onSvc, and hooks.onDone is
   * called once the reply is whole, before the clear [DONE] is passed on.
   * A clear error frame from the gateway is passed on, then the stream
   * errors: the gateway may end a stream, not extend it.
   */
  openStream(body: ReadableStream<Uint8Array>, hooks: StreamHooks = {}): ReadableStream<Uint8Array> {
    const st = new StreamState(this.secret, this.enc, new SseReader(body.getReader(), MAX_STREAM_EVENT), hooks);
    return new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          // Out first, then the error: an error frame is delivered before
          // the stream fails, as a clear stream would deliver it.
          for (;;) {
            if (st.out.length) {
              controller.enqueue(concat(...st.out.splice(0)));
              return;
            }
            if (st.err) {
              controller.error(st.err);
              void st.src.cancel().catch(() => {});
              return;
            }
            if (st.done) {
              controller.close();
              return;
            }
            try {
              await st.step();
            } catch (e) {
              st.err = e;
            }
          }
        },
        cancel(reason) {
          return st.src.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
  }
}

export interface StreamHooks {
  onSvc?: (svc: Record<string, unknown>) => void;
  onDone?: () => void;
}

class StreamState {
  cipher: ChunkCipher | undefined;
  next = 0;
  final = false;
  done = false;
  out: Uint8Array[] = [];
  err: unknown;

  constructor(
    private readonly secret: Bytes,
    private readonly enc: Bytes,
    readonly src: SseReader,
    private readonly hooks: StreamHooks,
  ) {}

  // step handles one event, adding any clear output.
  async step(): Promise<void> {
    const ev = await this.src.next();
    if (ev === null) {
      if (this.final) return this.finish();
      throw truncated(`the stream ended after ${this.next} chunks`);
    }
    const data = text(ev.data);
    if (data === DONE) {
      if (this.final) {
        await this.src.cancel().catch(() => {});
        return this.finish();
      }
      throw truncated(`[DONE] after ${this.next} chunks without a final chunk`);
    }
    if (ev.type === "error") return this.clearError(ev);
    let e: unknown;
    try {
      e = JSON.parse(data);
    } catch {
      throw invalid("the stream has an event that is neither sealed nor a known clear event");
    }
    if (e === null) return;
    if (!isObject(e)) throw invalid("the stream has an event that is neither sealed nor a known clear event");
    if (e.c !== undefined && e.c !== null) {
      if (typeof e.c !== "string" || (e.final !== undefined && e.final !== null && typeof e.final !== "boolean")) {
        throw invalid("the stream has a sealed event of the wrong shape");
      }
      return this.chunk(e.c, e.final === true);
    }
    if ((e.svc_e2e !== undefined && e.svc_e2e !== null) || (e.response_nonce !== undefined && e.response_nonce !== null)) {
      return this.header(e);
    }
    if (e.error !== undefined && e.error !== null) return this.clearError(ev);
    if (isObject(e.svc)) this.hooks.onSvc?.(e.svc);
  }

  private async header(e: Record<string, unknown>): Promise<void> {
    if (this.cipher) throw invalid("the stream has a second header");
    if (!isVersion(e.svc_e2e)) throw invalid("unsupported stream version");
    if (typeof e.response_nonce !== "string") throw invalid("the stream header has no response_nonce");
    const nonce = decode64(e.response_nonce);
    if (!nonce || nonce.length !== NONCE_SIZE) throw invalid(`response_nonce is not ${NONCE_SIZE} bytes of standard base64`);
    this.cipher = await ChunkCipher.create(this.secret, this.enc, nonce);
  }

  private async chunk(b64: string, final: boolean): Promise<void> {
    if (!this.cipher) throw invalid("a chunk came before the stream header");
    if (this.final) throw invalid("a chunk came after the final chunk");
    const ct = decode64(b64);
    if (!ct) throw invalid(`chunk ${this.next} is not standard base64`);
    const pt = await this.cipher.open(this.next, final, ct);
    if (!pt) throw invalid(`chunk ${this.next} does not open`);
    this.next++;
    if (final) {
      // The clear [DONE] waits for the gateway's own: SDKs stop reading
      // at [DONE], and the gateway's {"svc": ...} naming the worker comes
      // after the final chunk. Only keep-alives, annotations and the
      // terminator may follow it.
      this.final = true;
      if (pt.length > 0 && text(pt) !== DONE) this.out.push(event(pt));
      return;
    }
    this.out.push(event(pt));
  }

  private finish(): void {
    this.hooks.onDone?.();
    this.out.push(DONE_EVENT);
    this.done = true;
  }

  // clearError passes the gateway's clear error frame on, so an SSE client
  // reports it as on a clear stream, and ends the stream: the reply is
  // incomplete. After the final chunk the reply is whole and the frame is
  // ignored. Only the frame's error object goes on: the gateway may end a
  // stream, and anything else in its frame (choices with text) would be
  // read as the model's.
  private clearError(ev: SseEvent): void {
    if (this.final) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text(ev.data));
    } catch {
      parsed = undefined;
    }
    const msg = clearMessage(parsed);
    const error =
      isObject(parsed) && isObject(parsed.error) ? parsed.error : { message: msg || "the stream failed", type: "server_error" };
    this.out.push(event(utf8(JSON.stringify({ error }))));
    this.err = truncated(`the stream failed after ${this.next} chunks${msg ? ": " + msg : ""}`);
  }
}

/**
 * event frames a clear payload as one event, a data line per line, so a
 * payload with line breaks still arrives whole.
 */
export function event(data: Uint8Array): Bytes {
  const parts: Uint8Array[] = [];
  const prefix = utf8("data: ");
  const nl = new Uint8Array([0x0a]);
  let start = 0;
  for (let i = 0; i < data.length; i++) {
    if (data[i] !== 0x0a && data[i] !== 0x0d) continue;
    parts.push(prefix, data.subarray(start, i), nl);
    if (data[i] === 0x0d && data[i + 1] === 0x0a) i++;
    start = i + 1;
  }
  parts.push(prefix, data.subarray(start), nl, nl);
  return concat(...parts);
}
