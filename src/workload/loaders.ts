/**
 * Trace loaders: Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV and kvgate's own JSONL, each
 * read line by line (never whole) into BenchRequests in arrival order.
 *
 * A malformed row stops the load with a TraceError naming the file and line, or — with skipBad —
 * is skipped and counted (`source.skipped`).
 */
import { DEFAULT_VLLM_PRIORITY, isPriorityClass } from '../admission/classes.js';
import { basename } from 'node:path';
import { estimateTokenizer, renderChat, type ChatMessageLike } from '../tokenizer/index.js';
import { readLineAt, readLines } from './line-reader.js';
import { answerTokens, BlockTokenCache, concatTokens, fillStream, mix32, tokensFromBlocks } from './tokens.js';
import type { BenchRequest, BenchSource } from './types.js';
import { InsertionFront } from '../util/insertion-front.js';

export type TraceFormat = 'mooncake' | 'azure' | 'burstgpt' | 'jsonl';
export const TRACE_FORMATS: readonly TraceFormat[] = ['mooncake', 'azure', 'burstgpt', 'jsonl'];

export class TraceError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    reason: string,
  ) {
    super(`${file}:${line}: ${reason}`);
    this.name = 'TraceError';
  }
}

export interface LoaderOptions {
  /** Skip and count malformed rows instead of failing. */
  skipBad?: boolean;
  /** Seed of the synthetic token content (default 0). */
  seed?: number;
}

export interface AzureOptions extends LoaderOptions {
  /**
   * Give prompts a synthetic shared prefix (Azure and BurstGPT rows carry no prefix information): `tokens`
   * leading tokens, or `fraction` of each prompt, taken from one of `groups` prefixes (default 16)
   * chosen per row. Always leaves at least one token of the prompt unshared.
   */
  sharedPrefix?: { tokens?: number; fraction?: number; groups?: number };
}

/** Thrown inside a row parser; becomes a TraceError with the line number. */
class BadRow extends Error {}

function bad(reason: string): never {
  throw new BadRow(reason);
}

function posInt(v: unknown, field: string, min = 1): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) bad(`"${field}" must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
  return v;
}

function finiteNum(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) bad(`"${field}" must be a non-negative number, got ${JSON.stringify(v)}`);
  return v;
}

function parseJsonObject(text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    bad(`invalid JSON (${(e as Error).message})`);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) bad('row is not a JSON object');
  return v as Record<string, unknown>;
}

/**
 * Drives a row parser over a file: skips blank lines, enforces non-decreasing arrivals, turns
 * parse failures into TraceErrors or skip counts.
 */
class LineSource implements BenchSource {
  skipped = 0;
  constructor(
    readonly name: string,
    private readonly path: string,
    private readonly opts: LoaderOptions,
    /** Returns null for lines that are not rows (a CSV header). */
    private readonly parse: (text: string, lineNo: number) => BenchRequest | null,
    private readonly reset: () => void = () => {},
  ) {}

  *open(): Generator<BenchRequest> {
    this.skipped = 0;
    this.reset();
    const file = basename(this.path);
    let last = -Infinity;
    for (const { no, text } of readLines(this.path)) {
      if (text.trim() === '') continue;
      let r: BenchRequest | null;
      try {
        r = this.parse(text, no);
        if (r && r.arrivalMs < last) bad(`timestamp goes backwards (${r.arrivalMs} ms after ${last} ms)`);
      } catch (e) {
        if (!(e instanceof BadRow)) throw e;
        if (this.opts.skipBad) {
          this.skipped++;
          continue;
        }
        throw new TraceError(file, no, e.message);
      }
      if (!r) continue;
      last = r.arrivalMs;
      yield r;
    }
  }
}

/** Mooncake: {"timestamp" ms, "input_length", "output_length", "hash_ids": one id per 512-token block}. */
export function mooncakeSource(path: string, opts: LoaderOptions = {}): BenchSource {
  const seed = opts.seed ?? 0;
  let cache = new BlockTokenCache(seed);
  return new LineSource(
    `mooncake:${basename(path)}`,
    path,
    opts,
    (text, no) => {
      const o = parseJsonObject(text);
      const arrivalMs = finiteNum(o.timestamp, 'timestamp');
      const input = posInt(o.input_length, 'input_length');
      const output = posInt(o.output_length, 'output_length');
      const ids = o.hash_ids;
      if (!Array.isArray(ids)) bad('"hash_ids" must be an array of integers');
      for (const id of ids) if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) bad(`"hash_ids" holds a non-integer: ${JSON.stringify(id)}`);
      const rowSeed = mix32(seed ^ 0x2545f491, no);
      return {
        arrivalMs,
        promptTokens: tokensFromBlocks(cache, ids as number[], input, rowSeed),
        maxTokens: output,
        outputSeed: rowSeed,
      };
    },
    () => {
      cache = new BlockTokenCache(seed);
    },
  );
}

/** `2023-11-16 18:17:03.9799600` → ms since the epoch (UTC; only differences matter). */
export function parseAzureTimestamp(s: string): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2}(?:\.\d+)?)$/.exec(s.trim());
  if (!m) return NaN;
  const base = Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!);
  return base + parseFloat(m[6]!) * 1000;
}

/** Azure: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`; arrival times become ms from the first row. */
export function azureSource(path: string, opts: AzureOptions = {}): BenchSource {
  const seed = opts.seed ?? 0;
  const sp = opts.sharedPrefix;
  let t0 = NaN;
  return new LineSource(
    `azure:${basename(path)}`,
    path,
    opts,
    (text, no) => {
      const cols = text.split(',');
      if (no === 1 && cols[0]?.trim().toUpperCase() === 'TIMESTAMP') return null;
      if (cols.length !== 3) bad(`expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got ${cols.length}`);
      const ts = parseAzureTimestamp(cols[0]!);
      if (!Number.isFinite(ts)) bad(`bad TIMESTAMP ${JSON.stringify(cols[0])}`);
      const input = posInt(Number(cols[1]!.trim() || NaN), 'ContextTokens');
      const output = posInt(Number(cols[2]!.trim() || NaN), 'GeneratedTokens');
      if (Number.isNaN(t0)) t0 = ts;
      const rowSeed = mix32(seed ^ 0x68e31da4, no);
      return { arrivalMs: ts - t0, promptTokens: syntheticPrompt(input, rowSeed, seed, sp), maxTokens: output, outputSeed: rowSeed };
    },
    () => {
      t0 = NaN;
    },
  );
}

/**
 * A prompt of `input` tokens for a row that gives only its length: its own tokens, after the
 * shared prefix `sp` asks for (one of sp.groups prefixes, chosen per row).
 */
function syntheticPrompt(input: number, rowSeed: number, seed: number, sp: AzureOptions['sharedPrefix']): Int32Array {
  const tokens = new Int32Array(input);
  let shared = 0;
  if (sp) {
    const want = sp.tokens ?? Math.floor((sp.fraction ?? 0) * input);
    shared = Math.max(0, Math.min(want, input - 1));
    const group = mix32(rowSeed, 1) % Math.max(1, sp.groups ?? 16);
    fillStream(tokens, 0, mix32(seed ^ 0x1b873593, group), shared);
  }
  fillStream(tokens, shared, rowSeed, input - shared);
  return tokens;
}

/** BurstGPT sessions whose last prompt is kept (the most recently active). */
const MAX_SESSIONS = 100_000;

/**
 * BurstGPT (Wang et al., arXiv:2401.17644): CSV with a header naming `Timestamp` (seconds from the
 * trace's start), `Request tokens` and `Response tokens` (and `Model`, `Total tokens`, `Log Type`,
 * not needed here), in any order. A row whose response has 0 tokens is a failed request in that
 * trace: it is left out and counted (`source.skipped`). Like Azure's rows, these carry no prompt
 * content: the same synthetic prompts and shared-prefix option.
 *
 * Its later releases add `Session ID`: a conversation's turns, each request carrying the history.
 * A turn whose prompt is at least as long as its session's previous prompt begins with that prompt
 * (the history a chat client sends again), so prefix caching sees the conversation; a shorter one
 * (a history cut short) is a prompt of its own. The last prompt of the 100,000 most recently active
 * sessions is kept. Replayed at the recorded times (open loop).
 */
export function burstgptSource(path: string, opts: AzureOptions = {}): BenchSource {
  const seed = opts.seed ?? 0;
  const sp = opts.sharedPrefix;
  let cols: { ts: number; input: number; output: number; session: number; n: number } | null = null;
  let t0 = NaN;
  /** Session id → its last prompt, least recently active first. */
  let sessions = new Map<string, Int32Array>();
  let oldestSession = new InsertionFront(sessions);
  const src: LineSource = new LineSource(
    `burstgpt:${basename(path)}`,
    path,
    opts,
    (text, no) => {
      const cells = text.split(',').map((c) => c.trim());
      if (cols === null) {
        const at = (name: string): number => cells.findIndex((c) => c.toLowerCase() === name.toLowerCase());
        cols = { ts: at('Timestamp'), input: at('Request tokens'), output: at('Response tokens'), session: at('Session ID'), n: cells.length };
        if (cols.ts < 0 || cols.input < 0 || cols.output < 0) {
          const found = cells.join(',');
          cols = null;
          bad(`expected a header with Timestamp, Request tokens and Response tokens, got ${JSON.stringify(found.slice(0, 120))}`);
        }
        return null;
      }
      if (cells.length !== cols.n) bad(`expected ${cols.n} columns, got ${cells.length}`);
      const ts = Number(cells[cols.ts] || NaN) * 1000;
      if (!Number.isFinite(ts) || ts < 0) bad(`bad Timestamp ${JSON.stringify(cells[cols.ts])}`);
      const output = Number(cells[cols.output] || NaN);
      if (output === 0) {
        src.skipped++;
        return null;
      }
      const input = posInt(Number(cells[cols.input] || NaN), 'Request tokens');
      posInt(output, 'Response tokens');
      if (Number.isNaN(t0)) t0 = ts;
      const rowSeed = mix32(seed ^ 0x0b5a7c11, no);
      const id = cols.session >= 0 ? cells[cols.session]! : '';
      const history = id === '' ? undefined : sessions.get(id);
      let prompt: Int32Array;
      if (history !== undefined && history.length <= input) {
        prompt = new Int32Array(input);
        prompt.set(history);
        fillStream(prompt, history.length, rowSeed, input - history.length);
      } else prompt = syntheticPrompt(input, rowSeed, seed, sp);
      if (id !== '') {
        sessions.delete(id);
        sessions.set(id, prompt);
        if (sessions.size > MAX_SESSIONS) oldestSession.shift();
      }
      return { arrivalMs: ts - t0, promptTokens: prompt, maxTokens: output, outputSeed: rowSeed };
    },
    () => {
      cols = null;
      t0 = NaN;
      sessions = new Map();
      oldestSession = new InsertionFront(sessions);
    },
  );
  return src;
}

/** One parsed kvgate JSONL row: the request as written, and its session fields. */
interface JsonlRow {
  req: BenchRequest;
  /** Recorded send time, ms. */
  timestampMs: number;
  thinkMs?: number;
  append: boolean;
}

function parseJsonlRow(text: string, no: number, seed: number): JsonlRow {
  const o = parseJsonObject(text);
  const arrivalMs = finiteNum(o.timestamp_ms, 'timestamp_ms');
  const maxTokens = posInt(o.max_tokens, 'max_tokens');
  let promptTokens: ArrayLike<number>;
  let promptText: string | undefined;
  const given = ['prompt', 'prompt_tokens', 'messages'].filter((k) => o[k] !== undefined);
  if (given.length !== 1) bad(`exactly one of "prompt", "prompt_tokens", "messages" is required, got ${given.length}`);
  if (o.prompt !== undefined) {
    if (typeof o.prompt !== 'string') bad('"prompt" must be a string');
    promptText = o.prompt;
    promptTokens = estimateTokenizer.encode(promptText);
  } else if (o.prompt_tokens !== undefined) {
    const ids = o.prompt_tokens;
    if (!Array.isArray(ids)) bad('"prompt_tokens" must be an array of token ids');
    for (const id of ids) if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) bad(`"prompt_tokens" holds a non-id: ${JSON.stringify(id)}`);
    promptTokens = ids as number[];
  } else {
    const msgs = o.messages;
    if (!Array.isArray(msgs) || msgs.length === 0) bad('"messages" must be a non-empty array');
    for (const m of msgs) {
      if (!m || typeof m !== 'object' || typeof (m as { role?: unknown }).role !== 'string') bad('each message needs a string "role"');
    }
    promptText = renderChat(msgs as ChatMessageLike[]);
    promptTokens = estimateTokenizer.encode(promptText);
  }
  if (promptTokens.length === 0) bad('prompt is empty');
  const r: BenchRequest = { arrivalMs, promptTokens, maxTokens, outputSeed: mix32(seed ^ 0x3c6ef372, no) };
  if (promptText !== undefined) r.promptText = promptText;
  if (o.tenant !== undefined) {
    if (typeof o.tenant !== 'string') bad('"tenant" must be a string');
    r.tenant = o.tenant;
  }
  if (o.session !== undefined) {
    if (typeof o.session !== 'string') bad('"session" must be a string');
    r.session = o.session;
  }
  if (o.priority !== undefined) {
    // vLLM's integer (lower is served first), or a class name read as its default integer.
    if (typeof o.priority === 'string' && isPriorityClass(o.priority)) r.priority = DEFAULT_VLLM_PRIORITY[o.priority];
    else if (typeof o.priority === 'number' && Number.isInteger(o.priority)) r.priority = o.priority;
    else bad('"priority" must be an integer or one of critical, standard, sheddable');
  }
  if (o.n !== undefined) {
    // n sampled answers, each max_tokens long (the simulation runs one sequence per answer).
    if (typeof o.n !== 'number' || !Number.isInteger(o.n) || o.n < 1 || o.n > 128) bad('"n" must be an integer from 1 to 128');
    if (o.n > 1) r.sampleTokens = new Array<number>(o.n).fill(maxTokens);
  }
  const row: JsonlRow = { req: r, timestampMs: arrivalMs, append: false };
  if (o.think_ms !== undefined) {
    if (o.session === undefined) bad('"think_ms" needs a "session"');
    row.thinkMs = finiteNum(o.think_ms, 'think_ms');
  }
  if (o.append !== undefined) {
    if (typeof o.append !== 'boolean') bad('"append" must be true or false');
    if (o.append && o.session === undefined) bad('"append" needs a "session"');
    row.append = o.append;
  }
  return row;
}

/** Where a session's rows are in the file, for reading later turns when they are due. */
interface RowRef {
  no: number;
  offset: number;
  bytes: number;
}

/** The session id of a row, read cheaply (null when the row has none or does not parse). */
function sessionOf(text: string): string | null {
  if (!text.includes('"session"')) return null;
  try {
    const o = JSON.parse(text) as { session?: unknown };
    return typeof o?.session === 'string' ? o.session : null;
  } catch {
    return null;
  }
}

/**
 * kvgate JSONL: {"timestamp_ms", one of "prompt" (text) | "prompt_tokens" (ids) | "messages"
 * (chat, rendered with the chat template), "max_tokens", "n"? (sampled answers, each max_tokens
 * long), "tenant"?, "priority"? (vLLM's integer, or critical | standard | sheddable read as 0 | 1 | 2), "session"?,
 * "think_ms"?, "append"?}.
 *
 * Rows sharing a "session" are the turns of one conversation, in file order, replayed closed loop:
 * the first turn arrives at its timestamp_ms; each later turn is sent when the previous turn has
 * finished (or was refused) in the simulation, plus a think time: its "think_ms", or else the gap
 * between the two rows' timestamps (the recorded gap, which also holds the recorded answer time:
 * an upper bound on the think time). A later turn's prompt is either given whole, or with
 * `"append": true` given as the new message only: the prompt is then the previous turn's prompt,
 * the answer the simulated engine generated for it, and these tokens — the growing conversation
 * that prefix caching sees. Later turns are read from the file when they are due (a first pass
 * indexes each session's rows by byte offset; the trace is still never held whole).
 */
export function jsonlSource(path: string, opts: LoaderOptions = {}): BenchSource {
  const seed = opts.seed ?? 0;
  const file = basename(path);
  // Rows of sessions with more than one row, by session, found by a first pass on each open().
  let sessions = new Map<string, RowRef[]>();
  let later = new Set<number>();
  const src = new LineSource(
    `jsonl:${file}`,
    path,
    opts,
    (text, no) => {
      if (later.has(no)) return null; // sent when the previous turn of its session is done
      const row = parseJsonlRow(text, no, seed);
      if (row.append) bad('"append" on the first turn of a session (there is no previous turn)');
      const rows = row.req.session !== undefined ? sessions.get(row.req.session) : undefined;
      if (rows === undefined) return row.req;
      return withTurns(row, rows, 0);
    },
    () => {
      sessions = new Map();
      later = new Set();
      const all = new Map<string, RowRef[]>();
      for (const { no, text, offset, bytes } of readLines(path)) {
        const id = sessionOf(text);
        if (id === null) continue;
        let rows = all.get(id);
        if (!rows) all.set(id, (rows = []));
        rows.push({ no, offset, bytes });
      }
      for (const [id, rows] of all) {
        if (rows.length < 2) continue;
        sessions.set(id, rows);
        for (let k = 1; k < rows.length; k++) later.add(rows[k]!.no);
      }
    },
  );
  /** Turn `k` of a session whose rows are `rows`: attach the count of turns left and the next turn. */
  const withTurns = (row: JsonlRow, rows: RowRef[], k: number): BenchRequest => {
    const r = row.req;
    r.turns = rows.length - k;
    if (k + 1 < rows.length) r.next = (doneMs) => nextTurn(row, rows, k + 1, doneMs);
    return r;
  };
  const nextTurn = (prev: JsonlRow, rows: RowRef[], k: number, doneMs: number): BenchRequest | undefined => {
    for (; k < rows.length; k++) {
      const ref = rows[k]!;
      let row: JsonlRow;
      try {
        row = parseJsonlRow(readLineAt(path, ref.offset, ref.bytes).replace(/\r$/, ''), ref.no, seed);
        if (row.thinkMs === undefined && row.timestampMs < prev.timestampMs) {
          bad(`timestamp goes backwards within session ${JSON.stringify(prev.req.session)} (${row.timestampMs} ms after ${prev.timestampMs} ms)`);
        }
      } catch (e) {
        if (!(e instanceof BadRow)) throw e;
        if (opts.skipBad) {
          src.skipped++;
          continue;
        }
        throw new TraceError(file, ref.no, e.message);
      }
      const think = row.thinkMs ?? row.timestampMs - prev.timestampMs;
      const r = row.req;
      if (row.append) {
        const p = prev.req;
        r.promptTokens = concatTokens([p.promptTokens, answerTokens(p.outputSeed, p.maxTokens), r.promptTokens]);
        delete r.promptText;
      }
      r.arrivalMs = doneMs + think;
      return withTurns(row, rows, k);
    }
    return undefined;
  };
  return src;
}

export function loadTrace(path: string, format: TraceFormat, opts: AzureOptions = {}): BenchSource {
  switch (format) {
    case 'mooncake':
      return mooncakeSource(path, opts);
    case 'azure':
      return azureSource(path, opts);
    case 'burstgpt':
      return burstgptSource(path, opts);
    case 'jsonl':
      return jsonlSource(path, opts);
  }
}

