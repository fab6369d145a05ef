/**
 * Reduce a vLLM /metrics scrape to the MetricsSnapshot routing uses. Understands the V1 names and
 * the older ones they replaced (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*), counters with
 * or without the `_total` suffix, and data-parallel engines (the `engine` label): loads and
 * capacities are summed over engines, KV usage is the block-weighted mean.
 */
import type { MetricsSnapshot } from './worker-state.js';
import type { Sample } from './prom-text.js';
import { VLLM_METRICS as V } from '../kv/vllm-metric-names.js';

export class MetricsShapeError extends Error {}

/** Prometheus clients append `_total` to counters; vLLM's docs name them without it. */
function baseName(name: string): string {
  return name.endsWith('_total') ? name.slice(0, -6) : name;
}

interface EngineAcc {
  kv?: number;
  blocks?: number;
}

export function snapshotFromSamples(samples: readonly Sample[], at: number): MetricsSnapshot {
  const sums = new Map<string, number>();
  const add = (k: string, v: number): void => {
    if (Number.isFinite(v)) sums.set(k, (sums.get(k) ?? 0) + v);
  };
  const engines = new Map<string, EngineAcc>();
  const engine = (s: Sample): EngineAcc => {
    const key = s.labels['engine'] ?? '0';
    let e = engines.get(key);
    if (!e) engines.set(key, (e = {}));
    return e;
  };
  let sawKv = false;
  let sawNewKv = false;
  let blockSize: number | undefined;
  // vLLM sets this gauge to the time of each update and keeps every label set it has used: the
  // newest is the state now.
  let lora: { at: number; info: NonNullable<MetricsSnapshot['lora']> } | undefined;

  for (const s of samples) {
    if (!s.name.startsWith('vllm:')) continue;
    const n = baseName(s.name);
    switch (n) {
      case V.kvUsage:
        // The V1 name wins when a worker exports both.
        if (!sawNewKv) for (const e of engines.values()) e.kv = undefined;
        sawKv = sawNewKv = true;
        engine(s).kv = s.value;
        break;
      case V.legacyKvUsage:
        if (sawNewKv) break;
        sawKv = true;
        engine(s).kv = s.value;
        break;
      case V.running:
      case V.waiting:
      case V.preemptions:
      case V.specDrafts:
      case V.specDraftTokens:
      case V.specAcceptedTokens:
        add(n, s.value);
        break;
      case V.prefixQueries:
      case V.legacyPrefixQueries:
        add('queries:' + n, s.value);
        break;
      case V.prefixHits:
      case V.legacyPrefixHits:
        add('hits:' + n, s.value);
        break;
      case V.loraInfo: {
        const max = Number(s.labels['max_lora']);
        if (!Number.isInteger(max) || max < 1 || (lora !== undefined && lora.at >= s.value)) break;
        const list = (v: string | undefined): string[] => (v === undefined || v === '' ? [] : v.split(','));
        lora = { at: s.value, info: { maxLoras: max, running: list(s.labels['running_lora_adapters']), waiting: list(s.labels['waiting_lora_adapters']) } };
        break;
      }
      case V.cacheConfigInfo: {
        const nb = Number(s.labels['num_gpu_blocks']);
        if (Number.isFinite(nb) && nb > 0) engine(s).blocks = nb;
        const bs = Number(s.labels['block_size']);
        if (Number.isFinite(bs) && bs > 0) blockSize = bs;
        break;
      }
    }
  }
  if (!sawKv) throw new MetricsShapeError('no vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc in scrape');

  let kvWeighted = 0;
  let weight = 0;
  let blocks = 0;
  let allBlocksKnown = true;
  for (const e of engines.values()) {
    if (e.kv === undefined) continue;
    if (!Number.isFinite(e.kv) || e.kv < 0 || e.kv > 1.0001) {
      throw new MetricsShapeError(`KV cache usage out of range: ${e.kv}`);
    }
    const w = e.blocks ?? 1;
    if (e.blocks === undefined) allBlocksKnown = false;
    kvWeighted += e.kv * w;
    weight += w;
    blocks += e.blocks ?? 0;
  }
  const snap: MetricsSnapshot = {
    at,
    kvUsage: weight > 0 ? Math.min(1, kvWeighted / weight) : 0,
    running: sums.get(V.running) ?? 0,
    waiting: sums.get(V.waiting) ?? 0,
  };
  if (allBlocksKnown && blocks > 0) snap.numGpuBlocks = blocks;
  if (blockSize !== undefined) snap.blockSize = blockSize;
  if (lora !== undefined) snap.lora = lora.info;
  // Prefer the V1 counter names; fall back to the deprecated ones.
  const q = sums.get('queries:' + V.prefixQueries) ?? sums.get('queries:' + V.legacyPrefixQueries);
  const h = sums.get('hits:' + V.prefixHits) ?? sums.get('hits:' + V.legacyPrefixHits);
  if (q !== undefined) snap.prefixQueries = q;
  if (h !== undefined) snap.prefixHits = h;
  const opt = (k: string, f: 'preemptions' | 'specDrafts' | 'specDraftTokens' | 'specAcceptedTokens'): void => {
    const v = sums.get(k);
    if (v !== undefined) snap[f] = v;
  };
  opt(V.preemptions, 'preemptions');
  opt(V.specDrafts, 'specDrafts');
  opt(V.specDraftTokens, 'specDraftTokens');
  opt(V.specAcceptedTokens, 'specAcceptedTokens');
  return snap;
}
