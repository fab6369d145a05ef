/**
 * A small parser for the Prometheus text exposition format (0.0.4), enough to read a worker's
 * /metrics. Strict where garbage would otherwise pass (a line that is neither a comment nor a
 * well-formed sample rejects the whole scrape) and tolerant of what real exporters emit: labels
 * with escapes, trailing commas, exponents, NaN, ±Inf, optional timestamps, CRLF line ends.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export class PromParseError extends Error {
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(`line ${line}: ${message}`);
  }
}

const NAME_START = /[a-zA-Z_:]/;
const NAME_CHAR = /[a-zA-Z0-9_:]/;
const LABEL_START = /[a-zA-Z_]/;
const LABEL_CHAR = /[a-zA-Z0-9_]/;

export function parsePromText(text: string): Sample[] {
  const out: Sample[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i]!;
    if (line.endsWith('\r')) line = line.slice(0, -1);
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    out.push(parseSample(trimmed, i + 1));
  }
  return out;
}

function parseSample(line: string, lineNo: number): Sample {
  let p = 0;
  // The line is quoted as JSON: a worker's bytes reach logs, /admin/workers and the dashboard, and
  // control characters in them must arrive escaped.
  const fail = (msg: string): never => {
    throw new PromParseError(lineNo, `${msg}: ${JSON.stringify(line.length > 80 ? line.slice(0, 80) + '…' : line)}`);
  };
  if (!NAME_START.test(line[0]!)) fail('bad metric name');
  while (p < line.length && NAME_CHAR.test(line[p]!)) p++;
  const name = line.slice(0, p);
  const labels: Record<string, string> = {};
  const afterName = p;
  while (line[p] === ' ' || line[p] === '\t') p++;
  if (line[p] !== '{') p = afterName;
  if (line[p] === '{') {
    p++;
    for (;;) {
      while (line[p] === ' ') p++;
      if (line[p] === '}') {
        p++;
        break;
      }
      if (p >= line.length || !LABEL_START.test(line[p]!)) fail('bad label name');
      const ls = p;
      while (p < line.length && LABEL_CHAR.test(line[p]!)) p++;
      const lname = line.slice(ls, p);
      while (line[p] === ' ') p++;
      if (line[p] !== '=') fail('expected = after label name');
      p++;
      while (line[p] === ' ') p++;
      if (line[p] !== '"') fail('expected quoted label value');
      p++;
      let v = '';
      for (;;) {
        if (p >= line.length) fail('unterminated label value');
        const c = line[p]!;
        if (c === '"') {
          p++;
          break;
        }
        if (c === '\\') {
          const e = line[p + 1];
          if (e === 'n') v += '\n';
          else if (e === '\\') v += '\\';
          else if (e === '"') v += '"';
          else fail('bad escape in label value');
          p += 2;
          continue;
        }
        v += c;
        p++;
      }
      labels[lname] = v;
      while (line[p] === ' ') p++;
      if (line[p] === ',') {
        p++;
        continue;
      }
      if (line[p] === '}') {
        p++;
        break;
      }
      fail('expected , or } in labels');
    }
  }
  if (line[p] !== ' ' && line[p] !== '\t' && line[p - 1] !== '}') fail('expected whitespace before value');
  const rest = line.slice(p).trim().split(/[ \t]+/);
  if (rest.length < 1 || rest.length > 2 || rest[0] === '') fail('expected value [timestamp]');
  const value = parseValue(rest[0]!);
  if (value === undefined) fail('bad sample value');
  if (rest.length === 2 && !/^-?[0-9]+$/.test(rest[1]!)) fail('bad timestamp');
  return { name, labels, value: value! };
}

const NUMBER = /^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;

/**
 * Prometheus reads values with Go's strconv.ParseFloat, which takes NaN and infinities in any case
 * (`NaN`, `Nan` — what prom-client writes —, `+Inf`, `-inf`, `Infinity`); so does this.
 */
function parseValue(s: string): number | undefined {
  switch (s.toLowerCase()) {
    case 'nan':
      return NaN;
    case '+inf':
    case 'inf':
    case '+infinity':
    case 'infinity':
      return Infinity;
    case '-inf':
    case '-infinity':
      return -Infinity;
  }
  return NUMBER.test(s) ? Number(s) : undefined;
}

/**
 * The value of the first sample named `name` whose labels include `labels` (others may be present),
 * or undefined. For reading one figure from an exposition (tests, benchmarks, the dashboard's
 * callers); parses the whole text, so not for a hot path.
 */
export function sampleValue(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const want = Object.entries(labels);
  for (const s of parsePromText(text)) {
    if (s.name === name && want.every(([k, v]) => s.labels[k] === v)) return s.value;
  }
  return undefined;
}
