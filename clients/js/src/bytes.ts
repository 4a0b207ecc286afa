// Byte helpers on the platform's own codecs (TextEncoder, atob, btoa,
// WebCrypto), so the package runs unchanged in Node.js, Deno, browsers and
// workers.

export type Bytes = Uint8Array<ArrayBuffer>;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function utf8(s: string): Bytes {
  return encoder.encode(s) as Bytes;
}

export function text(b: Uint8Array): string {
  return decoder.decode(b);
}

export function concat(...parts: Uint8Array[]): Bytes {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

export function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function hex(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}

export function fromHex(s: string): Bytes | undefined {
  if (s.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(s)) return undefined;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function encode64(b: Uint8Array): string {
  // String.fromCharCode takes its arguments on the stack: feed it slices.
  let bin = "";
  for (let i = 0; i < b.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, Array.from(b.subarray(i, i + 0x8000)));
  }
  return btoa(bin);
}

const base64Form = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * decode64 is strict standard base64, as the Go side reads it: padding
 * required, no line breaks, no stray bits, so each value has exactly one
 * encoding. It returns undefined for anything else.
 */
export function decode64(s: string): Bytes | undefined {
  if (!base64Form.test(s)) return undefined;
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  // atob ignores the unused bits of the last character; the canonical
  // form has them zero.
  if (s.endsWith("=") && encode64(out.subarray(out.length - (s.endsWith("==") ? 1 : 2))) !== s.slice(-4)) {
    return undefined;
  }
  return out;
}

export async function sha256(b: Uint8Array): Promise<Bytes> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", b as Bytes));
}
