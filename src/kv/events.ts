/**
 * KV-cache events as vLLM publishes them (vllm/distributed/kv_events.py), in the publishing
 * engine's own block-hash space. The simulated engine produces them; the gateway's subscriber
 * decodes them off the wire and maps them into kvgate's hash space through their token ids.
 */
export type KvEvent =
  | {
      type: 'BlockStored';
      blockHashes: number[];
      /** Hash of the block before the first one stored, null at the start of a sequence. */
      parentBlockHash: number | null;
      /** Token ids of all the stored blocks, concatenated (blockHashes.length × blockSize). */
      tokenIds: number[];
      blockSize: number;
      /**
       * The LoRA adapter the blocks were computed with (vLLM's lora_name), absent for the base
       * model: an adapter's blocks are keyed by it, so they never match the base model's.
       */
      loraName?: string;
    }
  | { type: 'BlockRemoved'; blockHashes: number[] }
  | { type: 'AllBlocksCleared' };
