/**
 * Feeds the routing policy's prefix index from the workers' KV-cache events: one subscriber per
 * worker listed with `kvEvents` in the config, run as a gateway service. Without events (or while
 * a subscriber is resynchronising) the index stays approximate for that worker, as the policy
 * expects; a subscriber's state is shown per worker in /admin/workers. A worker with
 * `dataParallelSize` N gets one subscriber per rank (fleet/kv-events-ranks.ts), merged into the
 * worker's view.
 */
import type { WorkerKvEvents } from '../../config/index.js';
import { KvEventSubscribers, type KvEventSubscriberStatus } from '../../fleet/kv-events.js';
import { RankMergingSink, rankEndpoint, rankSubscriberId } from '../../fleet/kv-events-ranks.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { MetricsScraper } from '../../fleet/scraper.js';
import type { PrefixIndex } from '../../scheduler/index/prefix-index.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../util/clock.js';
import type { GatewayService } from '../types.js';

export interface KvEventsServiceOptions {
  endpoints: readonly WorkerKvEvents[];
  index: PrefixIndex;
  fleet: WorkerRegistry;
  scraper: MetricsScraper;
  clock: Clock;
  logger: Logger;
}

export interface KvEventsService extends GatewayService {
  subscribers: KvEventSubscribers;
  /** Subscribe to a worker's events (a worker added or changed by a config reload; the service runs). */
  addWorker(e: WorkerKvEvents): Promise<void>;
  /** Stop listening to a worker (removed by a config reload). */
  removeWorker(workerId: string): Promise<void>;
}

export function kvEventsService(o: KvEventsServiceOptions): KvEventsService {
  const subscribers = new KvEventSubscribers();
  /** Subscriber ids per worker: the worker's own, or one per data-parallel rank. */
  const subscriberIds = new Map<string, string[]>();
  const view = (s: KvEventSubscriberStatus) => ({
    endpoint: s.endpoint,
    source: s.source,
    reason: s.reason,
    lastSeq: s.lastSeq,
    batches: s.batches,
    gaps: s.gaps,
    replays: s.replays,
    resyncs: s.resyncs,
    restarts: s.restarts,
    errors: s.errors,
    // Events deliberately not indexed: other KV-cache groups of a hybrid model, other media.
    skippedOtherGroup: s.mapper.otherGroup,
    skippedOtherMedium: s.mapper.otherMedium,
  });
  o.fleet.addDescriber((w) => {
    const ids = subscriberIds.get(w.id) ?? [w.id];
    const all = ids.map((id) => subscribers.get(id)?.status()).filter((s): s is KvEventSubscriberStatus => s !== undefined);
    if (all.length === 0) return {};
    if (ids.length === 1) return { kvEvents: view(all[0]!) };
    const st = o.index.workerStatus(w.id);
    const sum = (k: 'batches' | 'gaps' | 'replays' | 'resyncs' | 'restarts' | 'errors') => all.reduce((n, s) => n + s[k], 0);
    return {
      kvEvents: {
        source: st?.source ?? 'approximate',
        reason: st?.reason ?? '',
        batches: sum('batches'),
        gaps: sum('gaps'),
        replays: sum('replays'),
        resyncs: sum('resyncs'),
        restarts: sum('restarts'),
        errors: sum('errors'),
        ranks: all.map(view),
      },
    };
  });
  const subscribe = (e: WorkerKvEvents): void => {
    const w = o.fleet.get(e.workerId);
    if (!w) return;
    if (!o.index.hasWorker(w.id)) o.index.addWorker(w.id, w.numGpuBlocks);
    const ranks = e.dataParallelSize ?? 1;
    const sink = ranks > 1 ? new RankMergingSink(o.index, w.id, ranks) : o.index;
    const ids: string[] = [];
    for (let r = 0; r < ranks; r++) {
      const id = ranks > 1 ? rankSubscriberId(w.id, r) : w.id;
      ids.push(id);
      subscribers.add({
        workerId: id,
        endpoint: rankEndpoint(e.endpoint, r),
        ...(e.replayEndpoint !== undefined ? { replayEndpoint: rankEndpoint(e.replayEndpoint, r) } : {}),
        ...(e.topic !== undefined ? { topic: e.topic } : {}),
        index: sink,
        blockSize: w.blockSize,
        clock: o.clock,
        // Silence only means trouble while the worker has work.
        isBusy: () => w.inflightCount > 0 || (w.snapshot?.running ?? 0) > 0,
        onStatus: (s) =>
          o.logger[s.source === 'events' ? 'info' : 'warn']({ worker: s.workerId, source: s.source, reason: s.reason }, 'kv events'),
      });
    }
    subscriberIds.set(w.id, ids);
  };
  const unsubscribe = async (workerId: string): Promise<void> => {
    const ids = subscriberIds.get(workerId) ?? [workerId];
    subscriberIds.delete(workerId);
    await Promise.all(ids.map((id) => subscribers.remove(id)));
  };
  return {
    name: 'kv-events',
    subscribers,
    async start() {
      // Learn each worker's block size and capacity first: events are hashed at that block size.
      await o.scraper.scrapeAll();
      for (const e of o.endpoints) subscribe(e);
    },
    async addWorker(e) {
      const w = o.fleet.get(e.workerId);
      if (w) await o.scraper.scrape(w);
      // A changed worker may have changed its number of ranks: its old subscribers go first.
      if (subscriberIds.has(e.workerId)) await unsubscribe(e.workerId);
      subscribe(e);
    },
    removeWorker: (id) => unsubscribe(id),
    close: () => subscribers.closeAll(),
  };
}
