/**
 * Which tokenizer the gateway uses for each model, by spec:
 * - `estimate` (default): the shared tokenizer-free estimate; matches the simulated workers exactly.
 * - `hf:<path to tokenizer.json>`: exact ids from the model's Hugging Face tokenizer.
 * - `remote`: ask a worker of the model (`POST /tokenize`, vLLM's shape). A failure degrades to
 *   the estimate for that request and is counted; it never fails the request.
 * Routing only needs ids that agree with the worker's where it matters (prefix blocks); the
 * estimate is good enough for load and fit, exact ids make KV-event-fed prefix matching exact.
 */
import { DEFAULT_CHAT_RENDER, type ChatMessageLike, type ChatRenderOptions } from './chat-template.js';
import { estimateTokenizer } from './estimate.js';
import { loadHfTokenizer, type HfTokenizer } from './hf.js';
import { HfTokenizerThreads, ThreadLostError } from './hf-threads.js';
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
  /**
   * A chat prompt's messages, `text` being their rendering: `remote` sends them so that the
   * worker applies its model's chat template.
   */
  messages?: readonly ChatMessageLike[];
  /** How the request asks for `messages` to be rendered (vLLM's chat parameters). */
  render?: ChatRenderOptions;
  /** A worker serving the model, for `remote`. */
  workerUrl?: string;
  addSpecialTokens?: boolean;
  signal?: AbortSignal;
}

export interface PromptTokenization {
  tokens: ArrayLike<number>;
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
  /**
   * Tokenize `text` off the event loop if this tokenizer does that for a text of its length (an
   * `hf:` tokenizer with threads, a long prompt); null: use `sync` (or tokenize()) as usual.
   */
  offThread?(text: string, ctx: TokenizeContext): Promise<PromptTokenization> | null;
  /** Release what it holds (tokenizer threads). */
  close?(): Promise<void>;
}

export interface TokenizerRegistryOptions {
  /** Spec for models not listed (default 'estimate'). */
  default?: string;
  remoteTimeoutMs?: number;
  /** Worker threads per `hf:` tokenizer for long prompts (default 1; 0: on the event loop). */
  threads?: number;
  /** Told when a tokenizer thread died (it is started again). */
  onThreadExit?: (spec: string, message: string) => void;
  /** Told of what a tokenizer cannot do as the model would (a chat template that does not parse). */
  onWarning?: (spec: string, message: string) => void;
}

export interface TokenizerStats {
  remoteCalls: number;
  remoteFailures: number;
  lastRemoteError: string | null;
  /** Long prompts tokenized on a tokenizer thread. */
  threadPrompts: number;
  /** Long prompts tokenized on the event loop because no tokenizer thread could take them. */
  threadFallbacks: number;
}

/**
 * Texts this long or longer go to a tokenizer thread. With OpenLLaMA's tokenizer.json a text of
 * 1,000 characters cost 174 µs on the event loop, and handing a text to a thread and taking its
 * ids back ~0.1 ms; shorter texts are tokenized in place, without the extra hop.
 */
export const OFF_THREAD_FROM_CHARS = 1024;

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

/** An `hf:` tokenizer: in place for short texts, on its threads (when it has any) for long ones. */
class HfPromptTokenizer extends SyncPromptTokenizer {
  constructor(
    spec: string,
    override readonly sync: HfTokenizer,
    private readonly threads: HfTokenizerThreads | null,
    private readonly stats: TokenizerStats,
  ) {
    super(spec, sync);
  }

  override tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    return this.offThread(text, ctx) ?? super.tokenize(text, ctx);
  }

  offThread(text: string, ctx: TokenizeContext): Promise<PromptTokenization> | null {
    if (this.threads === null || text.length < OFF_THREAD_FROM_CHARS) return null;
    return this.onThread(this.threads, text, ctx);
  }

  close(): Promise<void> {
    return this.threads?.close() ?? Promise.resolve();
  }

  private async onThread(threads: HfTokenizerThreads, text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    const t0 = performance.now();
    try {
      const tokens = await threads.encode(text, ctx.addSpecialTokens);
      this.stats.threadPrompts++;
      return { tokens, tokenizer: this.spec, ms: performance.now() - t0 };
    } catch (err) {
      this.stats.threadFallbacks++;
      const degraded = (err as Error).message;
      // A prompt a thread died or stalled on could do the same to the event loop: it is routed
      // on the estimate's ids (degraded, like a failed `remote` call). Otherwise no thread was
      // running: the same ids, on the event loop, slower.
      if (err instanceof ThreadLostError) return { tokens: estimateTokenizer.encode(text), tokenizer: 'estimate', degraded, ms: performance.now() - t0 };
      return { tokens: this.sync.encode(text, ctx.addSpecialTokens), tokenizer: this.spec, degraded, ms: performance.now() - t0 };
    }
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
        const tokens = await remoteTokenize(ctx.workerUrl, ctx.model, ctx.messages !== undefined ? { messages: ctx.messages, render: ctx.render ?? DEFAULT_CHAT_RENDER } : text, opts);
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
  opts: {
    remoteTimeoutMs?: number;
    stats?: TokenizerStats;
    threads?: number;
    /** Longest a tokenizer thread may spend on one prompt (default hf-threads.ts THREAD_TIMEOUT_MS). */
    threadTimeoutMs?: number;
    onThreadExit?: (spec: string, message: string) => void;
    onWarning?: (spec: string, message: string) => void;
  } = {},
): Promise<PromptTokenizer> {
  const s = parseTokenizerSpec(spec);
  const stats = opts.stats ?? { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null, threadPrompts: 0, threadFallbacks: 0 };
  switch (s.kind) {
    case 'estimate':
      return new SyncPromptTokenizer('estimate', estimateTokenizer);
    case 'hf': {
      const name = `hf:${s.path}`;
      // Loaded here first: a bad file is reported once, in the caller's words, before any thread starts.
      const tokenizer = await loadHfTokenizer(s.path);
      if (tokenizer.chatTemplateProblem !== null) opts.onWarning?.(name, tokenizer.chatTemplateProblem);
      const n = opts.threads ?? 1;
      const threads =
        n > 0
          ? await HfTokenizerThreads.start({
              path: s.path,
              threads: n,
              ...(opts.threadTimeoutMs !== undefined ? { timeoutMs: opts.threadTimeoutMs } : {}),
              onExit: (m) => opts.onThreadExit?.(name, m),
            })
          : null;
      return new HfPromptTokenizer(name, tokenizer, threads, stats);
    }
    case 'remote':
      return new RemotePromptTokenizer(stats, opts.remoteTimeoutMs ?? 250);
  }
}

/** Tokenizers by model name. Create with `TokenizerRegistry.create` (loads every hf: file once). */
export class TokenizerRegistry {
  readonly stats: TokenizerStats = { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null, threadPrompts: 0, threadFallbacks: 0 };
  private readonly byModel = new Map<string, PromptTokenizer>();
  private readonly all: PromptTokenizer[] = [];
  private fallback!: PromptTokenizer;

  private constructor() {}

  static async create(byModel: Record<string, string> = {}, opts: TokenizerRegistryOptions = {}): Promise<TokenizerRegistry> {
    const r = new TokenizerRegistry();
    // One tokenizer (and one set of threads) per spec, however many models share it.
    const bySpec = new Map<string, PromptTokenizer>();
    const make = async (spec: string): Promise<PromptTokenizer> => {
      let t = bySpec.get(spec.trim());
      if (t === undefined) {
        const made = await createPromptTokenizer(spec, {
          stats: r.stats,
          remoteTimeoutMs: opts.remoteTimeoutMs ?? 250,
          ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
          ...(opts.onThreadExit ? { onThreadExit: opts.onThreadExit } : {}),
          ...(opts.onWarning ? { onWarning: opts.onWarning } : {}),
        });
        bySpec.set(spec.trim(), (t = made));
        r.all.push(made);
      }
      return t;
    };
    try {
      r.fallback = await make(opts.default ?? 'estimate');
      for (const [model, spec] of Object.entries(byModel)) {
        try {
          r.byModel.set(model, await make(spec));
        } catch (err) {
          throw new Error(`tokenizer for model '${model}': ${(err as Error).message}`);
        }
      }
    } catch (err) {
      await r.close();
      throw err;
    }
    return r;
  }

  /** Stop the tokenizers' threads. */
  async close(): Promise<void> {
    await Promise.all(this.all.map(async (t) => { await t.close?.(); }));
  }

  for(model: string): PromptTokenizer {
    return this.byModel.get(model) ?? this.fallback;
  }

  tokenize(text: string, ctx: TokenizeContext): Promise<PromptTokenization> {
    return this.for(ctx.model).tokenize(text, ctx);
  }
}
