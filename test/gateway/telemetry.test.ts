/** /metrics, /admin/workers and fleet watching as seen through a running gateway. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Writable } from 'node:stream';
import { DEFAULT_POLICY_NAME } from '../../src/config/index.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { MODEL, metricValue, parseSse, post, startGateway, startSims, startStub, waitFor } from './helpers.js';

test('/metrics has the kvgate_ series after traffic; /admin/workers describes each worker', async () => {
  const sims = await startSims(2, { numGpuBlocks: 2048 });
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    await waitFor(() => gw.registry.workers.every((w) => w.snapshot !== null));
    for (let i = 0; i < 4; i++) {
      const r = await post(url + '/v1/chat/completions', { model: MODEL, stream: i % 2 === 1, messages: [{ role: 'user', content: `q${i}` }], max_tokens: 5 });
      assert.equal(r.status, 200);
    }
    await post(url + '/v1/chat/completions', '{nope');
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'chat', model: MODEL, status: '200' }), 4);
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'chat', model: 'unknown', status: '400' }), 1);
    assert.equal(metricValue(m, 'kvgate_request_ttft_seconds_count', { route: 'chat', model: MODEL }), 2, 'streamed requests only');
    assert.equal(metricValue(m, 'kvgate_request_duration_seconds_count', { route: 'chat', model: MODEL }), 4);
    assert.equal(metricValue(m, 'kvgate_inflight_requests'), 0);
    const attempts = (metricValue(m, 'kvgate_upstream_attempts_total', { worker: 'w0', outcome: 'ok' }) ?? 0) +
      (metricValue(m, 'kvgate_upstream_attempts_total', { worker: 'w1', outcome: 'ok' }) ?? 0);
    assert.equal(attempts, 4);
    // The relay's keep-alive connections stay open between requests (4 s idle timeout).
    const conns = ['w0', 'w1'].map((w) => metricValue(m, 'kvgate_worker_upstream_connections', { worker: w }) ?? 0);
    assert.ok(conns[0]! + conns[1]! >= 1 && conns[0]! + conns[1]! <= 4, `relay connections ${conns}`);
    assert.equal(DEFAULT_POLICY_NAME, 'kvgate', 'the gateway routes with the kvgate policy unless told otherwise');
    assert.match(m, /kvgate_route_decisions_total\{policy="kvgate",worker="w[01]",reason="[^"]+"\} \d/);
    assert.equal(metricValue(m, 'kvgate_route_prefix_hit_ratio_count', { policy: 'kvgate' }), 4, 'one observation per decision');
    assert.equal(metricValue(m, 'kvgate_worker_healthy', { worker: 'w0' }), 1);
    assert.equal(metricValue(m, 'kvgate_worker_stale', { worker: 'w1' }), 0);
    assert.ok(metricValue(m, 'kvgate_worker_kv_usage_ratio', { worker: 'w0' }) !== undefined);
    assert.match(m, /# TYPE kvgate_scrape_failures_total counter/);
    assert.match(m, /kvgate_nodejs_eventloop_lag_seconds /);

    const workers = (await (await fetch(url + '/admin/workers')).json()) as any[];
    assert.equal(workers.length, 2);
    const w0 = workers.find((w) => w.id === 'w0');
    assert.equal(w0.url, sims[0]!.url);
    assert.equal(w0.pool, 'main');
    assert.equal(w0.model, MODEL);
    assert.equal(w0.healthy, true);
    assert.equal(w0.circuitOpen, false);
    assert.equal(w0.stale, false);
    assert.equal(w0.lastScrapeError, null);
    assert.equal(w0.numGpuBlocks, 2048);
    assert.equal(typeof w0.kvUsage, 'number');
    assert.equal(typeof w0.running, 'number');
    assert.equal(typeof w0.waiting, 'number');
    assert.equal(w0.inflight, 0);
    assert.equal(workers.reduce((s, w) => s + w.routed, 0), 4);

    gw.addWorkerDescriber((w) => ({ extraField: `x-${w.id}` }));
    const again = (await (await fetch(url + '/admin/workers')).json()) as any[];
    assert.equal(again[1].extraField, 'x-w1');
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('a worker whose /metrics turns to garbage goes stale; health failures take it out and back', async () => {
  const garbage = await startStub((req, res) => {
    res.writeHead(200);
    res.end(req.url === '/metrics' ? 'this is { not prometheus\n' : 'ok');
  });
  let sim = await startSimWorker({ port: 0, model: MODEL, speed: 100 });
  const port = sim.port;
  const { gw, url } = await startGateway([sim.url, garbage.url], { scrape: { intervalMs: 200, staleAfterMs: 600 } });
  try {
    const [ws, wg] = gw.registry.workers as [any, any];
    await waitFor(() => /line 1/.test(wg.lastScrapeError ?? '') && ws.snapshot !== null);
    const m = await (await fetch(url + '/metrics')).text();
    assert.ok((metricValue(m, 'kvgate_scrape_failures_total', { worker: 'w1' }) ?? 0) >= 1);
    assert.equal(metricValue(m, 'kvgate_worker_stale', { worker: 'w1' }), 1);
    // /admin/workers shows the last scrape's error: read until it is the garbage's (a scrape of this
    // stand-in, which shares the test's loop, may also time out on a busy machine).
    let desc: any;
    await waitFor(async () => {
      desc = ((await (await fetch(url + '/admin/workers')).json()) as any[])[1];
      return /line 1/.test(desc.lastScrapeError ?? '');
    });
    assert.equal(desc.stale, true);

    await sim.close();
    await waitFor(() => !ws.healthy);
    const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 2 });
    assert.equal(r.headers.get('x-kvgate-worker'), 'w1', 'only the other worker is routed to');
    sim = await startSimWorker({ port, model: MODEL, speed: 100 });
    await waitFor(() => ws.healthy);
    assert.equal((await fetch(url + '/ready')).status, 200);
  } finally {
    await gw.close();
    await sim.close();
    await garbage.close();
  }
});

test('log.requestSampleRate: one clean success in four gets a line; errors always do; metrics count all', async () => {
  const sims = await startSims(1, { numGpuBlocks: 2048 });
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const { gw, url } = await startGateway(sims.map((s) => s.url), { log: { level: 'info', requestSampleRate: 0.25 } }, { logger: createLogger({ level: 'info', destination: sink }) });
  try {
    for (let i = 0; i < 8; i++) {
      const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: `s${i}` }], max_tokens: 3 });
      assert.equal(r.status, 200, r.text);
    }
    for (let i = 0; i < 3; i++) assert.equal((await post(url + '/v1/chat/completions', { model: MODEL, messages: [] })).status, 400);
    const requestLines = lines.filter((l) => l.msg === 'request');
    const ok = requestLines.filter((l) => l.status === 200);
    const bad = requestLines.filter((l) => l.status === 400);
    assert.equal(ok.length, 2, 'every fourth success');
    for (const l of ok) assert.equal(l.sampleRate, 4, 'a sampled line says how many requests it stands for');
    assert.equal(bad.length, 3, 'errors are never sampled away');
    for (const l of bad) assert.equal(l.sampleRate, undefined);
    const m = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m, 'kvgate_requests_total', { route: 'chat', model: MODEL, status: '200' }), 8);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('tokens by model and tenant, and time per output token, from the answers relayed', async () => {
  // One worker: the repeated prompt below must find its cached prefix, and with two a scrape taken
  // while the first answer ran (a loaded machine delays the next) can send it to the other.
  const sims = await startSims(1);
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const tenants = {
    tenants: [
      { id: 'acme', keys: [{ value: 'sk-acme-tokens-01' }] },
      { id: 'globex', keys: [{ value: 'sk-globex-tokens-01' }] },
    ],
  };
  const { gw, url } = await startGateway(sims.map((s) => s.url), tenants, { logger: createLogger({ level: 'info', destination: sink }) });
  const as = (key: string) => ({ authorization: `Bearer ${key}` });
  const messages = [{ role: 'user', content: 'Count the tokens of this question, please.' }];
  try {
    // acme: a JSON answer and a stream that asks for usage; both carry the worker's usage.
    const a1 = await post(url + '/v1/chat/completions', { model: MODEL, messages, max_tokens: 5 }, as('sk-acme-tokens-01'));
    assert.equal(a1.status, 200);
    const a2 = await post(url + '/v1/chat/completions', { model: MODEL, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } }, as('sk-acme-tokens-01'));
    const a2Usage = parseSse(a2.text).find((e) => e !== '[DONE]' && e.usage)?.usage;
    assert.ok(a2Usage, 'the stream ends with its usage');
    // globex: a stream without usage (prompt tokens from the gateway's own count), and one with n = 2.
    const g1 = await post(url + '/v1/chat/completions', { model: MODEL, messages, max_tokens: 4, stream: true }, as('sk-globex-tokens-01'));
    const g1Tokens = parseSse(g1.text).filter((e) => e !== '[DONE]' && e.choices?.[0]?.delta?.content).length;
    const g2 = await post(url + '/v1/chat/completions', { model: MODEL, messages, max_tokens: 3, n: 2, stream: true }, as('sk-globex-tokens-01'));
    const g2Tokens = parseSse(g2.text).filter((e) => e !== '[DONE]' && e.choices?.[0]?.delta?.content).length;
    assert.ok(g1Tokens >= 1 && g2Tokens >= 2);

    const m = await (await fetch(url + '/metrics')).text();
    const prompt = a1.json.usage.prompt_tokens as number;
    assert.equal(a2Usage.prompt_tokens, prompt);
    assert.equal(metricValue(m, 'kvgate_generation_tokens_total', { model: MODEL, tenant: 'acme' }), a1.json.usage.completion_tokens + a2Usage.completion_tokens);
    assert.equal(metricValue(m, 'kvgate_prompt_tokens_total', { model: MODEL, tenant: 'acme' }), 2 * prompt);
    // The worker's own count of the prompt tokens it had cached (usage.prompt_tokens_details): the
    // second ask of the same prompt found what the first had left.
    const cached = a1.json.usage.prompt_tokens_details.cached_tokens + a2Usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0, 'the repeated prompt was served partly from the prefix cache');
    assert.equal(metricValue(m, 'kvgate_prompt_cached_tokens_total', { model: MODEL, tenant: 'acme' }), cached);
    assert.equal(metricValue(m, 'kvgate_generation_tokens_total', { model: MODEL, tenant: 'globex' }), g1Tokens + g2Tokens);
    // Without usage, the gateway's own count of the prompt (the one it reserves KV by): the same
    // template and tokenizer as the simulated worker's.
    assert.equal(metricValue(m, 'kvgate_prompt_tokens_total', { model: MODEL, tenant: 'globex' }), 2 * prompt);
    // Two streams of one sequence: acme's second and globex's first (n = 2 is two sequences).
    assert.equal(metricValue(m, 'kvgate_request_tpot_seconds_count', { route: 'chat', model: MODEL }), 2);
    const tpotSum = metricValue(m, 'kvgate_request_tpot_seconds_sum', { route: 'chat', model: MODEL })!;
    assert.ok(tpotSum > 0 && tpotSum < 2, `TPOT sum ${tpotSum} s`);

    // A Responses stream counts its tokens (its last event's usage) but no TPOT: its first bytes
    // (response.created) come before its first token.
    const r1 = await post(url + '/v1/responses', { model: MODEL, input: 'Count these too.', max_output_tokens: 4, stream: true }, as('sk-globex-tokens-01'));
    assert.equal(r1.status, 200, r1.text);
    const completed = r1.text
      .split('\n\n')
      .map((block) => block.split('\n').find((l) => l.startsWith('data: ')))
      .filter((l): l is string => l !== undefined)
      .map((l) => JSON.parse(l.slice(6)))
      .find((e) => e.type === 'response.completed' || e.type === 'response.incomplete');
    const r1Tokens = completed.response.usage.output_tokens as number;
    assert.ok(r1Tokens >= 1);
    const m2 = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(m2, 'kvgate_generation_tokens_total', { model: MODEL, tenant: 'globex' }), g1Tokens + g2Tokens + r1Tokens);
    assert.equal(metricValue(m2, 'kvgate_request_tpot_seconds_count', { route: 'chat', model: MODEL }), 2);
    assert.equal(metricValue(m2, 'kvgate_request_tpot_seconds_count', { route: 'responses', model: MODEL }), undefined);

    await waitFor(() => lines.filter((l) => l.msg === 'request').length === 5);
    const first = lines.find((l) => l.msg === 'request' && l.stream === false)!;
    assert.equal(first.promptTokens, prompt);
    assert.equal(first.outputTokens, a1.json.usage.completion_tokens);
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('a stream the client leaves counts the tokens it was sent, and no TPOT', async () => {
  const sims = await startSims(1, { speed: 1 });
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    const ac = new AbortController();
    const res = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'a long answer' }], max_tokens: 500, ignore_eos: true, stream: true }),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while ((text.match(/"content":"[^"]+"/g) ?? []).length < 20) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    ac.abort();
    await reader.cancel().catch(() => {});
    const metrics = async () => (await fetch(url + '/metrics')).text();
    await waitFor(async () => metricValue(await metrics(), 'kvgate_requests_total', { route: 'chat', model: MODEL, status: '499' }) === 1);
    const m = await metrics();
    const tokens = metricValue(m, 'kvgate_generation_tokens_total', { model: MODEL, tenant: 'default' })!;
    assert.ok(tokens >= 20 && tokens < 500, `${tokens} tokens counted for a stream left after about 20`);
    assert.ok(metricValue(m, 'kvgate_prompt_tokens_total', { model: MODEL, tenant: 'default' })! > 0);
    assert.equal(metricValue(m, 'kvgate_request_tpot_seconds_count', { route: 'chat', model: MODEL }), undefined, 'an unfinished answer has no TPOT');
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});
