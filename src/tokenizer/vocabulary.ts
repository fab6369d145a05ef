/**
 * The fixed vocabulary of the synthetic language: common English words first, then pronounceable
 * syllable words, then punctuation. Every token the simulated model generates is one of these, so
 * generated text re-tokenizes to exactly the ids that produced it (multi-turn prompts that quote
 * an earlier answer hit the prefix cache as they would on a real engine).
 */

const COMMON = (
  'the of and to in is that for it as with was on be by this are or at from an which have not ' +
  'but all they one were can their there has more will if would been about when what so some ' +
  'into other than then its only also time two could these may like first new any out used very ' +
  'over such after most our where many well model data cache memory token request worker system ' +
  'value state each between through both under while again since during before should because ' +
  'those same long high small large number part work world every place make good point way year ' +
  'order result level route load block prefix query answer context server client batch queue ' +
  'latency signal stream market energy light water power field local global simple common clear'
).split(' ');

const ONSETS = ['b', 'd', 'f', 'g', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'z', 'br', 'st'];
const VOWELS = ['a', 'e', 'i', 'o', 'u', 'ai', 'ou', 'ea'];

function syllableWords(count: number): string[] {
  const syll: string[] = [];
  for (const o of ONSETS) for (const v of VOWELS) syll.push(o + v);
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) {
    const a = syll[i % syll.length]!;
    const b = syll[Math.floor(i / syll.length) % syll.length]!;
    // The tokenizer chops letter runs every 6 characters: longer words would not round-trip.
    if (a.length + b.length <= 6) out.push(a + b);
  }
  return out;
}

const PUNCTUATION = ['.', ',', '\n'];

/** Token pieces by id. Word pieces carry their leading space. */
export const VOCAB: readonly string[] = (() => {
  const words = [...new Set([...COMMON, ...syllableWords(4000)])].filter((w) => w.length <= 6);
  return [...words.map((w) => ' ' + w), ...PUNCTUATION];
})();

export const VOCAB_SIZE = VOCAB.length;
/** Ids at or above this come from hashing text outside the vocabulary. */
export const HASHED_ID_BASE = 1 << 16;
export const HASHED_ID_RANGE = 1 << 24;
/** End of sequence: the first id past the vocabulary, so never produced by encoding text. */
export const EOS_TOKEN_ID = VOCAB.length;
/** Ids of the punctuation tokens, for the synthetic model's sentence structure. */
export const PERIOD_ID = VOCAB_SIZE - 3;
export const COMMA_ID = VOCAB_SIZE - 2;
export const NEWLINE_ID = VOCAB_SIZE - 1;
