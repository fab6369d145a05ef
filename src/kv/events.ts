/**
 * KV-cache events as vLLM publishes them (vllm/distributed/kv_events.py: BlockStored,
 * BlockRemoved, AllBlocksCleared), in the publishing engine's own block-hash space. The simulated
 * engine produces them; the gateway's subscriber decodes them off the wire and maps them into
 * kvgate's hash space through their token ids.
 */

/**
 * Where a block lives (vLLM's `medium`, uppercase by convention: "GPU" for the engine's own
 * cache, "CPU" for vLLM's offloading connector, other strings for LMCache and disk tiers).
 * Absent (null on the wire) means the GPU. kv-events-mapper.ts sorts media into tiers.
 */
export type KvMedium = string;

export type KvEvent =
  | {
      type: 'BlockStored';
      blockHashes: number[];
      /** Hash of the block before the first one stored, null at the start of a sequence. */
      parentBlockHash: number | null;
      /**
       * Token ids of all the stored blocks, concatenated (blockHashes.length × blockSize). vLLM's
       * offloading connector may send none for blocks it copies out of the GPU: those are known
       * by their hash from the GPU's own BlockStored.
       */
      tokenIds: number[];
      blockSize: number;
      /**
       * The LoRA adapter the blocks were computed with (vLLM's lora_name), absent for the base
       * model: an adapter's blocks are keyed by it, so they never match the base model's.
       */
      loraName?: string;
      medium?: KvMedium;
      /**
       * What else vLLM hashed into each block (one entry per block, null for none): the LoRA
       * name, multimodal identifiers, the cache_salt on a sequence's first block, prompt
       * embedding hashes (vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys).
       */
      extraKeys?: Array<unknown[] | null>;
      /** KV-cache group of a hybrid model (vLLM's group_idx); absent for a single group. */
      groupIdx?: number;
      /** The group's attention kind, e.g. "full_attention", "sliding_window" (kv_cache_spec_kind). */
      kvCacheSpecKind?: string;
      /** The group's sliding window in tokens, for sliding-window groups. */
      slidingWindow?: number;
    }
  | { type: 'BlockRemoved'; blockHashes: number[]; medium?: KvMedium; groupIdx?: number }
  | { type: 'AllBlocksCleared' };
