/**
 * Reads a text file line by line in fixed-size chunks, synchronously and lazily: a trace of any
 * size is never held in memory whole, and the simulation can pull the next request without an
 * await per row.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';

export interface Line {
  /** 1-based line number in the file. */
  no: number;
  text: string;
  /** Byte offset of the line's start in the file (for readLineAt). */
  offset: number;
  /** Bytes of the line, without its line break. */
  bytes: number;
}

export function* readLines(path: string, chunkBytes = 1 << 20): Generator<Line> {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(chunkBytes);
    const dec = new StringDecoder('utf8');
    let rest = '';
    let no = 0;
    let pos = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, chunkBytes, null);
      const text = n > 0 ? rest + dec.write(buf.subarray(0, n)) : rest + dec.end();
      let start = 0;
      for (;;) {
        const nl = text.indexOf('\n', start);
        if (nl < 0) break;
        no++;
        let line = text.slice(start, nl);
        let crlf = 0;
        if (line.endsWith('\r')) {
          line = line.slice(0, -1);
          crlf = 1;
        }
        const bytes = Buffer.byteLength(line, 'utf8');
        yield { no, text: line, offset: pos, bytes };
        pos += bytes + crlf + 1;
        start = nl + 1;
      }
      rest = text.slice(start);
      if (n === 0) {
        if (rest.length > 0) {
          const line = rest.endsWith('\r') ? rest.slice(0, -1) : rest;
          yield { no: no + 1, text: line, offset: pos, bytes: Buffer.byteLength(line, 'utf8') };
        }
        return;
      }
    }
  } finally {
    closeSync(fd);
  }
}

/** The `bytes` bytes at `offset` of a file as text (one line found by readLines). */
export function readLineAt(path: string, offset: number, bytes: number): string {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(bytes);
    let got = 0;
    while (got < bytes) {
      const n = readSync(fd, buf, got, bytes - got, offset + got);
      if (n === 0) break;
      got += n;
    }
    return buf.subarray(0, got).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
