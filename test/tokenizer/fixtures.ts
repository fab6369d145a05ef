/** Small but real Hugging Face tokenizer files for the tokenizer tests, written to a temporary directory. */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A BPE tokenizer.json: whitespace pre-tokenizer, no normaliser; with `bos`, '<s>' (id 0) is a
 * special token put in front of every text encoded with special tokens.
 */
export function bpeTokenizerJson(vocab: Record<string, number>, merges: string[], bos = true): Record<string, unknown> {
  return {
    version: '1.0',
    added_tokens: bos ? [{ id: 0, content: '<s>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false }] : [],
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: bos
      ? { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '<s>': { id: '<s>', ids: [0], tokens: ['<s>'] } } }
      : null,
    decoder: null,
    model: { type: 'BPE', unk_token: null, vocab: bos ? { '<s>': 0, ...vocab } : vocab, merges },
  };
}

/** Letters and merges up to 'hello' and 'world'. */
export const HELLO_WORLD_VOCAB = { h: 1, e: 2, l: 3, o: 4, w: 5, r: 6, d: 7, he: 8, ll: 9, hell: 10, hello: 11, wo: 12, wor: 13, worl: 14, world: 15 };
export const HELLO_WORLD_MERGES = ['h e', 'l l', 'he ll', 'hell o', 'w o', 'wo r', 'wor l', 'worl d'];
/** The hello/world tokenizer with '<s>' in front: 'hello world' is [0, 11, 15]. */
export const HELLO_WORLD_BPE = bpeTokenizerJson(HELLO_WORLD_VOCAB, HELLO_WORLD_MERGES);

/** Runs `f` with a temporary directory holding `files` (name → JSON), removed afterwards. */
export async function withTokenizerDir(files: Record<string, unknown>, f: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'kvgate-tok-'));
  try {
    for (const [name, json] of Object.entries(files)) await writeFile(join(dir, name), JSON.stringify(json));
    await f(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
