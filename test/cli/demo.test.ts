/** `kvgate demo` end to end: the built CLI, a real fleet of simulated workers, Ctrl-C. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { redisSkip, startRedis } from '../redis-server.js';
import { CLI, startDemo } from './demo-process.js';

test('demo prints the URL and curl lines, serves chat, and exits 0 on SIGINT', async () => {
  const { url, child, stdout, exited } = await startDemo(['--port', '0', '--workers', '2', '--speed', '50', '--json-logs']);
  try {
    assert.match(stdout(), /curl -s .*\/v1\/chat\/completions/);
    assert.match(stdout(), /"stream":true/);
    // The printed embeddings line works as printed.
    const line = /curl -s (\S+\/v1\/embeddings) -H 'content-type: application\/json' -d '([^']+)'/.exec(stdout());
    assert.ok(line, 'an embeddings curl line');
    const emb = await fetch(line[1]!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: line[2]! });
    assert.equal(emb.status, 200);
    assert.equal(((await emb.json()) as { data: unknown[] }).data.length, 2);
    // And the Responses API line.
    const rline = /curl -s (\S+\/v1\/responses) -H 'content-type: application\/json' -d '([^']+)'/.exec(stdout());
    assert.ok(rline, 'a responses curl line');
    const resp = await fetch(rline[1]!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rline[2]! });
    assert.equal(resp.status, 200);
    assert.equal(((await resp.json()) as { object: string }).object, 'response');
    const ask = () =>
      fetch(url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'llama-3.1-8b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0 }),
      });
    const r = await ask();
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-kvgate-cache'), 'miss');
    const again = await ask();
    assert.equal(again.headers.get('x-kvgate-cache'), 'hit', 'the demo runs with the in-memory response cache');
    assert.deepEqual(await again.json(), await r.json());
    assert.match(stdout(), /response cache: in memory/);
    assert.match(stdout(), /"temperature":0/);
    const workers = (await (await fetch(url + '/admin/workers')).json()) as any[];
    assert.equal(workers.length, 2);
    assert.match(stdout(), /dashboard: http:\/\/127\.0\.0\.1:\d+\/dashboard/);
    const state = (await (await fetch(url + '/dashboard/state')).json()) as any;
    assert.deepEqual(state.workers.map((w: any) => w.id).sort(), workers.map((w) => w.id).sort());
    child.kill('SIGINT');
    assert.equal(await exited, 0);
    assert.match(stdout(), /stopped/);
  } finally {
    child.kill('SIGKILL');
  }
});

test('demo --gpu h100:1,a10g:1: a mixed pool whose workers declare their GPU, and the policy starts from each one’s speed', async () => {
  const { url, child, stdout, exited } = await startDemo(['--port', '0', '--gpu', 'h100:1,a10g:1', '--speed', '50', '--json-logs']);
  try {
    assert.match(stdout(), /2 simulated llama-3\.1-8b worker\(s\) on h100:1,a10g:1/);
    // Once both have been scraped (their KV capacity is their own report).
    let workers: any[] = [];
    const until = Date.now() + 10_000;
    do {
      workers = (await (await fetch(url + '/admin/workers')).json()) as any[];
      if (workers.every((w) => w.snapshotAgeMs !== null)) break;
      await new Promise((r) => setTimeout(r, 50));
    } while (Date.now() < until);
    assert.deepEqual(workers.map((w) => w.hardware), ['h100', 'a10g']);
    // Nothing learned yet: the A10G's decode step is the H100's scaled by their bandwidths.
    assert.equal(workers[0].kvgate.decodeStepMs, 7.5);
    assert.equal(workers[1].kvgate.decodeStepMs, Math.round(7.5 * (3350 / 600) * 100) / 100);
    // The A10G's 24 GB hold fewer blocks than the H100's 80 (vllm:cache_config_info).
    assert.ok(workers[1].numGpuBlocks < workers[0].numGpuBlocks / 2, JSON.stringify(workers.map((w) => w.numGpuBlocks)));
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});

test('demo --gpu h100:1,a10g:1 --gpu-labels off: unlabelled, the two are told apart by their KV capacity', async () => {
  const { url, child, exited } = await startDemo(['--port', '0', '--gpu', 'h100:1,a10g:1', '--gpu-labels', 'off', '--speed', '50', '--json-logs']);
  try {
    let workers: any[] = [];
    const until = Date.now() + 10_000;
    do {
      workers = (await (await fetch(url + '/admin/workers')).json()) as any[];
      if (workers.every((w) => w.snapshotAgeMs !== null && w.speedClass !== 'demo')) break;
      await new Promise((r) => setTimeout(r, 50));
    } while (Date.now() < until);
    assert.deepEqual(workers.map((w) => w.hardware), [null, null]);
    assert.deepEqual(workers.map((w) => w.speedClass), workers.map((w) => `demo · ${w.numGpuBlocks} blocks`));
    // No label, no prior: both start from the configured figures until answers teach them.
    assert.deepEqual(workers.map((w) => w.kvgate.decodeStepMs), [7.5, 7.5]);
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});

test('demo --adapters: the workers serve LoRA adapters, listed and routed by the gateway', async () => {
  const { url, child, stdout, exited } = await startDemo(['--port', '0', '--workers', '2', '--speed', '50', '--json-logs', '--adapters', 'sql-lora,chat-lora']);
  try {
    assert.match(stdout(), /LoRA adapters on llama-3\.1-8b: sql-lora, chat-lora/);
    const models = (await (await fetch(url + '/v1/models')).json()) as { data: Array<{ id: string; parent?: string }> };
    assert.deepEqual(models.data.map((m) => m.parent ?? null), [null, 'llama-3.1-8b', 'llama-3.1-8b']);
    const r = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-lora', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { model: string }).model, 'chat-lora');
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});

test('demo rejects bad flags with exit 2', async () => {
  for (const args of [['--workers', '0'], ['--gpu', 'h100:2,a10g:2', '--workers', '3'], ['--gpu', 'tpu:2'], ['--gpu-labels', 'off'], ['--gpu', 'h100:1,a10g:1', '--gpu-labels', 'maybe'], ['--speed', 'fast'], ['--model', 'gpt-99'], ['--nope'], ['--port', '0', '--policy', 'no-such-policy'], ['--redis', 'localhost:6379'], ['--redis', 'redis://h', '--no-cache'], ['--adapters', 'a,,b'], ['--adapters', 'llama-3.1-8b'], ['--port', '0', '--adapters', 'a,a'], ['--adapters', 'a', '--draft-acceptance', '0.7']]) {
    const child = spawn(process.execPath, [CLI, 'demo', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    assert.equal(code, 2, args.join(' '));
  }
});

test('demo --redis keeps the response cache in Redis', { skip: redisSkip() }, async () => {
  const redis = await startRedis();
  const { url, child, stdout, exited } = await startDemo(['--port', '0', '--workers', '1', '--speed', '50', '--json-logs', '--redis', redis.url]).catch(async (err: unknown) => {
    await redis.stop();
    throw err;
  });
  try {
    assert.match(stdout(), /response cache: Redis at redis:\/\/127\.0\.0\.1/);
    const ask = () =>
      fetch(url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'llama-3.1-8b', messages: [{ role: 'user', content: 'from redis' }], max_tokens: 4, temperature: 0 }),
      });
    assert.equal((await ask()).headers.get('x-kvgate-cache'), 'miss');
    let hit = false;
    for (let i = 0; i < 50 && !hit; i++) {
      hit = (await ask()).headers.get('x-kvgate-cache') === 'hit';
      if (!hit) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(hit);
    const stats = (await (await fetch(url + '/admin/cache')).json()) as { store: string };
    assert.equal(stats.store, 'redis');
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
    await redis.stop();
  }
});
