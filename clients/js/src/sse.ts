// A server-sent event reader over a byte stream, with the rules of the Go
// side's internal/sse: LF, CRLF and CR line ends; comments and id/retry
// ignored; an "error: {...}" line read as an event of type "error"; an
// event the stream ends without a blank line after still delivered unless
// its last line was cut off.

import { type Bytes, concat, text } from "./bytes.js";
import { InvalidReplyError } from "./errors.js";

export interface SseEvent {
  /** The event: field, "error" for an error: line, else "". */
  type: string;
  /** The data lines joined by "\n". */
  data: Bytes;
}

const LF = 0x0a;
const CR = 0x0d;

export class SseReader {
  private buf: Bytes = new Uint8Array();
  private eof = false;
  private type = "";
  private data: Uint8Array[] = [];
  private size = 0;
  private dirty = false;

  constructor(
    private readonly src: ReadableStreamDefaultReader<Uint8Array>,
    private readonly max: number,
  ) {}

  /** next returns the next event with data, or null when the stream ended. */
  async next(): Promise<SseEvent | null> {
    for (;;) {
      const line = await this.line();
      if (line === null) return this.dispatch();
      if (line.length === 0) {
        const ev = this.dispatch();
        if (ev) return ev;
        continue;
      }
      if (line[0] === 0x3a) continue; // ':' comment
      const colon = line.indexOf(0x3a);
      let name = line;
      let value: Uint8Array = new Uint8Array();
      if (colon >= 0) {
        name = line.subarray(0, colon);
        value = line.subarray(colon + 1);
        if (value[0] === 0x20) value = value.subarray(1);
      }
      switch (text(name)) {
        case "data":
          this.append(value);
          break;
        case "event":
          this.type = text(value);
          break;
        case "error":
          this.type = "error";
          this.append(value);
          break;
      }
    }
  }

  cancel(reason?: unknown): Promise<void> {
    return this.src.cancel(reason);
  }

  private append(value: Uint8Array) {
    if (this.dirty) {
      this.data.push(new Uint8Array([LF]));
      this.size++;
    }
    this.size += value.length;
    if (this.size > this.max) throw new InvalidReplyError(`e2ee: server-sent event too large (over ${this.max} bytes)`);
    this.data.push(value.slice());
    this.dirty = true;
  }

  private dispatch(): SseEvent | null {
    if (!this.dirty) {
      this.type = "";
      return null;
    }
    const ev = { type: this.type, data: concat(...this.data) };
    this.type = "";
    this.data = [];
    this.size = 0;
    this.dirty = false;
    return ev;
  }

  // line returns the next line without its end, or null at the end of the
  // stream; a last line without an end is dropped as cut off.
  private async line(): Promise<Bytes | null> {
    let searched = 0;
    for (;;) {
      let i = searched;
      while (i < this.buf.length && this.buf[i] !== LF && this.buf[i] !== CR) i++;
      if (i < this.buf.length) {
        const line = this.buf.subarray(0, i);
        if (this.buf[i] === LF) {
          this.buf = this.buf.subarray(i + 1);
          return line;
        }
        if (i + 1 < this.buf.length || this.eof) {
          this.buf = this.buf.subarray(this.buf[i + 1] === LF ? i + 2 : i + 1);
          return line;
        }
        // A CR at the end of what has arrived: wait to see whether an LF
        // follows, so CRLF is not read as two line ends.
      }
      if (this.eof) {
        this.buf = new Uint8Array();
        return null;
      }
      if (this.buf.length > this.max) throw new InvalidReplyError(`e2ee: server-sent event too large (over ${this.max} bytes)`);
      searched = i;
      const { done, value } = await this.src.read();
      if (done) this.eof = true;
      else this.buf = this.buf.length ? concat(this.buf, value) : (value as Bytes);
    }
  }
}
