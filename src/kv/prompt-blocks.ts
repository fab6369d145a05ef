/**
 * A prompt's blocks in kvgate's own hash space: chained block hashes over the prompt's token ids
 * with KVGATE_HASH_SEED. Engines seed their chains per process, so their hashes can never be
 * recomputed here; KV events are mapped onto this space through the token ids they carry
 * (src/fleet/kv-events-mapper.ts). Shared by the prefix index, the KV-event mapper and anything
 * that hashes a prompt on the request path.
 */
import { stateKey, type RequestState, type StateKey } from '../util/state.js';
import { chainRoot, hashBlocksInto, saltedRoot } from './block-hash.js';
import { leadingPartOf } from './leading-part.js';

/** Seed of kvgate's own block-hash chain (deliberately different from any engine's). */
export const KVGATE_HASH_SEED = 0x6b766761; // 'kvga'

/**
 * The tenant salt of a request routed to a pool with `cacheIsolation: tenant` (gateway/pipeline/prepare.ts
 * sets it): every block hash of the prompt is salted with it, as vLLM salts its own with the
 * request's cache_salt, so the prefix index never matches one tenant's prompt against another's.
 */
export const PROMPT_SALT = stateKey<string>('prompt.salt');

/**
 * The LoRA adapter a request names (gateway/pipeline/prepare.ts sets it): vLLM keys every block computed
 * with an adapter by the adapter's name, so the same prompt's blocks under the base model or
 * another adapter are other blocks. kvgate roots the prompt's chain in the adapter (adapterRoot),
 * and maps an adapter's KV events the same way (BlockStored's lora_name).
 */
export const PROMPT_ADAPTER = stateKey<string>('prompt.adapter');

/** The root of an adapter's block-hash chain, from the base chain's root. */
export function adapterRoot(root: number, adapter: string): number {
  return saltedRoot(root, `lora\u0000${adapter}`);
}

/** What an engine keys a request's blocks by besides its tokens: its LoRA adapter and cache_salt. */
export interface BlockKeys {
  lora?: string;
  cacheSalt?: string;
}

/** The request's adapter and salt (PROMPT_ADAPTER, PROMPT_SALT), for an exact cache probe. */
export function blockKeysOf(state: RequestState): BlockKeys {
  return { lora: state.get(PROMPT_ADAPTER), cacheSalt: state.get(PROMPT_SALT) };
}

/** A prompt's block hashes: a plain array, or a PromptBlocks that hashes on demand. */
export interface BlockSeq {
  readonly length: number;
  at(i: number): number | undefined;
}

/**
 * A prompt's kvgate block hashes, computed on demand and kept: a lookup that stops at the first
 * block no worker holds never pays for hashing the rest of the prompt.
 */
const HASH_RUN = 64;

const NONE_KNOWN: ArrayLike<number> = new Float64Array(0);
/** What a PromptBlocks holds of its prompt once every block is hashed. */
const NO_TOKENS: ArrayLike<number> = new Int32Array(0);

/** Where at() hashes a run before it is appended (calls never overlap: nothing in between yields). */
let runScratch = new Float64Array(HASH_RUN);

export class PromptBlocks implements BlockSeq {
  readonly length: number;
  private readonly hashes: number[] = [];
  /** The chain's root: the seed's, salted and keyed by the adapter as the request is. */
  private readonly root: number;
  /**
   * The hashes of the part the prompt was recorded to begin with (leading-part.ts: a system prompt
   * or document kept by the chat-token cache, a workload's shared part), on this chain: computed
   * once for every prompt that begins with it. Empty when there is none.
   */
  private known: ArrayLike<number>;

  constructor(
    private tokens: ArrayLike<number>,
    private readonly blockSize: number,
    seed: number,
    salt?: string,
    adapter?: string,
  ) {
    this.length = Math.floor(tokens.length / blockSize);
    const root = adapter === undefined ? chainRoot(seed) : adapterRoot(chainRoot(seed), adapter);
    this.root = salt === undefined ? root : saltedRoot(root, salt);
    const part = leadingPartOf(tokens);
    this.known = part !== undefined && part.tokens.length <= tokens.length ? part.hashes(this.root, blockSize) : NONE_KNOWN;
  }

  at(i: number): number | undefined {
    if (i < 0 || i >= this.length) return undefined;
    const h = this.hashes;
    if (h.length <= i) {
      // Hash a run of blocks at a time: a tight hashing loop runs much faster than one
      // interleaved with the index's cache-missing lookups, at the price of a few blocks hashed
      // past where a lookup stops.
      const end = Math.min(this.length, Math.max(i + 1, h.length + HASH_RUN));
      const known = this.known;
      for (let b = h.length; b < Math.min(end, known.length); b++) h.push(known[b]!);
      const from = h.length;
      if (from < end) {
        if (runScratch.length < end - from) runScratch = new Float64Array(Math.max(end - from, 2 * runScratch.length));
        const parent = from === 0 ? this.root : h[from - 1]!;
        hashBlocksInto(runScratch, 0, end - from, parent, this.tokens, from * this.blockSize, this.blockSize);
        for (let k = 0; k < end - from; k++) h.push(runScratch[k]!);
      }
      // Every block hashed: the tokens are not read again. Whoever keeps these hashes (the prefix
      // index's deferred inserts, past the request's end) does not keep the prompt with them.
      if (h.length === this.length) {
        this.tokens = NO_TOKENS;
        this.known = NONE_KNOWN;
      }
    }
    return h[i];
  }

  /** Every block's hash, as an array. */
  all(): number[] {
    if (this.length > 0) this.at(this.length - 1);
    return this.hashes;
  }
}

/**
 * State keys of the prompt's blocks, one per hash seed and block size: a handful per process
 * (kvgate's seed at the workers' block size, llm-d's per-model seed at its own block size).
 */
const blockKeys = new Map<number, Map<number, StateKey<PromptBlocks>>>();

function blocksKey(blockSize: number, seed: number): StateKey<PromptBlocks> {
  let bySize = blockKeys.get(seed);
  if (!bySize) blockKeys.set(seed, (bySize = new Map()));
  let key = bySize.get(blockSize);
  if (!key) bySize.set(blockSize, (key = stateKey<PromptBlocks>(`prompt-blocks:${blockSize}:${seed}`)));
  return key;
}

/** The prompt's blocks at `blockSize`, shared by every plugin through the request's state. */
export function promptBlocks(
  state: RequestState,
  tokens: ArrayLike<number>,
  blockSize: number,
  seed = KVGATE_HASH_SEED,
): PromptBlocks {
  const key = blocksKey(blockSize, seed);
  let b = state.get(key);
  if (!b) {
    b = new PromptBlocks(tokens, blockSize, seed, state.get(PROMPT_SALT), state.get(PROMPT_ADAPTER));
    state.set(key, b);
  }
  return b;
}
