/**
 * The tokenizer-free `estimate` tokenizer, shared by the simulated worker and the gateway so that
 * their token ids — and so their prefix-block hashes — agree exactly.
 *
 * Text is split into pieces: an optional leading space plus a run of letters (chopped every 6
 * characters), up to 3 digits, or one other character. A piece in the vocabulary gets its
 * vocabulary id; any other piece gets a stable id from an FNV-1a hash. That gives about 1.3
 * tokens per English word, close to BPE tokenizers, at a few nanoseconds per character.
 */
import { HASHED_ID_BASE, HASHED_ID_RANGE, VOCAB, EOS_TOKEN_ID } from './vocabulary.js';
import type { Tokenizer } from './types.js';

/**
 * The pieces, as a regular expression (the definition; `pieceEnd` below scans the same pieces by
 * hand, which allocates no match objects: the regex's exec cost ~2.4 KB of garbage per chat
 * request in the gateway, more than any other single step).
 */
export const PIECE_PATTERN = / ?[A-Za-z]{1,6}| ?[0-9]{1,3}| ?[^ A-Za-z0-9]|[ ]/g;

const SPACE = 32;

function isLetter(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

/** End of the letter (≤ 6) or digit (≤ 3) run starting at `i`, which is one. */
function runEnd(text: string, i: number, max: number, digits: boolean): number {
  const limit = Math.min(text.length, i + max);
  let j = i + 1;
  while (j < limit) {
    const c = text.charCodeAt(j);
    if (digits ? !isDigit(c) : !isLetter(c)) break;
    j++;
  }
  return j;
}

/** End of the piece starting at `i` (< text.length): PIECE_PATTERN's match there. */
function pieceEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === SPACE) {
    if (i + 1 >= text.length) return i + 1;
    const d = text.charCodeAt(i + 1);
    if (isLetter(d)) return runEnd(text, i + 1, 6, false);
    if (isDigit(d)) return runEnd(text, i + 1, 3, true);
    return d === SPACE ? i + 1 : i + 2;
  }
  if (isLetter(c)) return runEnd(text, i, 6, false);
  if (isDigit(c)) return runEnd(text, i, 3, true);
  return i + 1;
}

/**
 * FNV-1a over text[from, to): a piece's hash without cutting it out of the text. Kept as a signed
 * 32-bit integer (the usual `>>> 0` would make it an unsigned value above V8's small-integer range
 * half the time: a heap number, and every id computed from it a double, so each prompt's id array
 * became an array of doubles).
 */
function fnv(text: string, from: number, to: number): number {
  let h = 0x811c9dc5 | 0;
  for (let i = from; i < to; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h;
}

/**
 * The id of a piece outside the vocabulary: HASHED_ID_BASE + (unsigned hash mod HASHED_ID_RANGE),
 * which, the range being a power of two, is the hash's low bits.
 */
const HASHED_ID_MASK = HASHED_ID_RANGE - 1;
if ((HASHED_ID_RANGE & HASHED_ID_MASK) !== 0) throw new Error('HASHED_ID_RANGE must be a power of two');

/**
 * The vocabulary as an open-addressing hash table: slot → vocabulary id (−1: empty), probed
 * linearly from the piece's hash. With this table and the signed hash above, `npm run bench -- route`
 * tokenized its 8,000-token prompt in 951–1,025 µs, against 1,250–1,480 with a Map<hash, ids[]> and
 * an unsigned hash (docs/performance.md, "Tokenizing long prompts").
 */
const TABLE_SIZE = 1 << 14;
const TABLE_MASK = TABLE_SIZE - 1;
if (VOCAB.length > TABLE_SIZE / 2) throw new Error('the vocabulary outgrew its lookup table');
const vocabTable = new Int32Array(TABLE_SIZE).fill(-1);
VOCAB.forEach((p, i) => {
  let slot = fnv(p, 0, p.length) & TABLE_MASK;
  while (vocabTable[slot] !== -1) slot = (slot + 1) & TABLE_MASK;
  vocabTable[slot] = i;
});

/** The vocabulary id of text[from, to) whose hash is `h`, or -1. */
function vocabId(text: string, from: number, to: number, h: number): number {
  const len = to - from;
  for (let slot = h & TABLE_MASK; ; slot = (slot + 1) & TABLE_MASK) {
    const id = vocabTable[slot]!;
    if (id === -1) return -1;
    const p = VOCAB[id]!;
    if (p.length === len && text.startsWith(p, from)) return id;
  }
}

/** Remembers the text of hashed pieces seen, so ids that came from text decode back to it. */
const hashedPieces = new Map<number, string>();
const HASHED_MEMO_LIMIT = 200_000;

export class EstimateTokenizer implements Tokenizer {
  readonly name = 'estimate';

  encode(text: string): number[] {
    const ids: number[] = [];
    const n = text.length;
    for (let i = 0; i < n; ) {
      const j = pieceEnd(text, i);
      const h = fnv(text, i, j);
      let id = vocabId(text, i, j, h);
      if (id < 0) {
        // A piece outside the vocabulary: a stable id from its hash.
        id = HASHED_ID_BASE + (h & HASHED_ID_MASK);
        if (hashedPieces.size < HASHED_MEMO_LIMIT && !hashedPieces.has(id)) hashedPieces.set(id, text.slice(i, j));
      }
      ids.push(id);
      i = j;
    }
    return ids;
  }

  decode(ids: ArrayLike<number>): string {
    let s = '';
    for (let i = 0; i < ids.length; i++) s += this.idToPiece(ids[i]!);
    return s;
  }

  idToPiece(id: number): string {
    if (id < VOCAB.length) return VOCAB[id]!;
    if (id === EOS_TOKEN_ID) return '';
    return hashedPieces.get(id) ?? `<${id}>`;
  }

  count(text: string): number {
    let n = 0;
    for (let i = 0; i < text.length; i = pieceEnd(text, i)) n++;
    return n;
  }
}

export const estimateTokenizer = new EstimateTokenizer();
