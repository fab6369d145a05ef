/**
 * A cascade's output as the client sees it, built from verified tokens only, and written in the
 * same OpenAI shapes (as vLLM writes them) that a plain request gets: SSE chunks as tokens are
 * verified, or one JSON body at the end.
 *
 * Stopping follows vLLM's output processor token by token, so a stop that falls inside a round
 * ends the output at the same token a target-only generation would: a stop token id or an
 * end-of-sequence token ends it (the EOS adds no text); a stop string is cut from the text, and
 * while stop strings are active the last (longest − 1) characters are held back so a partial stop
 * string is never streamed; max_tokens ends it with 'length'. Every token up to and including the
 * one that stopped counts in usage.completion_tokens, as on vLLM.
 */
import type { ServerResponse } from 'node:http';

export type FinishReason = 'stop' | 'length';

export interface OutputRules {
  maxTokens: number;
  stop: readonly string[];
  stopTokenIds: ReadonlySet<number>;
  eosTokenIds: ReadonlySet<number>;
}

export class OutputText {
  readonly tokens: number[] = [];
  text = '';
  private sent = 0;
  finishReason: FinishReason | null = null;
  stopReason: string | number | null = null;
  private readonly holdBack: number;

  constructor(private readonly rules: OutputRules) {
    let longest = 0;
    for (const s of rules.stop) longest = Math.max(longest, s.length);
    this.holdBack = longest > 0 ? longest - 1 : 0;
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  get remaining(): number {
    return this.rules.maxTokens - this.tokens.length;
  }

  /**
   * Append tokens with their text (one string per token, or one string for the whole group when
   * a worker streamed several tokens in one chunk). Returns how many were taken: fewer than given
   * when the output ended among them.
   */
  append(ids: readonly number[], texts: readonly string[] | string): number {
    // One text for a group of tokens belongs to its last token that has text of its own: an
    // end-of-sequence or stop token id that ends the group has none (vLLM gives it none).
    let textAt = ids.length - 1;
    if (typeof texts === 'string') {
      while (textAt > 0 && (this.rules.eosTokenIds.has(ids[textAt]!) || this.rules.stopTokenIds.has(ids[textAt]!))) textAt--;
    }
    for (let i = 0; i < ids.length; i++) {
      if (this.finished) return i;
      const t = ids[i]!;
      this.tokens.push(t);
      if (this.rules.stopTokenIds.has(t)) {
        this.finish('stop', t);
        return i + 1;
      }
      if (this.rules.eosTokenIds.has(t)) {
        this.finish('stop', null);
        return i + 1;
      }
      const piece = typeof texts === 'string' ? (i === textAt ? texts : '') : (texts[i] ?? '');
      const from = this.text.length;
      this.text += piece;
      if (this.rules.stop.length > 0 && this.checkStop(from)) return i + 1;
      if (this.tokens.length >= this.rules.maxTokens) {
        this.finish('length', null);
        return i + 1;
      }
    }
    return ids.length;
  }

  private checkStop(from: number): boolean {
    let best = -1;
    let which = '';
    for (const s of this.rules.stop) {
      const i = this.text.indexOf(s, Math.max(0, from - s.length + 1));
      if (i >= 0 && (best < 0 || i < best)) {
        best = i;
        which = s;
      }
    }
    if (best < 0) return false;
    this.text = this.text.slice(0, best);
    this.finish('stop', which);
    return true;
  }

  finish(reason: FinishReason, stopReason: string | number | null): void {
    if (this.finishReason !== null) return;
    this.finishReason = reason;
    this.stopReason = stopReason;
  }

  /** Text that may be shown now and was not yet. */
  takeDelta(): string {
    const visible = this.finished ? this.text.length : Math.max(this.sent, this.text.length - this.holdBack);
    const d = this.text.slice(this.sent, visible);
    this.sent = visible;
    return d;
  }
}

export interface ResponseShape {
  kind: 'chat' | 'completions';
  stream: boolean;
  includeUsage: boolean;
  /** Response id (chatcmpl-… / cmpl-…). */
  id: string;
  model: string;
  promptTokens: number;
}

/** Writes a cascade's answer in the plain OpenAI shape. */
export class ResponseWriter {
  private readonly created = Math.floor(Date.now() / 1000);
  private started = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly shape: ResponseShape,
    private readonly headers: Record<string, string>,
  ) {}

  /** True once any byte was sent. */
  get sentAny(): boolean {
    return this.started;
  }

  private begin(): void {
    if (this.started) return;
    this.started = true;
    this.res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', ...this.headers });
    if (this.shape.kind === 'chat') {
      this.event({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null });
    }
  }

  /** Stream whatever became visible (a no-op for JSON answers and when nothing is new). */
  progress(out: OutputText): void {
    if (!this.shape.stream) return;
    const text = out.takeDelta();
    if (text === '' && !out.finished) {
      this.begin();
      return;
    }
    this.begin();
    const fin = out.finished ? out.finishReason : null;
    if (this.shape.kind === 'chat') {
      this.event({ index: 0, delta: { content: text }, logprobs: null, finish_reason: fin, ...(fin ? { stop_reason: out.stopReason } : {}) });
    } else {
      this.event({ index: 0, text, logprobs: null, finish_reason: fin, stop_reason: fin ? out.stopReason : null });
    }
  }

  /** The answer is complete. */
  end(out: OutputText): void {
    const s = this.shape;
    const usage = { prompt_tokens: s.promptTokens, total_tokens: s.promptTokens + out.tokens.length, completion_tokens: out.tokens.length };
    if (s.stream) {
      this.progress(out);
      if (s.includeUsage) this.write({ id: s.id, object: this.object(), created: this.created, model: s.model, choices: [], usage });
      this.res.end('data: [DONE]\n\n');
      return;
    }
    const choice =
      s.kind === 'chat'
        ? { index: 0, message: { role: 'assistant', content: out.text }, logprobs: null, finish_reason: out.finishReason, stop_reason: out.stopReason }
        : { index: 0, text: out.text, logprobs: null, finish_reason: out.finishReason, stop_reason: out.stopReason };
    const body = JSON.stringify({ id: s.id, object: s.kind === 'chat' ? 'chat.completion' : 'text_completion', created: this.created, model: s.model, choices: [choice], usage });
    this.started = true;
    this.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...this.headers });
    this.res.end(body);
  }

  /** End a stream that cannot finish: one error event, no [DONE] (as the relay does). */
  fail(errorEvent: string): void {
    this.begin();
    this.res.end(errorEvent);
  }

  private object(): string {
    return this.shape.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
  }

  private event(choice: Record<string, unknown>): void {
    this.write({ id: this.shape.id, object: this.object(), created: this.created, model: this.shape.model, choices: [choice] });
  }

  private write(obj: unknown): void {
    this.res.write(`data: ${JSON.stringify(obj)}\n\n`);
  }
}
