/**
 * Counters and histograms for the request path, exported by a prom-client registry as its own.
 *
 * A prom-client series, even a child from `labels()`, hashes its label values into a string key,
 * checks every label name and allocates a result object on each inc() or observe(). The request
 * path makes seven such calls per request, and under load they cost kvgate about 14% of its CPU
 * per request (docs/performance.md). Here a series is a plain object found through one small map
 * per label (no key string built, nothing allocated once the series exists), and counting is an
 * addition. Exposition is unchanged: the registry formats what get() returns exactly as it formats
 * prom-client's own counters and histograms (same names, labels, label order and bucket bounds).
 *
 * Label values must come from a bounded set (configured models, workers, fixed outcomes): every
 * combination seen is a series until it is removed.
 */
import type { Metric, Registry } from 'prom-client';

interface Exported {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
  sharedLabels?: Record<string, string>;
}

/** One counter series. */
class CounterSeries {
  value = 0;
  constructor(readonly labels: Readonly<Record<string, string>>) {}
  inc(v = 1): void {
    this.value += v;
  }
}

/** One histogram series: counts per bucket (not cumulative), sum and count. */
class HistogramSeries {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: Readonly<Record<string, string>>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }
  /** A value that is not a finite number is not counted (prom-client would throw). */
  observe(v: number): void {
    if (!Number.isFinite(v)) return;
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]!) i++;
    if (i < b.length) this.counts[i]!++;
    this.sum += v;
    this.count++;
  }
}

type Node<S> = Map<string, Node<S> | S>;

/** Series by label values, one map level per label. */
abstract class LabelledMetric<S extends { labels: Readonly<Record<string, string>> }> {
  private readonly root: Node<S> = new Map();
  protected all: S[] = [];
  abstract readonly type: 'counter' | 'histogram';
  readonly aggregator = 'sum';

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {
    if (labelNames.length < 1 || labelNames.length > 3) throw new Error(`${name}: 1 to 3 labels, got ${labelNames.length}`);
    registry.registerMetric(this as unknown as Metric);
  }

  protected abstract make(labels: Record<string, string>): S;

  /** The series for these label values (as many as the metric has labels), created on first use. */
  series(a: string, b?: string, c?: string): S {
    const n = this.labelNames.length;
    let node = this.root;
    for (let level = 0; level < n; level++) {
      const v = level === 0 ? a : level === 1 ? b : c;
      if (v === undefined) throw new Error(`${this.name}: expected ${n} label values`);
      const next = node.get(v);
      if (level === n - 1) {
        if (next !== undefined) return next as S;
        const s = this.make(this.labelsOf(a, b, c));
        node.set(v, s);
        this.all.push(s);
        return s;
      }
      if (next === undefined) node.set(v, (node = new Map()));
      else node = next as Node<S>;
    }
    throw new Error('unreachable');
  }

  /** Drop every series whose label `name` has `value` (a worker that left the fleet). */
  removeWhere(name: string, value: string): void {
    const names = this.labelNames;
    for (const s of this.all) {
      if (s.labels[name] !== value) continue;
      // Walk to the series' map and delete it there (an emptied inner map is harmless).
      let node: Node<S> | undefined = this.root;
      for (let level = 0; node !== undefined && level < names.length - 1; level++) node = node.get(s.labels[names[level]!]!) as Node<S> | undefined;
      node?.delete(s.labels[names[names.length - 1]!]!);
    }
    this.all = this.all.filter((s) => s.labels[name] !== value);
  }

  reset(): void {
    this.root.clear();
    this.all = [];
  }

  /** What prom-client's registry formats (`getMetricsAsString` prefers this to get()). */
  async getForPromString(): Promise<{ name: string; help: string; type: string; values: Exported[]; aggregator: string }> {
    return { name: this.name, help: this.help, type: this.type, values: this.values(), aggregator: this.aggregator };
  }

  /** As prom-client's get(): shared labels merged into each value's labels. */
  async get(): Promise<{ name: string; help: string; type: string; values: Exported[]; aggregator: string }> {
    const values = this.values().map((v) => (v.sharedLabels ? { value: v.value, labels: { ...v.labels, ...v.sharedLabels }, metricName: v.metricName } : v));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  protected abstract values(): Exported[];

  private labelsOf(a: string, b: string | undefined, c: string | undefined): Record<string, string> {
    const l: Record<string, string> = {};
    const names = this.labelNames;
    l[names[0]!] = a;
    if (names.length > 1) l[names[1]!] = b!;
    if (names.length > 2) l[names[2]!] = c!;
    return l;
  }
}

export class RequestCounter extends LabelledMetric<CounterSeries> {
  readonly type = 'counter';

  constructor(registry: Registry, o: { name: string; help: string; labelNames: readonly string[] }) {
    super(registry, o.name, o.help, o.labelNames);
  }

  protected make(labels: Record<string, string>): CounterSeries {
    return new CounterSeries(labels);
  }

  protected values(): Exported[] {
    return this.all.map((s) => ({ value: s.value, labels: { ...s.labels } }));
  }
}

export class RequestHistogram extends LabelledMetric<HistogramSeries> {
  readonly type = 'histogram';
  private readonly bounds: readonly number[];

  constructor(registry: Registry, o: { name: string; help: string; labelNames: readonly string[]; buckets: readonly number[] }) {
    super(registry, o.name, o.help, o.labelNames);
    this.bounds = [...o.buckets].sort((x, y) => x - y);
  }

  protected make(labels: Record<string, string>): HistogramSeries {
    return new HistogramSeries(labels, this.bounds);
  }

  /** prom-client's histogram export: cumulative buckets labelled le, +Inf, then _sum and _count. */
  protected values(): Exported[] {
    const out: Exported[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.all) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += s.counts[i]!;
        out.push({ value: acc, labels: { le: this.bounds[i]! }, metricName: bucket, sharedLabels: s.labels });
      }
      out.push({ value: s.count, labels: { le: '+Inf' }, metricName: bucket, sharedLabels: s.labels });
      out.push({ value: s.sum, labels: {}, metricName: `${this.name}_sum`, sharedLabels: s.labels });
      out.push({ value: s.count, labels: {}, metricName: `${this.name}_count`, sharedLabels: s.labels });
    }
    return out;
  }
}
