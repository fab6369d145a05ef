/**
 * A chat prompt's token ids, message by message, with the ids of long messages kept for the next
 * request that sends them again.
 *
 * A conversation resends its whole history with every turn, and a RAG or agent prompt repeats its
 * long system message and documents across requests, so the gateway tokenized the same text over
 * and over: for an 8,000-token prompt that was the largest share of its CPU time per request
 * (docs/performance.md, "Tokenizing long prompts"). Here each message is tokenized on its own and
 * a message of `minChars` or more is remembered (least recently used first out, at most
 * `maxTokens` ids in all), so a turn costs the tokenizing of what is new in it.
 *
 * Exact only for the `estimate` tokenizer and the shared template (chat-template.ts): every
 * rendered message ends with a newline and the next begins with '<', and no estimate piece spans
 * such a boundary (a piece is a run of letters or digits or one other character, with at most one
 * space before it), so the ids of the messages one after the other are the ids of the whole text.
 * test/tokenizer/chat-tokens.test.ts checks that on random conversations. A real model's
 * tokenizer (hf:) merges across such boundaries by its own rules and is not given this cache.
 * Where a pool isolates tenants, messages are kept per tenant (`scope`).
 */
import { GENERATION_PROMPT, renderMessage, type ChatMessageLike } from './chat-template.js';
import type { Tokenizer } from './types.js';

/** Ids kept by default (`tokenizers.keptIds`): 8 MB (Node's heap has no pointer compression), plus the messages' text. */
export const DEFAULT_KEPT_IDS = 1 << 20;

export interface ChatTokenCacheOptions {
  /** Ids kept in all, at most (each a small integer: 8 bytes in Node's heap). */
  maxTokens: number;
  /** Messages shorter than this (rendered) are tokenized every time: not worth a lookup. */
  minChars: number;
}

export class ChatTokenCache {
  /** Rendered message → its ids; Map order is the LRU order (oldest first). */
  private readonly entries = new Map<string, number[]>();
  private kept = 0;
  private generation: number[] | null = null;
  hits = 0;
  misses = 0;

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly o: ChatTokenCacheOptions,
  ) {}

  /**
   * The ids of renderChat(messages, addGenerationPrompt) under the tokenizer, a new array. With a
   * `scope` (a tenant's cache salt where the pool isolates tenants) messages are kept per scope:
   * a hit is faster than a miss, and one tenant must not learn from the timing which long
   * messages another has sent.
   */
  encode(messages: readonly ChatMessageLike[], addGenerationPrompt = true, scope?: string): number[] {
    const parts: number[][] = [];
    for (const m of messages) parts.push(this.message(renderMessage(m), scope));
    if (addGenerationPrompt) parts.push((this.generation ??= this.tokenizer.encode(GENERATION_PROMPT)));
    return ([] as number[]).concat(...parts);
  }

  /** Ids kept now. */
  get size(): number {
    return this.kept;
  }

  /** Keep at most `maxTokens` ids from now on (0: none), dropping the least recently used now. */
  resize(maxTokens: number): void {
    this.o.maxTokens = maxTokens;
    this.evict();
  }

  private message(text: string, scope: string | undefined): number[] {
    if (text.length < this.o.minChars) return this.tokenizer.encode(text);
    const key = scope === undefined ? text : `${scope}\u0000${text}`;
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.hits++;
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit;
    }
    this.misses++;
    const ids = this.tokenizer.encode(text);
    if (ids.length <= this.o.maxTokens) {
      this.entries.set(key, ids);
      this.kept += ids.length;
      this.evict();
    }
    return ids;
  }

  /** Drop the least recently used messages until at most maxTokens ids are kept. */
  private evict(): void {
    for (const [k, v] of this.entries) {
      if (this.kept <= this.o.maxTokens) break;
      this.entries.delete(k);
      this.kept -= v.length;
    }
  }
}
