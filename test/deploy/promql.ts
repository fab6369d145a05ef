/**
 * The metric names a PromQL expression reads — enough PromQL for the deploy kit's queries (not a
 * parser): strings, label matchers, ranges and grouping clauses are removed, then every remaining
 * identifier that is not a function call or a keyword is a metric name. Grafana's `$variables`
 * only occur inside matchers and ranges, so they go with them.
 */
const KEYWORDS = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'inf', 'nan', 'Inf', 'NaN']);

export function metricNames(expr: string): string[] {
  let s = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  s = s.replace(/\{[^}]*\}/g, ' ');
  s = s.replace(/\[[^\]]*\]/g, ' ');
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const out = new Set<string>();
  for (const m of s.matchAll(/(?<![\w.$:])[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const name = m[0];
    const after = s.slice(m.index + name.length).trimStart();
    if (after.startsWith('(') || KEYWORDS.has(name)) continue;
    out.add(name);
  }
  return [...out];
}

/** The metric of a Grafana `label_values(metric, label)` or `label_values(metric{…}, label)` query. */
export function labelValuesMetric(query: string): string | null {
  return /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(query)?.[1] ?? null;
}
