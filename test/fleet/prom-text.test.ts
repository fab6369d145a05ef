import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePromText, PromParseError, sampleValue } from '../../src/fleet/prom-text.js';

test('parses samples with labels, escapes, exponents and special values', () => {
  const text = [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0",model_name="llama"} 3',
    'vllm:kv_cache_usage_perc{engine="1",model_name="a \\"quoted\\" \\\\ name\\n",} 2.5e-1',
    'vllm:x_total 1.5E+3 1700000000000',
    'plain NaN',
    'up{a="1"} +Inf',
    'down -Inf\r',
    '  ',
    'vllm:spaced { a = "1" , b="2" } 7',
  ].join('\n');
  const s = parsePromText(text);
  assert.equal(s.length, 7);
  assert.deepEqual(s[0], { name: 'vllm:num_requests_running', labels: { engine: '0', model_name: 'llama' }, value: 3 });
  assert.equal(s[1]!.labels['model_name'], 'a "quoted" \\ name\n');
  assert.equal(s[1]!.value, 0.25);
  assert.equal(s[2]!.value, 1500);
  assert.ok(Number.isNaN(s[3]!.value));
  assert.equal(s[4]!.value, Infinity);
  assert.equal(s[5]!.value, -Infinity);
  assert.deepEqual(s[6]!.labels, { a: '1', b: '2' });
});

test('rejects garbage with the line number', () => {
  const bad = [
    '<html><body>502 Bad Gateway</body></html>',
    'metric{a="1"',
    'metric{a=1} 2',
    'metric 12abc',
    'metric',
    'metric{a="\\x"} 1',
    '9metric 1',
    'metric 1 2 3',
  ];
  for (const line of bad) {
    assert.throws(() => parsePromText(`ok 1\n${line}\n`), (e: unknown) => e instanceof PromParseError && e.line === 2, line);
  }
});

test("a rejected line is quoted with its control characters escaped (it reaches logs and the admin API)", () => {
  assert.throws(
    () => parsePromText('\u0000\u0001garbage {{{ x\n'),
    (e: unknown) => e instanceof PromParseError && e.message === 'line 1: bad metric name: "\\u0000\\u0001garbage {{{ x"' && !/[\u0000-\u001f]/.test(e.message),
  );
});

test('empty text has no samples', () => {
  assert.deepEqual(parsePromText(''), []);
  assert.deepEqual(parsePromText('# just a comment\n'), []);
});

test('sampleValue: the first sample with the name and at least the labels asked for', () => {
  const text = [
    '# TYPE kvgate_requests_total counter',
    'kvgate_requests_total{route="chat",status="200"} 7',
    'kvgate_requests_total{route="chat",status="503"} 2',
    'kvgate_requests_total_created{route="chat"} 1.7e9',
    'kvgate_inflight_requests 0',
  ].join('\n');
  assert.equal(sampleValue(text, 'kvgate_requests_total'), 7);
  assert.equal(sampleValue(text, 'kvgate_requests_total', { status: '503' }), 2);
  assert.equal(sampleValue(text, 'kvgate_requests_total', { status: '404' }), undefined);
  assert.equal(sampleValue(text, 'kvgate_inflight_requests'), 0);
  assert.equal(sampleValue(text, 'kvgate_requests'), undefined, 'a name is matched whole, not as a prefix');
  assert.throws(() => sampleValue('not a metric line at all {', 'x'), PromParseError);
});

test('NaN and infinities in any case, as Prometheus reads them (prom-client writes "Nan")', () => {
  const s = parsePromText('a Nan\nb nan\nc inf\nd -Infinity\ne +INF\n');
  assert.ok(Number.isNaN(s[0]!.value) && Number.isNaN(s[1]!.value));
  assert.deepEqual(s.slice(2).map((x) => x.value), [Infinity, -Infinity, Infinity]);
  assert.throws(() => parsePromText('f nanx\n'), PromParseError);
});
