/** Requests that start several sequences at a worker (a batch of prompts, n > 1), end to end. */
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { test } from 'node:test';
import { MODEL, post, startGateway, startStub, waitFor, workerStandIn } from './helpers.js';

test('the gateway reserves KV at the worker for every prompt of a batch and every answer it asks for', async () => {
  const held: ServerResponse[] = [];
  const stub = await startStub(workerStandIn((_req, _raw, res) => held.push(res)));
  const { gw, url } = await startGateway([stub.url]);
  const workers = async (): Promise<{ reservedBlocks: number; blockSize: number }> =>
    ((await (await fetch(url + '/admin/workers')).json()) as Array<{ reservedBlocks: number; blockSize: number }>)[0]!;
  const ids = (from: number): number[] => Array.from({ length: 320 }, (_, i) => from + i);
  const release = (): void => {
    const res = held.shift()!;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'c', object: 'text_completion', choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
  };
  try {
    const bs = (await workers()).blockSize;
    // One prompt of 320 tokens, one answer of up to 100.
    const one = post(url + '/v1/completions', { model: MODEL, prompt: ids(1000), max_tokens: 100 });
    await waitFor(() => held.length === 1, 5000);
    assert.equal((await workers()).reservedBlocks, Math.ceil((320 + 100) / bs));
    release();
    assert.equal((await one).status, 200);
    assert.equal((await workers()).reservedBlocks, 0);
    // Three such prompts, two answers each: six sequences.
    const batch = post(url + '/v1/completions', { model: MODEL, prompt: [ids(2000), ids(3000), ids(4000)], n: 2, max_tokens: 100 });
    await waitFor(() => held.length === 1, 5000);
    assert.equal((await workers()).reservedBlocks, Math.ceil((3 * 320 + 6 * 100) / bs));
    release();
    assert.equal((await batch).status, 200);
    // n answers to one chat prompt: the prompt once, the output n times.
    const chat = post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], n: 4, max_tokens: 200 });
    await waitFor(() => held.length === 1, 5000);
    const r = (await workers()).reservedBlocks;
    assert.ok(r >= Math.ceil((4 * 200) / bs) && r <= Math.ceil((4 * 200 + 64) / bs), `reserved ${r}`);
    release();
    assert.equal((await chat).status, 200);
    assert.equal((await workers()).reservedBlocks, 0);
  } finally {
    for (const res of held) res.destroy();
    await gw.close();
    await stub.close();
  }
});
