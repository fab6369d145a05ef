/**
 * Prometheus view of the KV-event subscribers, computed at scrape time:
 * - kvgate_kv_events_source{worker, source} 1 for the source the worker's index view comes from
 *   ('events' or 'approximate'), 0 for the other — alert on approximate for longer than expected;
 * - kvgate_kv_events_batches / _gaps / _replays / _resyncs / _restarts / _errors {worker}: totals;
 * - kvgate_kv_events_skipped {worker, reason}: events not indexed — other_group (a hybrid model's
 *   non-full-attention groups), other_medium (a medium not the worker's own), unknown_parent (a
 *   block whose parent was never seen), block_size (events at another block size).
 * A data-parallel worker's ranks are labelled worker="<id>/dp<rank>".
 */
import { Gauge, type Registry } from 'prom-client';
import type { KvEventSubscribers } from './kv-events.js';

const TOTALS = ['batches', 'gaps', 'replays', 'resyncs', 'restarts', 'errors'] as const;

export function registerKvEventMetrics(registry: Registry, subscribers: KvEventSubscribers): void {
  new Gauge({
    name: 'kvgate_kv_events_source',
    help: "1 for where each worker's prefix-index view comes from (events or approximate), 0 for the other",
    labelNames: ['worker', 'source'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of subscribers.statuses()) {
        this.set({ worker: s.workerId, source: 'events' }, s.source === 'events' ? 1 : 0);
        this.set({ worker: s.workerId, source: 'approximate' }, s.source === 'approximate' ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'kvgate_kv_events_skipped',
    help: 'KV events per worker not applied to the prefix index, by reason, since the subscriber started',
    labelNames: ['worker', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      for (const s of subscribers.statuses()) {
        this.set({ worker: s.workerId, reason: 'other_group' }, s.mapper.otherGroup);
        this.set({ worker: s.workerId, reason: 'other_medium' }, s.mapper.otherMedium);
        this.set({ worker: s.workerId, reason: 'unknown_parent' }, s.mapper.unknownParent);
        this.set({ worker: s.workerId, reason: 'block_size' }, s.mapper.blockSizeMismatch);
      }
    },
  });
  for (const k of TOTALS) {
    new Gauge({
      name: `kvgate_kv_events_${k}`,
      help: `KV-event ${k} per worker since the subscriber started`,
      labelNames: ['worker'],
      registers: [registry],
      collect() {
        this.reset();
        for (const s of subscribers.statuses()) this.set({ worker: s.workerId }, s[k]);
      },
    });
  }
}
