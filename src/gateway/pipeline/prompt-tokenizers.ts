/**
 * The prompt tokenizer of each model: the fixed tokenizers given to createGateway
 * (`tokenizerFor`) if any, else the configured registry (`tokenizers` in the config: `estimate`,
 * `hf:<tokenizer.json>`, `remote`), built by load() because `hf:` tokenizers read their files
 * asynchronously.
 */
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import { TokenizerRegistry, type PromptTokenizer, type TokenizerStats } from '../../tokenizer/registry.js';
import type { Tokenizer } from '../../tokenizer/types.js';

export class PromptTokenizers {
  private registry: TokenizerRegistry | null = null;
  private readonly fixed = new Map<string, PromptTokenizer>();

  constructor(
    private readonly config: GatewayConfig['tokenizers'],
    private readonly fixedFor?: (model: string) => Tokenizer,
    /** Told when an `hf:` tokenizer thread died (it is started again). */
    private readonly onThreadExit?: (spec: string, message: string) => void,
    /** Told at load of what a tokenizer cannot do as the model would. */
    private readonly onWarning?: (spec: string, message: string) => void,
  ) {}

  /** Build the configured registry (once; nothing to build with fixed tokenizers). A bad spec is a ConfigError. */
  async load(): Promise<void> {
    if (this.fixedFor || this.registry) return;
    try {
      this.registry = await TokenizerRegistry.create(this.config.models, {
        default: this.config.default,
        remoteTimeoutMs: this.config.remoteTimeoutMs,
        threads: this.config.threads,
        ...(this.onThreadExit ? { onThreadExit: this.onThreadExit } : {}),
        ...(this.onWarning ? { onWarning: this.onWarning } : {}),
      });
    } catch (e) {
      throw new ConfigError([`tokenizers: ${(e as Error).message}`]);
    }
  }

  /** Counts of remote calls and of prompts tokenized on threads (zero before load()). */
  stats(): TokenizerStats {
    return this.registry?.stats ?? { remoteCalls: 0, remoteFailures: 0, lastRemoteError: null, threadPrompts: 0, threadFallbacks: 0 };
  }

  /** Stop the tokenizers' threads. */
  async close(): Promise<void> {
    await this.registry?.close();
  }

  /** The model's tokenizer; the registry must have been loaded unless the tokenizers are fixed. */
  for(model: string): PromptTokenizer {
    const fixedFor = this.fixedFor;
    if (!fixedFor) return this.registry!.for(model);
    let t = this.fixed.get(model);
    if (!t) this.fixed.set(model, (t = syncPromptTokenizer(fixedFor(model))));
    return t;
  }
}

/** A fixed synchronous tokenizer in the registry's shape. */
function syncPromptTokenizer(t: Tokenizer): PromptTokenizer {
  return {
    spec: t.name,
    sync: t,
    tokenize: async (text) => ({ tokens: t.encode(text), tokenizer: t.name, ms: 0 }),
  };
}
