/**
 * Which tokenizer the gateway uses for each model, by spec:
 * - `estimate` (default): the shared tokenizer-free estimate; matches the simulated workers exactly.
 * - `hf:<path to tokenizer.json>`: exact ids from the model's Hugging Face tokenizer.
 * - `remote`: ask a worker of the model (`POST /tokenize`, vLLM's shape). A failure degrades to
 *   the estimate for that request and is counted; it never fails the request.
 * Routing only needs ids that agree with the worker's where it matters (prefix blocks); the
 * estimate is good enough for load and fit, exact ids make KV-event-fed prefix matching exact.
 */
import { estimateTokenizer } from './estimate.js';
import { loadHfTokenizer } from './hf.js';
import { remoteTokenize } from './remote.js';
import type { Tokenizer } from './types.js';

export type TokenizerSpec = { kind: 'estimate' } | { kind: 'hf'; path: string } | { kind: 'remote' };

export function parseTokenizerSpec(spec: string): TokenizerSpec {
  const s = spec.trim();
  if (s === '' || s === 'estimate') return { kind: 'estimate' };
  if (s === 'remote') return { kind: 'remote' };
  if (s.startsWith('hf:')) {
    const path = s.slice(3).trim();
    if (path === '') throw new Error(`tokenizer spec '${spec}' needs a path: hf:/models/llama/tokenizer.json`);
    return { kind: 'hf', path };
  }
  throw new Error(`unknown tokenizer '${spec}' (expected 'estimate', 'hf:<path to tokenizer.json>' or 'remote')`);
}

export interface TokenizeContext {
  model: string;
  /** A worker serving the model, for `remote`. */
  workerUrl?: string;
  addSpecialTokens?: boolean;
  signal?: AbortSignal;
}

export interface PromptTokenization {
  tokens: number[];
  /** The tokenizer that produced `tokens` ('estimate' when a remote call fell back). */
  tokenizer: string;
  /** Why the configured tokenizer was not used, when it was not. */
  degraded?: string;
  /** Time spent, ms. */
  ms: number;
}

export interface PromptTokenizer {
  readonly spec: string;
  /** Synchronous tokenizer when there is one (estimate, hf), for hot paths and the simulation. */
  readonly sync: Tokenizer | null;
  tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization>;
}

export interface TokenizerRegistryOptions {
  /** Spec for models not listed (default 'estimate'). */
  default?: string;
  remoteTimeoutMs?: number;
}

export interface TokenizerStats {
  remoteCalls: number;
  remoteFailures: number;
  lastRemoteError: string | null;
}

class SyncPromptTokenizer implements PromptTokenizer {
  constructor(
    readonly spec: string,
    readonly sync: Tokenizer & { encode(text: string, addSpecialTokens?: boolean): number[] },
  ) {}

  async tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    const t0 = performance.now();
    const tokens = this.sync.encode(text, ctx.addSpecialTokens);
    return { tokens, tokenizer: this.spec, ms: performance.now() - t0 };
  }
}

class RemotePromptTokenizer implements PromptTokenizer {
  readonly spec = 'remote';
  readonly sync = null;

  constructor(
    private readonly stats: TokenizerStats,
    private readonly timeoutMs: number,
  ) {}

  async tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    const t0 = performance.now();
    let degraded: string;
    if (ctx.workerUrl === undefined) degraded = 'no worker to tokenize with';
    else {
      this.stats.remoteCalls++;
      try {
        const opts: Parameters<typeof remoteTokenize>[3] = { timeoutMs: this.timeoutMs };
        if (ctx.addSpecialTokens !== undefined) opts.addSpecialTokens = ctx.addSpecialTokens;
        if (ctx.signal) opts.signal = ctx.signal;
        const tokens = await remoteTokenize(ctx.workerUrl, ctx.model, text, opts);
        return { tokens, tokenizer: 'remote', ms: performance.now() - t0 };
      } catch (err) {
        degraded = (err as Error).message;
      }
    }
    this.stats.remoteFailures++;
    this.stats.lastRemoteError = degraded;
    return { tokens: estimateTokenizer.encode(text), tokenizer: 'estimate', degraded, ms: performance.now() - t0 };
  }
}

/** Build the tokenizer for one spec. `hf:` specs load (and validate) their file here. */
export async function createPromptTokenizer(
  spec: string,
  opts: { remoteTimeoutMs?: number; stats?: TokenizerStats } = {},
): Promise<PromptTokenizer> {
  const s = parseTokenizerSpec(spec);
  switch (s.kind) {
    case 'estimate':
      return new SyncPromptTokenizer('estimate', estimateTokenizer);
    case 'hf':
      return new SyncPromptTokenizer(`hf:${s.path}`, await loadHfTokenizer(s.path));
    case 'remote':
      return new RemotePromptTokenizer(opts.stats ?? { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null }, opts.remoteTimeoutMs ?? 250);
  }
}

/** Tokenizers by model name. Create with `TokenizerRegistry.create` (loads every hf: file once). */
export class TokenizerRegistry {
  readonly stats: TokenizerStats = { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null };
  private readonly byModel = new Map<string, PromptTokenizer>();
  private fallback!: PromptTokenizer;

  private constructor() {}

  static async create(byModel: Record<string, string> = {}, opts: TokenizerRegistryOptions = {}): Promise<TokenizerRegistry> {
    const r = new TokenizerRegistry();
    const make = (spec: string) => createPromptTokenizer(spec, { stats: r.stats, remoteTimeoutMs: opts.remoteTimeoutMs ?? 250 });
    r.fallback = await make(opts.default ?? 'estimate');
    for (const [model, spec] of Object.entries(byModel)) {
      try {
        r.byModel.set(model, await make(spec));
      } catch (err) {
        throw new Error(`tokenizer for model '${model}': ${(err as Error).message}`);
      }
    }
    return r;
  }

  for(model: string): PromptTokenizer {
    return this.byModel.get(model) ?? this.fallback;
  }

  tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    return this.for(ctx.model).tokenize(text, ctx);
  }
}
