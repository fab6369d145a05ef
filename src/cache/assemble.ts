/**
 * Streams into answers: SSE parsing and chunk merging.
 *
 * A StreamAssembler is fed the bytes of an OpenAI-style SSE stream as they arrive (in chunks that
 * may split an event or a UTF-8 sequence anywhere), hands each complete event on (its text, so a
 * single-flight follower can be sent the same chunk) and merges the chunks into the non-streaming
 * answer they add up to (entry.ts, CompletionBody): per choice, the text or message content,
 * reasoning and refusal text and tool-call arguments concatenated, logprobs appended, role, finish
 * and stop reasons kept; the usage chunk's usage; id, created, model from the first chunk.
 *
 * It is complete when `data: [DONE]` arrived with no error event before it and every choice has
 * a finish reason (entry.ts, incompleteReason). Anything unparseable marks the stream failed:
 * such a stream is relayed to its client as usual, but never stored or shared.
 *
 * `remainderChunks` compares what a client was already sent (an assembled prefix) with a full
 * answer to the same request and gives the chunks that complete it, or null if the prefix is
 * not a prefix of the answer.
 */
import { StringDecoder } from 'node:string_decoder';
import type { CompletionBody, CompletionChoice, ToolCall } from './entry.js';
import type { CacheRoute } from './key.js';

interface ChoiceState {
  index: number;
  role: string | null;
  content: string | null;
  reasoning: string | null;
  refusal: string | null;
  toolCalls: ToolCall[];
  text: string;
  /** chat: logprobs.content entries; completions: the four parallel arrays. */
  chatLogprobs: unknown[] | null;
  compLogprobs: { tokens: unknown[]; token_logprobs: unknown[]; top_logprobs: unknown[]; text_offset: unknown[] } | null;
  finishReason: string | null;
  stopReason: unknown;
  hasStopReason: boolean;
}

export type StreamEventKind = 'chunk' | 'usage' | 'done' | 'error';

export class StreamAssembler {
  private readonly decoder = new StringDecoder('utf8');
  private buf = '';
  private readonly choices = new Map<number, ChoiceState>();
  private head: { id?: unknown; created?: unknown; model?: unknown; system_fingerprint?: unknown } | null = null;
  private usage: Record<string, unknown> | null = null;
  /** Bytes fed so far. */
  bytes = 0;
  /** `data: [DONE]` arrived. */
  done = false;
  /** Why the stream cannot be stored or shared (error event, unparseable data), or null. */
  failed: string | null = null;

  /**
   * @param route chat or completions chunks
   * @param onEvent receives each complete event as `data: ...\n\n` text, with its kind
   */
  constructor(
    private readonly route: CacheRoute,
    private readonly onEvent?: (text: string, kind: StreamEventKind) => void,
  ) {}

  push(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.failed !== null && this.onEvent === undefined) return;
    this.buf += this.decoder.write(chunk);
    for (;;) {
      const m = /\r?\n\r?\n/.exec(this.buf);
      if (!m) break;
      const block = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.event(block);
    }
  }

  private event(block: string): void {
    let data: string | null = null;
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('data:')) {
        const v = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
        data = data === null ? v : `${data}\n${v}`;
      }
      // event:, id:, retry: and comments carry nothing the answer needs.
    }
    if (data === null) return;
    const text = `data: ${data}\n\n`;
    if (data === '[DONE]') {
      if (this.done) this.fail('data after [DONE]');
      this.done = true;
      this.onEvent?.(text, 'done');
      return;
    }
    if (this.done) this.fail('data after [DONE]');
    let obj: unknown;
    try {
      obj = JSON.parse(data);
    } catch {
      this.fail('unparseable event');
      this.onEvent?.(text, 'chunk');
      return;
    }
    if (obj === null || typeof obj !== 'object' || (obj as { error?: unknown }).error !== undefined) {
      this.fail('error event');
      this.onEvent?.(text, 'error');
      return;
    }
    const kind = this.merge(obj as Record<string, unknown>);
    this.onEvent?.(text, kind);
  }

  private fail(why: string): void {
    this.failed ??= why;
  }

  /** Merge one chunk; returns 'usage' for the usage-only chunk include_usage adds. */
  private merge(c: Record<string, unknown>): StreamEventKind {
    if (this.head === null) this.head = { id: c.id, created: c.created, model: c.model, system_fingerprint: c.system_fingerprint };
    if (c.usage !== undefined && c.usage !== null && typeof c.usage === 'object') this.usage = c.usage as Record<string, unknown>;
    const choices = c.choices;
    if (!Array.isArray(choices)) {
      this.fail('chunk without choices');
      return 'chunk';
    }
    if (choices.length === 0) return c.usage ? 'usage' : 'chunk';
    for (const raw of choices) {
      if (raw === null || typeof raw !== 'object') {
        this.fail('bad choice');
        continue;
      }
      const ch = raw as Record<string, unknown>;
      const index = typeof ch.index === 'number' ? ch.index : 0;
      let s = this.choices.get(index);
      if (!s) this.choices.set(index, (s = newChoice(index)));
      if (this.route === 'chat') this.mergeDelta(s, ch.delta);
      else if (typeof ch.text === 'string') s.text += ch.text;
      this.mergeLogprobs(s, ch.logprobs);
      if (typeof ch.finish_reason === 'string') s.finishReason = ch.finish_reason;
      if ('stop_reason' in ch && (ch.stop_reason !== null || typeof ch.finish_reason === 'string')) {
        s.stopReason = ch.stop_reason;
        s.hasStopReason = true;
      }
    }
    return 'chunk';
  }

  private mergeDelta(s: ChoiceState, delta: unknown): void {
    if (delta === null || typeof delta !== 'object') return;
    const d = delta as Record<string, unknown>;
    if (typeof d.role === 'string') s.role = d.role;
    if (typeof d.content === 'string') s.content = (s.content ?? '') + d.content;
    if (typeof d.reasoning_content === 'string') s.reasoning = (s.reasoning ?? '') + d.reasoning_content;
    if (typeof d.refusal === 'string') s.refusal = (s.refusal ?? '') + d.refusal;
    if (Array.isArray(d.tool_calls)) {
      for (const raw of d.tool_calls) {
        if (raw === null || typeof raw !== 'object') continue;
        const t = raw as Record<string, unknown>;
        const i = typeof t.index === 'number' ? t.index : s.toolCalls.length;
        const tc = (s.toolCalls[i] ??= { id: undefined, type: 'function', function: { name: '', arguments: '' } });
        if (typeof t.id === 'string') tc.id = t.id;
        if (typeof t.type === 'string') tc.type = t.type;
        const f = t.function as Record<string, unknown> | undefined;
        if (f && typeof f === 'object') {
          if (typeof f.name === 'string') tc.function!.name = (tc.function!.name ?? '') + f.name;
          if (typeof f.arguments === 'string') tc.function!.arguments = (tc.function!.arguments ?? '') + f.arguments;
        }
      }
    }
  }

  private mergeLogprobs(s: ChoiceState, lp: unknown): void {
    if (lp === null || lp === undefined || typeof lp !== 'object') return;
    const l = lp as Record<string, unknown>;
    if (this.route === 'chat') {
      if (Array.isArray(l.content)) (s.chatLogprobs ??= []).push(...l.content);
      return;
    }
    const c = (s.compLogprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] });
    for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) {
      const v = l[k];
      if (Array.isArray(v)) c[k].push(...v);
    }
  }

  /** True once the stream ended normally: [DONE], no error, every choice finished. */
  get complete(): boolean {
    return this.done && this.failed === null && this.choices.size > 0 && [...this.choices.values()].every((c) => c.finishReason !== null);
  }

  /** The answer so far (choices without a finish reason have `finish_reason: null`). */
  build(): CompletionBody {
    const h = this.head ?? {};
    const body: CompletionBody = {
      id: h.id as string | undefined,
      object: this.route === 'chat' ? 'chat.completion' : 'text_completion',
      created: h.created as number | undefined,
      model: h.model as string | undefined,
      choices: [],
    };
    if (h.system_fingerprint !== undefined && h.system_fingerprint !== null) body.system_fingerprint = h.system_fingerprint;
    const sorted = [...this.choices.values()].sort((a, b) => a.index - b.index);
    for (const s of sorted) {
      const c: CompletionChoice = { index: s.index, finish_reason: s.finishReason };
      if (this.route === 'chat') {
        const m: NonNullable<CompletionChoice['message']> = { role: s.role ?? 'assistant', content: s.content };
        if (s.reasoning !== null) m.reasoning_content = s.reasoning;
        if (s.refusal !== null) m.refusal = s.refusal;
        if (s.toolCalls.length > 0) m.tool_calls = s.toolCalls.filter((t) => t !== undefined);
        c.message = m;
        c.logprobs = s.chatLogprobs === null ? null : { content: s.chatLogprobs };
      } else {
        c.text = s.text;
        c.logprobs = s.compLogprobs;
      }
      if (s.hasStopReason) c.stop_reason = s.stopReason;
      body.choices.push(c);
    }
    body.usage = this.usage;
    return body;
  }
}

function newChoice(index: number): ChoiceState {
  return {
    index,
    role: null,
    content: null,
    reasoning: null,
    refusal: null,
    toolCalls: [],
    text: '',
    chatLogprobs: null,
    compLogprobs: null,
    finishReason: null,
    stopReason: null,
    hasStopReason: false,
  };
}

/** `rest` if `full` starts with `prefix`, else null. */
function tail(prefix: string | null | undefined, full: string | null | undefined): string | null {
  const p = prefix ?? '';
  const f = full ?? '';
  return f.startsWith(p) ? f.slice(p.length) : null;
}

/** Items of `full` past `prefix`, or null if the overlap differs (compared as JSON). */
function listTail(prefix: readonly unknown[], full: readonly unknown[]): unknown[] | null {
  if (full.length < prefix.length) return null;
  for (let i = 0; i < prefix.length; i++) if (JSON.stringify(prefix[i]) !== JSON.stringify(full[i])) return null;
  return full.slice(prefix.length);
}

/**
 * The chunks that take a client who was sent `sent` (an assembled prefix of a stream) to the end
 * of `full` (a complete answer to the same request), usage and [DONE] not included; null if what
 * was sent is not a prefix of `full`. Tool-call ids may differ between two generations: the ids
 * already sent stand.
 */
export function remainderChunks(sent: CompletionBody, full: CompletionBody, route: CacheRoute): Array<Record<string, unknown>> | null {
  const base: Record<string, unknown> = {
    id: sent.id ?? full.id,
    object: route === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: sent.created ?? full.created,
    model: sent.model ?? full.model,
  };
  const sentBy = new Map(sent.choices.map((c) => [c.index, c]));
  const out: Array<Record<string, unknown>> = [];
  for (const f of full.choices) {
    const s = sentBy.get(f.index);
    if (s && s.finish_reason !== null) continue; // that choice was complete already
    const choice: Record<string, unknown> = { index: f.index, finish_reason: f.finish_reason };
    if (f.stop_reason !== undefined) choice.stop_reason = f.stop_reason;
    if (route === 'chat') {
      const fm = f.message ?? {};
      const sm = s?.message ?? null;
      if (!sm) out.push({ ...base, choices: [{ index: f.index, delta: { role: fm.role ?? 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
      const delta: Record<string, unknown> = {};
      for (const k of ['content', 'reasoning_content', 'refusal'] as const) {
        const rest = tail(sm?.[k] as string | null | undefined, fm[k] as string | null | undefined);
        if (rest === null) return null;
        if (rest !== '' || (k === 'content' && sm === null)) delta[k] = rest;
      }
      const ft = (fm.tool_calls ?? []);
      const st = (sm?.tool_calls ?? []);
      if (st.length > ft.length) return null;
      const calls: unknown[] = [];
      for (let i = 0; i < ft.length; i++) {
        const a = st[i];
        const b = ft[i]!;
        if (!a) {
          calls.push({ index: i, ...b });
          continue;
        }
        if ((a.function?.name ?? '') !== '' && a.function?.name !== b.function?.name) return null;
        const rest = tail(a.function?.arguments, b.function?.arguments);
        if (rest === null) return null;
        const call: Record<string, unknown> = { index: i };
        if ((a.function?.name ?? '') === '' && b.function?.name) call.function = { name: b.function.name, arguments: rest };
        else if (rest !== '') call.function = { arguments: rest };
        if (call.function !== undefined) calls.push(call);
      }
      if (calls.length > 0) delta.tool_calls = calls;
      choice.delta = delta;
      const fl = (f.logprobs as { content?: unknown[] } | null | undefined)?.content;
      const sl = (s?.logprobs as { content?: unknown[] } | null | undefined)?.content ?? [];
      if (fl) {
        const rest = listTail(sl, fl);
        if (rest === null) return null;
        choice.logprobs = { content: rest };
      } else choice.logprobs = null;
    } else {
      const rest = tail(s?.text, f.text);
      if (rest === null) return null;
      choice.text = rest;
      const fl = f.logprobs as Record<string, unknown[]> | null | undefined;
      if (fl) {
        const sl = (s?.logprobs ?? null) as Record<string, unknown[]> | null;
        const lp: Record<string, unknown[]> = {};
        for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) {
          const r = listTail(sl?.[k] ?? [], fl[k] ?? []);
          if (r === null) return null;
          lp[k] = r;
        }
        choice.logprobs = lp;
      } else choice.logprobs = null;
    }
    out.push({ ...base, choices: [choice] });
  }
  // A choice that was sent but is missing from the full answer cannot be completed.
  for (const s of sent.choices) if (!full.choices.some((f) => f.index === s.index)) return null;
  return out;
}
