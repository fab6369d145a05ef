/** What /dashboard/state reports, from a real prom-client registry and a worker view. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { DashboardSampler, histogramQuantile, summarize } from '../../src/gateway/dashboard/summary.js';

test('histogramQuantile interpolates inside the bucket like Prometheus, and is null without observations', () => {
  // 10 observations ≤ 0.1, 10 more in (0.1, 0.5].
  const b = [
    { le: 0.1, count: 10 },
    { le: 0.5, count: 20 },
    { le: Infinity, count: 20 },
  ];
  assert.equal(histogramQuantile(0.5, b), 0.1);
  assert.ok(Math.abs(histogramQuantile(0.75, b)! - 0.3) < 1e-12);
  assert.ok(Math.abs(histogramQuantile(0.25, b)! - 0.05) < 1e-12);
  assert.equal(histogramQuantile(0.99, [{ le: 1, count: 0 }, { le: Infinity, count: 4 }]), 1, 'above the last finite bucket: its bound');
  assert.equal(histogramQuantile(0.5, [{ le: 1, count: 0 }, { le: Infinity, count: 0 }]), null);
});

function fixture() {
  const registry = new Registry();
  const requests = new Counter({ name: 'kvgate_requests_total', help: 'h', labelNames: ['route', 'model', 'status'], registers: [registry] });
  const ttft = new Histogram({ name: 'kvgate_request_ttft_seconds', help: 'h', labelNames: ['route', 'model'], buckets: [0.01, 0.1, 1], registers: [registry] });
  const tpot = new Histogram({ name: 'kvgate_request_tpot_seconds', help: 'h', labelNames: ['route', 'model'], buckets: [0.01, 0.02, 0.05, 0.1], registers: [registry] });
  const tokens = new Counter({ name: 'kvgate_generation_tokens_total', help: 'h', labelNames: ['model', 'tenant'], registers: [registry] });
  const admission = new Counter({ name: 'kvgate_admission_total', help: 'h', labelNames: ['model', 'priority', 'decision'], registers: [registry] });
  const depth = new Gauge({ name: 'kvgate_queue_depth', help: 'h', labelNames: ['model', 'priority'], registers: [registry] });
  const cache = new Counter({ name: 'kvgate_cache_requests_total', help: 'h', labelNames: ['result'], registers: [registry] });
  const workers = [{ id: 'w0', pool: 'main', model: 'm', healthy: true, circuitState: 'closed', stale: false, kvUsage: 0.5, running: 3, waiting: 1, inflight: 2, routed: 10, prefixQueries: 1000, prefixHits: 100, prefixIndex: { source: 'events', blocks: 42, capacity: 100 } }];
  let t = 1_000_000;
  const sampler = new DashboardSampler({ registry, describeWorkers: () => workers.map((w) => ({ ...w })), now: () => t, windowMs: 10_000, minIntervalMs: 100 });
  return { registry, requests, ttft, tpot, tokens, admission, depth, cache, workers, sampler, advance: (ms: number) => (t += ms) };
}

test('rates, quantiles, hit ratios and admission counts cover the window between two samples', async () => {
  const f = fixture();
  f.requests.labels('chat', 'm', '200').inc(100);
  f.ttft.labels('chat', 'm').observe(5); // before the window: must not count
  f.tpot.labels('chat', 'm').observe(0.09);
  f.tokens.labels('m', 'acme').inc(1000);
  const first = await f.sampler.state();
  assert.equal(first.windowSeconds, 0);
  assert.equal(first.totals.requestRate, null, 'no rate from one sample');
  assert.equal(first.workers[0]!.prefixHitRate, null);

  f.advance(2_000);
  f.requests.labels('chat', 'm', '200').inc(18);
  f.requests.labels('chat', 'm', '503').inc(2);
  for (let i = 0; i < 10; i++) f.ttft.labels('chat', 'm').observe(0.05);
  for (let i = 0; i < 10; i++) f.tpot.labels('chat', 'm').observe(0.015);
  f.tokens.labels('m', 'acme').inc(300);
  f.tokens.labels('m', 'globex').inc(100);
  f.admission.labels('m', 'sheddable', 'shed').inc(3);
  f.admission.labels('m', 'sheddable', 'shed_backlog').inc(2);
  f.admission.labels('m', 'sheddable', 'shed_tpot').inc(1);
  f.admission.labels('m', 'standard', 'admitted').inc(20);
  f.depth.labels('m', 'standard').set(4);
  f.cache.labels('hit').inc(1);
  f.cache.labels('miss').inc(3);
  f.cache.labels('bypass').inc(10);
  f.workers[0]!.prefixQueries = 2000;
  f.workers[0]!.prefixHits = 850;
  f.workers[0]!.kvUsage = 0.93;
  const s = await f.sampler.state();
  assert.equal(s.windowSeconds, 2);
  assert.equal(s.totals.requestRate, 10);
  assert.equal(s.totals.errorRatio, 0.1);
  assert.ok(s.totals.ttftP50! > 0.01 && s.totals.ttftP50! <= 0.1, `p50 ${s.totals.ttftP50}`);
  assert.ok(s.totals.ttftP99! <= 0.1, 'the 5 s observation is outside the window');
  assert.ok(s.totals.tpotP50! > 0.01 && s.totals.tpotP50! <= 0.02, `TPOT p50 ${s.totals.tpotP50}`);
  assert.ok(s.totals.tpotP99! <= 0.02, 'the 90 ms observation is outside the window');
  assert.equal(s.totals.outputTokenRate, 200, 'every tenant, this window only');
  assert.equal(s.totals.responseCacheHit, 0.25, 'bypassed requests are not cacheable');
  assert.equal(s.workers[0]!.prefixHitRate, 0.75);
  assert.equal(s.totals.fleetPrefixHit, 0.75);
  assert.equal(s.workers[0]!.kvUsage, 0.93);
  assert.deepEqual(s.workers[0]!.prefixIndex, { source: 'events', blocks: 42, capacity: 100 });
  assert.deepEqual(s.workers[0]!.adapters, [], 'no LoRA adapters');
  assert.equal(s.workers[0]!.hardware, null, 'no hardware declared');
  assert.equal(s.workers[0]!.kind, null, 'and the pool is one speed class');
  const std = s.admission.find((r) => r.priority === 'standard')!;
  assert.equal(std.queued, 4);
  assert.equal(std.decisions.admitted, 20);
  const shd = s.admission.find((r) => r.priority === 'sheddable')!;
  assert.equal(shd.decisions.shed, 3);
  assert.equal(shd.shed, 6, 'shed for KV pressure, the prefill backlog and the decode pace');
  assert.equal(std.shed, 0);
  assert.deepEqual(s.speculative, []);
});

test('viewers polling faster than minIntervalMs share one sample; old samples leave the window', async () => {
  const f = fixture();
  await f.sampler.state();
  f.advance(50);
  f.requests.labels('chat', 'm', '200').inc(5);
  const again = await f.sampler.state();
  assert.equal(again.windowSeconds, 0, 'the same sample: no window yet');
  for (let i = 0; i < 30; i++) {
    f.advance(1_000);
    f.requests.labels('chat', 'm', '200').inc(10);
    await f.sampler.state();
  }
  const s = await f.sampler.state();
  assert.ok(s.windowSeconds <= 10, `window ${s.windowSeconds}`);
  assert.equal(s.totals.requestRate, 10);
});

test('speculative acceptance is read from any kvgate_spec…accept… gauge, or accepted/proposed counter pair, in the registry', async () => {
  const f = fixture();
  const g = new Gauge({ name: 'kvgate_spec_acceptance_rate', help: 'h', labelNames: ['model', 'class'], registers: [f.registry] });
  g.labels('m', 'chat').set(0.62);
  const acc = new Counter({ name: 'kvgate_spec_accepted_tokens_total', help: 'h', labelNames: ['model'], registers: [f.registry] });
  const prop = new Counter({ name: 'kvgate_spec_proposed_tokens_total', help: 'h', labelNames: ['model'], registers: [f.registry] });
  new Counter({ name: 'kvgate_spec_accepted_orphans_total', help: 'h', registers: [f.registry] }).inc(1); // no denominator: ignored
  acc.labels('m').inc(50);
  prop.labels('m').inc(100);
  const first = await f.sampler.state();
  assert.deepEqual(first.speculative, [
    { name: 'kvgate_spec_acceptance_rate', labels: { model: 'm', class: 'chat' }, value: 0.62 },
    { name: 'kvgate_spec_accepted_tokens_total / kvgate_spec_proposed_tokens_total', labels: { model: 'm' }, value: 0.5 },
  ]);
  f.advance(1_000);
  acc.labels('m').inc(36);
  prop.labels('m').inc(40);
  const s = await f.sampler.state();
  assert.equal(s.speculative[1]!.value, 0.9, 'the window’s increases, not the totals');
});

test('a worker’s kind is its hardware, or its KV capacity where an unlabelled pool is split by it', () => {
  const row = (w: Record<string, unknown>) => summarize({ at: 0, metrics: new Map(), workers: [{ id: 'w0', pool: 'main', model: 'm', ...w }] } as never, null).workers[0]!;
  assert.equal(row({ hardware: 'h100', speedClass: 'main · h100' }).kind, 'h100');
  assert.equal(row({ hardware: null, speedClass: 'main · 8000 blocks' }).kind, '8000 blocks');
  assert.equal(row({ hardware: null, speedClass: 'main' }).kind, null);
});

test('a worker drained for maintenance is shown as draining', async () => {
  const f = fixture();
  assert.equal((await f.sampler.state()).workers[0]!.draining, false);
  (f.workers[0] as { draining?: boolean }).draining = true;
  f.advance(1_000);
  assert.equal((await f.sampler.state()).workers[0]!.draining, true);
});
