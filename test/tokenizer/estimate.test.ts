import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EstimateTokenizer, PIECE_PATTERN } from '../../src/tokenizer/estimate.js';
import { HASHED_ID_BASE, HASHED_ID_RANGE, VOCAB } from '../../src/tokenizer/vocabulary.js';
import { seededRng } from '../../src/util/rng.js';

/** The tokenizer as defined: PIECE_PATTERN's matches, looked up in the vocabulary or hashed. */
function reference(text: string): number[] {
  const byPiece = new Map(VOCAB.map((p, i) => [p, i]));
  const ids: number[] = [];
  for (const m of text.matchAll(PIECE_PATTERN)) {
    const piece = m[0];
    let id = byPiece.get(piece);
    if (id === undefined) {
      let h = 0x811c9dc5;
      for (let i = 0; i < piece.length; i++) h = Math.imul(h ^ piece.charCodeAt(i), 0x01000193);
      id = HASHED_ID_BASE + ((h >>> 0) % HASHED_ID_RANGE);
    }
    ids.push(id);
  }
  return ids;
}

/** Text from an alphabet that exercises every branch: runs, spaces, digits, punctuation, non-ASCII. */
function randomText(rand: () => number, length: number): string {
  const alphabet = ['a', 'Z', 'q', 'e', ' ', ' ', '  ', '0', '7', '.', ',', '\n', '\t', 'é', '—', '😀', 'hello', 'world', '12345', '<|im_start|>', 'ing'];
  // Vocabulary pieces too (a few hundred of them), so that lookups hit as well as miss.
  for (let i = 0; i < VOCAB.length; i += 13) alphabet.push(VOCAB[i]!);
  let s = '';
  while (s.length < length) s += alphabet[Math.floor(rand() * alphabet.length)];
  return s;
}

test('estimate: the hand-written scanner cuts and numbers pieces exactly as PIECE_PATTERN defines them', () => {
  const t = new EstimateTokenizer();
  const rand = seededRng(7);
  const texts = ['', ' ', '  ', 'a', ' a', ' 1', ' .', 'abcdefghij', ' 1234567', 'Hello, world! 2024 is here.\n', '  x  ', 'end '];
  for (let i = 0; i < 2000; i++) texts.push(randomText(rand, 1 + Math.floor(rand() * 80)));
  for (const text of texts) {
    const want = reference(text);
    assert.deepEqual(t.encode(text), want, JSON.stringify(text));
    assert.equal(t.count(text), want.length, JSON.stringify(text));
  }
});

test('estimate: ids from text decode back to the text', () => {
  const t = new EstimateTokenizer();
  const text = 'Zebrafish swim in 1234 ponds — quickly.\n';
  assert.equal(t.decode(t.encode(text)), text);
});
