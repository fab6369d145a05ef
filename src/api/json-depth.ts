/**
 * How deeply a JSON text nests, found by one pass over its bytes without parsing or recursion.
 *
 * V8's JSON.parse accepts any depth, but what the gateway then does with the value recurses:
 * JSON.stringify (re-serialising a body it changed), the cache key's canonical form, zod's
 * validation of unknown fields. A body of 100,000 nested arrays in an unknown field overflows the
 * stack in any of them. So bodies are refused above MAX_JSON_DEPTH before they are parsed, and
 * nothing downstream ever meets one.
 */

/**
 * The deepest nesting of arrays and objects a request body may have. OpenAI's request shapes nest
 * a handful of levels (a tool's JSON Schema, a content part, a response_format schema: under 20
 * in practice); 64 leaves room for deep tool schemas and stays far below any recursion limit
 * (Node's stack holds thousands of frames).
 */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * True if the JSON text in `bytes` nests arrays/objects more than `max` levels deep. Brackets
 * inside strings do not count; the text need not be valid JSON (JSON.parse judges that after),
 * and UTF-8 multi-byte sequences never contain these ASCII bytes, so scanning bytes is exact.
 */
export function jsonNestsDeeperThan(bytes: Uint8Array, max: number = MAX_JSON_DEPTH): boolean {
  if (opensAtMost(bytes, max)) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
      continue;
    }
    if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > max) return true;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return false;
}

/**
 * True if the text holds at most `max` opening brackets and braces, those inside strings counted
 * too: then it cannot nest deeper than `max`. Nearly every request holds a few, and native
 * searches find them many times faster than the scan above walks the bytes of a long prompt.
 */
function opensAtMost(bytes: Uint8Array, max: number): boolean {
  const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  let n = 0;
  for (const c of [OPEN_BRACKET, OPEN_BRACE]) {
    for (let i = b.indexOf(c); i !== -1; i = b.indexOf(c, i + 1)) if (++n > max) return false;
  }
  return true;
}
