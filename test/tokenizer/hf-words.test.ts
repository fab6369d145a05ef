/** SentencePiece-style BPE tokenizers are cut into words before the merges: same ids, only faster. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer as HfTokenizerImpl } from '@huggingface/tokenizers';
import { loadHfTokenizer, withSentencePieceWords } from '../../src/tokenizer/hf.js';
import { seededRng } from '../../src/util/rng.js';

const S = '\u2581';

/** A small SentencePiece-style BPE: spaces become '▁', no pre-tokenizer, pieces only begin with '▁'. */
function sentencePieceJson(extraPieces: string[] = []): Record<string, unknown> {
  const merges: Array<[string, string]> = [
    [S, 't'], [`${S}t`, 'h'], [`${S}th`, 'e'], ['h', 'e'], ['i', 'n'], ['in', 'g'], [S, 'in'], [S, S], [`${S}${S}`, `${S}${S}`],
    [S, 'w'], [`${S}w`, 'o'], [`${S}wo`, 'r'], [`${S}wor`, 'l'], [`${S}worl`, 'd'], ['e', 'r'], [S, 'a'], ['a', 'n'], [`${S}a`, 'n'],
  ];
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1 };
  for (const c of [S, ...'abcdefghijklmnopqrstuvwxyz.,\n0123456789']) vocab[c] = Object.keys(vocab).length;
  for (const [a, b] of merges) vocab[a + b] ??= Object.keys(vocab).length;
  for (const p of extraPieces) vocab[p] ??= Object.keys(vocab).length;
  return {
    version: '1.0',
    added_tokens: [
      { id: 0, content: '<unk>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: 1, content: '<s>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
    ],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: S }, { type: 'Replace', pattern: { String: ' ' }, content: S }] },
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    model: { type: 'BPE', unk_token: '<unk>', fuse_unk: true, vocab, merges: merges.map(([a, b]) => `${a} ${b}`) },
  };
}

function randomText(rand: () => number): string {
  const alphabet = [' ', '  ', '    ', 'the', 'The', 'there', 'in', 'ing', 'thing', 'world', 'an', 'er', '.', ',', '\n', 'x', 'é', '中', '7', '<s>', 'q'];
  let s = '';
  const n = Math.floor(rand() * 40);
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
  return s;
}

test('cut into words, a SentencePiece-style BPE gives the ids of the whole text', async (t) => {
  const json = sentencePieceJson();
  assert.notEqual(withSentencePieceWords(json).pre_tokenizer, null, 'the cut applies to this tokenizer');
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-spm-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'tokenizer.json');
  await writeFile(path, JSON.stringify(json));
  const cut = await loadHfTokenizer(path, { addSpecialTokens: false });
  const whole = new HfTokenizerImpl(json, {});
  const rand = seededRng(17);
  const texts = ['', ' ', 'the world', '  the   world  ', 'thing\n    in the\n\tworld', 'an er anthe'];
  for (let i = 0; i < 500; i++) texts.push(randomText(rand));
  let merged = 0;
  for (const text of texts) {
    const want = whole.encode(text, { add_special_tokens: false }).ids;
    assert.deepEqual(cut.encode(text), want, JSON.stringify(text));
    if (want.length < text.length) merged++;
  }
  assert.ok(merged > 200, `merges happened in ${merged} texts`);
});

test('the cut is left out where it could change ids or has nothing to cut at', () => {
  // A piece with '▁' after another character: a merge could cross a cut.
  const crossing = sentencePieceJson(['e' + S]);
  assert.equal(withSentencePieceWords(crossing), crossing);
  // A pre-tokenizer of its own already cuts the text.
  const own = { ...sentencePieceJson(), pre_tokenizer: { type: 'Whitespace' } };
  assert.equal(withSentencePieceWords(own), own);
  // No '▁' from the normaliser (a byte-level BPE such as GPT-2's).
  const noSpaces = { ...sentencePieceJson(), normalizer: null };
  assert.equal(withSentencePieceWords(noSpaces), noSpaces);
  // Not BPE.
  const wordPiece = { ...sentencePieceJson(), model: { type: 'WordPiece', vocab: { a: 0 } } };
  assert.equal(withSentencePieceWords(wordPiece), wordPiece);
  // Word suffixes mark a word's last piece: a cut would move them.
  const base = sentencePieceJson();
  const suffixed = { ...base, model: { ...(base.model as object), continuing_subword_suffix: '##' } };
  assert.equal(withSentencePieceWords(suffixed), suffixed);
  // '▁' itself unknown: fuse_unk could join it to an unknown character before it.
  const noSpacePiece = sentencePieceJson();
  delete (noSpacePiece.model as { vocab: Record<string, number> }).vocab[S];
  assert.equal(withSentencePieceWords(noSpacePiece), noSpacePiece);
});
