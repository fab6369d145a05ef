/**
 * One sequence's output as the client sees it, built token by token the way vLLM's output
 * processor does it: detokenize incrementally, end on a stop token id or stop string (the stop
 * string itself is cut from the text), and while stop strings are active hold back the last
 * (longest stop − 1) characters so a partial stop string is never streamed.
 */
import { EOS_TOKEN_ID, estimateTokenizer } from '../../tokenizer/index.js';
import type { FinishReason } from '../../engine/types.js';
import type { SampledLogprob } from '../../engine/synthetic-lm.js';

export interface GenerationOptions {
  stop: readonly string[];
  stopTokenIds: readonly number[];
  ignoreEos: boolean;
  includeStopStrInOutput: boolean;
  /** Sampler-recorded logprobs, one per generated token (shared array, filled as tokens come). */
  logprobs: readonly SampledLogprob[] | null;
}

/** Text and tokens that became visible in one step. */
export interface GenerationDelta {
  text: string;
  /** Index in `tokens` of the first token of this delta. */
  firstToken: number;
  /** Number of tokens in this delta. */
  numTokens: number;
}

export class Generation {
  readonly tokens: number[] = [];
  /** Output text so far (stop string already cut when stopped by one). */
  text = '';
  /** Characters of `text` already handed out. */
  private sent = 0;
  private tokensSent = 0;
  finishReason: FinishReason | null = null;
  /** The stop string or stop token id that ended the sequence (vLLM's stop_reason). */
  stopReason: string | number | null = null;
  /** Character offset of each token's text in the output (the legacy logprobs text_offset). */
  readonly offsets: number[] = [];
  private readonly opts: GenerationOptions;
  private readonly holdBack: number;
  private readonly stopTokens: Set<number>;

  constructor(opts: GenerationOptions) {
    this.opts = opts;
    this.stopTokens = new Set(opts.stopTokenIds);
    let longest = 0;
    for (const s of opts.stop) longest = Math.max(longest, s.length);
    this.holdBack = longest > 0 && !opts.includeStopStrInOutput ? longest - 1 : 0;
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  /**
   * Append one step's tokens. Returns true if the sequence ended on a stop string or stop token
   * id here (the engine does not know these: the caller aborts the engine request).
   */
  append(tokens: readonly number[]): boolean {
    for (const t of tokens) {
      if (this.finished) break;
      this.tokens.push(t);
      this.offsets.push(this.text.length);
      if (this.stopTokens.has(t)) {
        this.finish('stop', t);
        return true;
      }
      if (t === EOS_TOKEN_ID && !this.opts.ignoreEos) continue; // the engine ends it; no text
      const piece = estimateTokenizer.idToPiece(t);
      const searchFrom = this.text.length;
      this.text += piece;
      if (this.opts.stop.length > 0 && this.checkStop(searchFrom)) return true;
    }
    return false;
  }

  private checkStop(newTextFrom: number): boolean {
    let best = -1;
    let which = '';
    for (const s of this.opts.stop) {
      const i = this.text.indexOf(s, Math.max(0, newTextFrom - s.length + 1));
      if (i >= 0 && (best < 0 || i < best)) {
        best = i;
        which = s;
      }
    }
    if (best < 0) return false;
    this.text = this.text.slice(0, this.opts.includeStopStrInOutput ? best + which.length : best);
    this.finish('stop', which);
    return true;
  }

  finish(reason: FinishReason, stopReason: string | number | null = null): void {
    if (this.finishReason !== null) return;
    this.finishReason = reason;
    this.stopReason = stopReason;
  }

  /** What became visible since the last call. */
  takeDelta(): GenerationDelta {
    const visible = this.finished ? this.text.length : Math.max(this.sent, this.text.length - this.holdBack);
    const text = this.text.slice(this.sent, visible);
    this.sent = visible;
    const firstToken = this.tokensSent;
    this.tokensSent = this.tokens.length;
    return { text, firstToken, numTokens: this.tokens.length - firstToken };
  }

  /** Logprob record of output token i, when logprobs were requested. */
  logprobAt(i: number): SampledLogprob | undefined {
    return this.opts.logprobs?.[i];
  }
}
