/**
 * Feeds the routing policy's prefix index from the workers' KV-cache events: one subscriber per
 * worker listed with `kvEvents` in the config, run as a gateway service. Without events (or while
 * a subscriber is resynchronising) the index stays approximate for that worker, as the policy
 * expects; a subscriber's state is shown per worker in /admin/workers.
 */
import type { WorkerKvEvents } from '../../config/index.js';
import { KvEventSubscribers } from '../../fleet/kv-events.js';
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
  o.fleet.addDescriber((w) => {
    const s = subscribers.get(w.id)?.status();
    if (!s) return {};
    return {
      kvEvents: {
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
      },
    };
  });
  const subscribe = (e: WorkerKvEvents): void => {
    const w = o.fleet.get(e.workerId);
    if (!w) return;
    if (!o.index.hasWorker(w.id)) o.index.addWorker(w.id, w.numGpuBlocks);
    subscribers.add({
      workerId: w.id,
      endpoint: e.endpoint,
      ...(e.replayEndpoint !== undefined ? { replayEndpoint: e.replayEndpoint } : {}),
      ...(e.topic !== undefined ? { topic: e.topic } : {}),
      index: o.index,
      blockSize: w.blockSize,
      clock: o.clock,
      // Silence only means trouble while the worker has work.
      isBusy: () => w.inflightCount > 0 || (w.snapshot?.running ?? 0) > 0,
      onStatus: (s) =>
        o.logger[s.source === 'events' ? 'info' : 'warn']({ worker: s.workerId, source: s.source, reason: s.reason }, 'kv events'),
    });
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
      subscribe(e);
    },
    removeWorker: (id) => subscribers.remove(id),
    close: () => subscribers.closeAll(),
  };
}
