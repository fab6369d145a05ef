/**
 * Reduce an SGLang /metrics scrape to the MetricsSnapshot routing uses: the same fields vLLM's
 * names fill (vllm-metrics-parser.ts), so routing, admission's KV-pressure shedding and the
 * dashboard treat an SGLang worker like a vLLM one. Names: kv/sglang-metric-names.ts.
 *
 * - queue, running: `sglang:num_queue_reqs`, `sglang:num_running_reqs`. With priority scheduling
 *   SGLang writes the total under `priority=""` and one series per priority beside it
 *   (metrics_collector.py, _log_gauge_queue_count): only the totals are read.
 * - KV usage: `sglang:token_usage` (0..1).
 * - capacity: `sglang:cache_config_info{page_size,num_pages}` (GIE's model-server protocol), else
 *   the gauges `sglang:page_size` and `sglang:num_pages` (SGLang ≥ 0.5.11), else
 *   `sglang:max_total_num_tokens` (older versions; pages of one token). SGLang's default page is
 *   one token: the capacity is counted in blocks of at least MIN_BLOCK_TOKENS tokens (the same
 *   number of tokens), so the gateway's prefix index hashes blocks, not single tokens.
 * - prefix counters: `sglang:prompt_tokens_total` and `sglang:cached_tokens_total` (tokens).
 *
 * Schedulers of one server: one series per data-parallel rank (`dp_rank`) — loads and capacity
 * are summed over ranks, usage is the capacity-weighted mean. Where every tensor-parallel rank
 * logs (--enable-metrics-for-all-schedulers) the ranks of one scheduler report the same batch:
 * within a dp_rank the largest value is taken, not the sum.
 */
import { SGLANG_METRICS as S } from '../kv/sglang-metric-names.js';
import type { Sample } from './prom-text.js';
import { MetricsShapeError } from './vllm-metrics-parser.js';
import type { MetricsSnapshot } from './worker-state.js';

/** Smallest block kvgate counts an SGLang worker's KV capacity in, tokens (vLLM's default block). */
export const MIN_BLOCK_TOKENS = 16;

interface RankAcc {
  running?: number;
  waiting?: number;
  usage?: number;
  /** Capacity in tokens, and the page size it came with (null: from max_total_num_tokens). */
  infoPages?: number;
  infoPageSize?: number;
  pages?: number;
  pageSize?: number;
  maxTokens?: number;
}

function baseName(name: string): string {
  return name.endsWith('_total') ? name.slice(0, -6) : name;
}

const maxOf = (a: number | undefined, b: number): number => (a === undefined || b > a ? b : a);

export function snapshotFromSglangSamples(samples: readonly Sample[], at: number): MetricsSnapshot {
  const ranks = new Map<string, RankAcc>();
  const rank = (s: Sample): RankAcc => {
    const key = s.labels['dp_rank'] ?? '';
    let r = ranks.get(key);
    if (!r) ranks.set(key, (r = {}));
    return r;
  };
  const counters = new Map<string, number>();
  let sawUsage = false;
  for (const s of samples) {
    if (!s.name.startsWith('sglang:') || !Number.isFinite(s.value)) continue;
    // Per-priority breakdowns beside the total (priority="" or no label).
    if ((s.labels['priority'] ?? '') !== '') continue;
    const n = baseName(s.name);
    switch (n) {
      case S.running:
        rank(s).running = maxOf(rank(s).running, s.value);
        break;
      case S.waiting:
        rank(s).waiting = maxOf(rank(s).waiting, s.value);
        break;
      case S.tokenUsage:
        sawUsage = true;
        rank(s).usage = maxOf(rank(s).usage, s.value);
        break;
      case S.cacheConfigInfo: {
        const ps = Number(s.labels['page_size']);
        const np = Number(s.labels['num_pages']);
        if (Number.isInteger(ps) && ps > 0 && Number.isInteger(np) && np > 0) {
          rank(s).infoPageSize = ps;
          rank(s).infoPages = np;
        }
        break;
      }
      case S.pageSize:
        if (Number.isInteger(s.value) && s.value > 0) rank(s).pageSize = s.value;
        break;
      case S.numPages:
        if (Number.isInteger(s.value) && s.value > 0) rank(s).pages = s.value;
        break;
      case S.maxTotalNumTokens:
        if (s.value > 0) rank(s).maxTokens = maxOf(rank(s).maxTokens, s.value);
        break;
      case S.promptTokens:
      case S.cachedTokens:
      case S.retractedRequests:
        counters.set(n, (counters.get(n) ?? 0) + s.value);
        break;
    }
  }
  if (!sawUsage) throw new MetricsShapeError(`no ${S.tokenUsage} in scrape (is SGLang started with --enable-metrics?)`);

  let running = 0;
  let waiting = 0;
  let weighted = 0;
  let weight = 0;
  let tokens = 0;
  let pageSize: number | undefined;
  let allKnown = true;
  for (const r of ranks.values()) {
    running += r.running ?? 0;
    waiting += r.waiting ?? 0;
    const cap = capacityOf(r);
    if (cap === null) allKnown = false;
    else {
      tokens += cap.tokens;
      pageSize = Math.max(pageSize ?? 0, cap.pageSize);
    }
    if (r.usage === undefined) continue;
    if (r.usage < 0 || r.usage > 1.0001) throw new MetricsShapeError(`${S.tokenUsage} out of range: ${r.usage}`);
    const w = cap?.tokens ?? 1;
    weighted += r.usage * w;
    weight += w;
  }
  const snap: MetricsSnapshot = { at, kvUsage: weight > 0 ? Math.min(1, weighted / weight) : 0, running, waiting };
  if (allKnown && tokens > 0 && pageSize !== undefined) {
    const blockSize = Math.max(pageSize, MIN_BLOCK_TOKENS);
    snap.blockSize = blockSize;
    snap.numGpuBlocks = Math.max(1, Math.floor(tokens / blockSize));
  }
  const q = counters.get(S.promptTokens);
  const h = counters.get(S.cachedTokens);
  if (q !== undefined && h !== undefined) {
    snap.prefixQueries = q;
    snap.prefixHits = h;
  }
  const retracted = counters.get(S.retractedRequests);
  if (retracted !== undefined) snap.preemptions = retracted;
  return snap;
}

/** A rank's KV capacity in tokens and its page size, from whichever of SGLang's forms it exports. */
function capacityOf(r: RankAcc): { tokens: number; pageSize: number } | null {
  if (r.infoPages !== undefined && r.infoPageSize !== undefined) return { tokens: r.infoPages * r.infoPageSize, pageSize: r.infoPageSize };
  if (r.pages !== undefined && r.pageSize !== undefined) return { tokens: r.pages * r.pageSize, pageSize: r.pageSize };
  if (r.maxTokens !== undefined) return { tokens: r.maxTokens, pageSize: 1 };
  return null;
}
