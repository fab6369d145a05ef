import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { RequestCounter, RequestHistogram } from '../../src/telemetry/request-metrics.js';

const BUCKETS = [0.005, 0.05, 0.5, 1, 5];

/** The same observations through prom-client and through request-metrics.ts, in two registries. */
function both(): { ours: Registry; theirs: Registry; c: RequestCounter; h: RequestHistogram; pc: Counter<string>; ph: Histogram<string> } {
  const ours = new Registry();
  const theirs = new Registry();
  const c = new RequestCounter(ours, { name: 'x_requests_total', help: 'Requests', labelNames: ['route', 'model', 'status'] });
  const h = new RequestHistogram(ours, { name: 'x_duration_seconds', help: 'Duration', labelNames: ['route', 'model'], buckets: BUCKETS });
  const pc = new Counter({ name: 'x_requests_total', help: 'Requests', labelNames: ['route', 'model', 'status'], registers: [theirs] });
  const ph = new Histogram({ name: 'x_duration_seconds', help: 'Duration', labelNames: ['route', 'model'], buckets: BUCKETS, registers: [theirs] });
  return { ours, theirs, c, h, pc, ph };
}

test('request metrics expose exactly what prom-client exposes for the same observations', async () => {
  const { ours, theirs, c, h, pc, ph } = both();
  const samples: Array<[string, string, string, number]> = [
    ['chat', 'm1', '200', 0.004],
    ['chat', 'm1', '200', 0.05], // on a bound: counted in that bucket (le)
    ['chat', 'm1', '499', 7],
    ['completions', 'm2', '200', 0.3],
    ['chat', 'we"ird\\model', '400', 1],
  ];
  for (const [route, model, status, v] of samples) {
    c.series(route, model, status).inc();
    pc.labels(route, model, status).inc();
    h.series(route, model).observe(v);
    ph.labels(route, model).observe(v);
  }
  c.series('chat', 'm1', '200').inc(2);
  pc.labels('chat', 'm1', '200').inc(2);
  // A broken measurement is dropped, not counted: the sum stays a number.
  h.series('chat', 'm1').observe(Number.NaN);
  h.series('chat', 'm1').observe(Infinity);
  assert.equal(await ours.metrics(), await theirs.metrics());
  // prom-client also carries an (empty) exemplar slot on each value; nothing else may differ.
  const noExemplars = (x: unknown): unknown => JSON.parse(JSON.stringify(x, (k, v: unknown) => (k === 'exemplar' ? undefined : v)));
  assert.deepEqual(noExemplars(await ours.getMetricsAsJSON()), noExemplars(await theirs.getMetricsAsJSON()));
});

test('a series is found again, not duplicated; removeWhere and reset drop series', async () => {
  const r = new Registry();
  const c = new RequestCounter(r, { name: 'x_attempts_total', help: 'h', labelNames: ['worker', 'outcome'] });
  const s = c.series('w0', 'ok');
  assert.equal(c.series('w0', 'ok'), s);
  s.inc();
  c.series('w1', 'ok').inc();
  c.series('w0', 'client_abort').inc();
  c.removeWhere('worker', 'w0');
  assert.equal(await r.metrics(), '# HELP x_attempts_total h\n# TYPE x_attempts_total counter\nx_attempts_total{worker="w1",outcome="ok"} 1\n');
  assert.notEqual(c.series('w0', 'ok'), s, 'a removed series starts again from zero');
  assert.equal(c.series('w1', 'ok').value, 1);
  c.reset();
  assert.equal(await r.metrics(), '# HELP x_attempts_total h\n# TYPE x_attempts_total counter\n');
});

test('a request metric refuses a name its registry already has', () => {
  const r = new Registry();
  new RequestCounter(r, { name: 'x_total', help: 'h', labelNames: ['a'] });
  assert.throws(() => new Counter({ name: 'x_total', help: 'h', registers: [r] }), /already been registered/);
});
