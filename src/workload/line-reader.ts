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
}

export function* readLines(path: string, chunkBytes = 1 << 20): Generator<Line> {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(chunkBytes);
    const dec = new StringDecoder('utf8');
    let rest = '';
    let no = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, chunkBytes, null);
      const text = n > 0 ? rest + dec.write(buf.subarray(0, n)) : rest + dec.end();
      let start = 0;
      for (;;) {
        const nl = text.indexOf('\n', start);
        if (nl < 0) break;
        no++;
        let line = text.slice(start, nl);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        yield { no, text: line };
        start = nl + 1;
      }
      rest = text.slice(start);
      if (n === 0) {
        if (rest.length > 0) yield { no: no + 1, text: rest.endsWith('\r') ? rest.slice(0, -1) : rest };
        return;
      }
    }
  } finally {
    closeSync(fd);
  }
}
