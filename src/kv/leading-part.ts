/**
 * Tokens that prompts begin with, and their block hashes computed once for all those prompts.
 *
 * A prompt built by concatenating parts (a system prompt and a question, a session's previous
 * prompt, its answer and the next message) begins with its first part, and a chained block hash
 * depends only on the tokens up to its block's end: the prompt's first ⌊part / block⌋ block
 * hashes are the part's own. A workload hands the part with the prompt (BenchRequest.promptPart)
 * and whoever hashes the prompt (the engine model, the ideal-hit pass) takes those from it. The
 * router's hashing (PromptBlocks) finds a prompt's part through recordLeadingPart: the chat-token
 * cache records a prompt that begins with a kept message, the simulator a workload's shared part.
 */
import { hashBlocksInto } from './block-hash.js';

/** A part's block hashes on one chain. */
interface PartHashes {
  root: number;
  blockSize: number;
  hashes: Float64Array;
}

export class LeadingPart {
  /** One entry per chain the hashes were asked for (a handful at most: the engines' and the router's roots, adapters, salts). */
  private kept: PartHashes[] | null = null;

  /**
   * Built on a base (a session's last prompt): its hashes on the first chain asked reuse the base's,
   * and any other chain hashes it whole.
   */
  readonly derived: boolean;

  /**
   * `tokens` must not change afterwards. `base`: the part these tokens themselves begin with (a
   * session's prompt grows from the last one), whose hashes are reused in turn.
   */
  constructor(
    readonly tokens: Int32Array,
    private base: LeadingPart | null = null,
  ) {
    this.derived = base !== null;
  }

  /**
   * The hash of every full block of the tokens, chained from `root`: computed on the first ask
   * for a chain and kept. The array is shared by every prompt built on this part: read it only.
   */
  hashes(root: number, blockSize: number): Float64Array {
    if (this.kept !== null) for (const e of this.kept) if (e.root === root && e.blockSize === blockSize) return e.hashes;
    const tokens = this.tokens;
    const n = Math.floor(tokens.length / blockSize);
    const hashes = new Float64Array(n);
    let b = 0;
    let parent = root;
    if (this.base !== null) {
      const known = this.base.hashes(root, blockSize);
      b = Math.min(known.length, n);
      if (b > 0) {
        hashes.set(b === known.length ? known : known.subarray(0, b));
        parent = hashes[b - 1]!;
      }
    }
    hashBlocksInto(hashes, b, n, parent, tokens, b * blockSize, blockSize);
    // These hashes now stand in for the base's: dropping it keeps a session's prompts from
    // holding every earlier prompt alive (another chain, if one is ever asked for, hashes it whole).
    this.base = null;
    (this.kept ??= []).push({ root, blockSize, hashes });
    return hashes;
  }
}

/** Prompts recorded as beginning with a part, by identity (the prompt's own array). */
const PROMPT_PARTS = new WeakMap<ArrayLike<number>, LeadingPart>();

/**
 * Record that `prompt` begins with `part`'s tokens, so that whoever hashes the prompt (PromptBlocks)
 * takes the part's block hashes instead of computing them again. Neither may change afterwards.
 */
export function recordLeadingPart(prompt: ArrayLike<number>, part: LeadingPart): void {
  PROMPT_PARTS.set(prompt, part);
}

/** The part `prompt` was recorded to begin with (recordLeadingPart), if any. */
export function leadingPartOf(prompt: ArrayLike<number>): LeadingPart | undefined {
  return PROMPT_PARTS.get(prompt);
}
