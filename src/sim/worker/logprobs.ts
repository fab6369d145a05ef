/**
 * Logprobs in the shapes vLLM's OpenAI server returns: the chat format (`logprobs.content`, one
 * entry per token with its UTF-8 bytes and top alternatives) and the legacy completion format
 * (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`), which with `echo` starts with the
 * prompt's tokens, scored by the synthetic LM.
 */
import type { SampledLogprob, SyntheticLm } from '../../engine/synthetic-lm.js';
import { estimateTokenizer } from '../../tokenizer/index.js';
import type { Generation } from './generation.js';

/** Chat logprobs of output tokens [from, from + count). */
export function chatLogprobs(gen: Generation, from: number, count: number): unknown[] {
  const out: unknown[] = [];
  for (let i = from; i < from + count; i++) {
    const lp = gen.logprobAt(i);
    if (!lp) continue;
    const token = textPiece(lp.token);
    out.push({
      token,
      logprob: clampLogprob(lp.logprob),
      bytes: [...Buffer.from(token, 'utf8')],
      top_logprobs: lp.top.map((t) => {
        const s = textPiece(t.token);
        return { token: s, logprob: clampLogprob(t.logprob), bytes: [...Buffer.from(s, 'utf8')] };
      }),
    });
  }
  return out;
}

/** The echoed prompt's part of completion logprobs. */
export interface PromptLogprobs {
  ids: readonly number[];
  /** One per prompt token (promptLogprobs()). */
  logprobs: ReadonlyArray<SampledLogprob | null>;
}

/**
 * vLLM's legacy completion logprobs of output tokens [from, from + count), preceded by the
 * prompt's tokens when `prompt` is given. `textBase` is where the output starts in the returned
 * text (the prompt's length when it is echoed, else 0): `text_offset` counts from there.
 */
export function completionLogprobs(
  gen: Generation,
  from: number,
  count: number,
  prompt: PromptLogprobs | null,
  textBase: number,
  tokensAsIds = false,
): unknown {
  const pieceOf = tokensAsIds ? idName : textPiece;
  const topDict = (lp: SampledLogprob) => topDictOf(lp, pieceOf);
  const tokens: string[] = [];
  const tokenLogprobs: Array<number | null> = [];
  const topLogprobs: Array<Record<string, number> | null> = [];
  const textOffset: number[] = [];
  if (prompt) {
    const ids = prompt.ids;
    const lps = prompt.logprobs;
    let off = 0;
    for (let i = 0; i < ids.length; i++) {
      const piece = pieceOf(ids[i]!);
      tokens.push(piece);
      textOffset.push(off);
      off += piece.length;
      const lp = lps[i] ?? null;
      tokenLogprobs.push(lp === null ? null : clampLogprob(lp.logprob));
      topLogprobs.push(lp === null ? null : topDict(lp));
    }
  }
  for (let i = from; i < from + count; i++) {
    const lp = gen.logprobAt(i);
    if (!lp) continue;
    tokens.push(pieceOf(lp.token));
    tokenLogprobs.push(clampLogprob(lp.logprob));
    topLogprobs.push(topDict(lp));
    textOffset.push(textBase + (gen.offsets[i] ?? gen.text.length));
  }
  return { text_offset: textOffset, token_logprobs: tokenLogprobs, tokens, top_logprobs: topLogprobs };
}

/** One position of vLLM's `prompt_logprobs`: token id → its logprob, rank (1 = most likely) and text. */
export type PromptLogprobEntry = Record<string, { logprob: number; rank: number; decoded_token: string }>;

/**
 * vLLM's `prompt_logprobs` of a completion choice: null for the first prompt token, then for each
 * position a dict holding the prompt token itself and the `top` most likely tokens there, keyed
 * by token id. A prompt token outside the synthetic model's candidates is ranked just after them.
 */
export function vllmPromptLogprobs(lm: SyntheticLm, ids: readonly number[], top: number): Array<PromptLogprobEntry | null> {
  const out: Array<PromptLogprobEntry | null> = [null];
  for (let i = 1; i < ids.length; i++) {
    const d = lm.distribution(ids, i);
    const t = ids[i]!;
    const entry: PromptLogprobEntry = {};
    let found = false;
    for (let k = 0; k < d.tokens.length; k++) {
      const id = d.tokens[k]!;
      if (id !== t && k >= top) continue;
      entry[id] = { logprob: clampLogprob(d.logprobs[k]!), rank: k + 1, decoded_token: textPiece(id) };
      if (id === t) found = true;
    }
    if (!found) entry[t] = { logprob: OUTSIDE_TOP_K_LOGPROB, rank: d.tokens.length + 1, decoded_token: textPiece(t) };
    out.push(entry);
  }
  return out;
}

/** The synthetic LM's log-probability of each prompt token given what precedes it (null for the first). */
export function promptLogprobs(lm: SyntheticLm, ids: readonly number[], top: number): Array<SampledLogprob | null> {
  const out: Array<SampledLogprob | null> = [null];
  for (let i = 1; i < ids.length; i++) {
    const d = lm.distribution(ids, i);
    const t = ids[i]!;
    let logprob = OUTSIDE_TOP_K_LOGPROB;
    for (let k = 0; k < d.tokens.length; k++) {
      if (d.tokens[k] === t) {
        logprob = d.logprobs[k]!;
        break;
      }
    }
    const alts: Array<{ token: number; logprob: number }> = [];
    for (let k = 0; k < Math.min(top, d.tokens.length); k++) alts.push({ token: d.tokens[k]!, logprob: d.logprobs[k]! });
    out.push({ token: t, logprob, top: alts });
  }
  return out;
}

/**
 * The synthetic model's distributions are sparse (TOP_K candidates): a prompt token outside them
 * gets this floor rather than -inf.
 */
const OUTSIDE_TOP_K_LOGPROB = -20;

function textPiece(id: number): string {
  return estimateTokenizer.idToPiece(id);
}

/** vLLM's `return_tokens_as_token_ids` spelling of a token. */
function idName(id: number): string {
  return `token_id:${id}`;
}


/** vLLM clamps -inf to -9999.0 so the JSON stays valid. */
function clampLogprob(x: number): number {
  return Math.max(x, -9999);
}

/** {token: logprob} of the alternatives plus the sampled token, as vLLM's legacy format has it. */
function topDictOf(lp: SampledLogprob, name: (id: number) => string): Record<string, number> {
  const d: Record<string, number> = {};
  for (const t of lp.top) d[name(t.token)] = clampLogprob(t.logprob);
  d[name(lp.token)] = clampLogprob(lp.logprob);
  return d;
}
