/**
 * Several gateway replicas in the fleet simulation (`kvgate bench --replicas N`).
 *
 * A real deployment runs N gateway processes behind a Kubernetes Service, each with its own
 * routing state: its own policy instance (prefix index, session table, learned rates) and its own
 * in-flight accounting of the requests it sent (one WorkerState per worker per replica). The
 * workers' scraped metrics and — for policies fed by KV events — the workers' KV events reach
 * every replica alike, because every replica scrapes and subscribes to every worker.
 *
 * What replicas do not see by default is each other's routing knowledge: the blocks a replica
 * predicted at pick time and confirmed at first token. With sharing on, every replica's own
 * knowledge (PrefixIndex.observer) reaches the other replicas' indexes (PrefixIndex.learn) after
 * `delayMs` of virtual time, as the live gateway's Redis channel carries it (src/shared/).
 * Sharing touches only policies that keep a PrefixIndex; sglang-cache-aware's character trees,
 * session tables and in-flight counts stay per replica.
 *
 * Arrivals are split round-robin by arrival order (request n goes to replica n mod N), as a
 * Service's round-robin proxy would; a session's later turns are arrivals like any other, so
 * they land on whichever replica is next.
 */
import type { BlockSeq } from '../kv/prompt-blocks.js';
import type { PrefixIndex } from '../scheduler/index/prefix-index.js';
import type { Policy } from '../scheduler/types.js';

export interface ReplicaOptions {
  /** One fresh policy instance per replica (at least one); the first routes as replica 0. */
  policies: readonly Policy[];
  /** Share routing knowledge between the replicas' prefix indexes (default false). */
  sharing?: boolean;
  /** Propagation delay of shared knowledge, virtual ms (default 0: the next decision sees it). */
  sharingDelayMs?: number;
  /**
   * Also share in-flight accounting: each replica's dispatches, first tokens and ends reach the
   * other replicas' WorkerStates after the same delay, so between two scrapes every replica sees
   * the whole fleet's load, as the live gateway's `shared.load` does (src/shared/load-channel.ts;
   * default false here).
   */
  shareLoad?: boolean;
}

/** Replica that takes the n-th arrival (0-based) of N: round-robin, as a Service spreads them. */
export function replicaOf(arrival: number, replicas: number): number {
  return arrival % replicas;
}

/** One piece of routing knowledge on its way from one replica to another. */
export interface SharedKnowledge {
  to: PrefixIndex;
  worker: string;
  hashes: BlockSeq;
  source: 'predicted' | 'routed';
}

/**
 * Connect the replicas' indexes: each one's own knowledge is handed to `send` once per other
 * replica's index. `send` delivers it (now or later); `deliver` below applies it. Policies that
 * share one index object (none do today) are connected once. Returns how many indexes share.
 */
export function connectReplicas(policies: readonly Policy[], send: (k: SharedKnowledge, now: number) => void): number {
  const indexes: PrefixIndex[] = [];
  for (const p of policies) if (p.prefixIndex && !indexes.includes(p.prefixIndex)) indexes.push(p.prefixIndex);
  if (indexes.length < 2) return indexes.length;
  for (const from of indexes) {
    if (from.observer) throw new Error('a replica prefix index already has an observer');
    const others = indexes.filter((x) => x !== from);
    from.observer = (worker, hashes, source, now) => {
      for (const to of others) send({ to, worker, hashes, source }, now);
    };
  }
  return indexes.length;
}

/** Apply shared knowledge at the receiver's `now`; a worker new to it starts at `capacityBlocks`. */
export function deliver(k: SharedKnowledge, now: number, capacityBlocks: number): void {
  k.to.learn(k.worker, k.hashes, k.source, now, capacityBlocks);
}
