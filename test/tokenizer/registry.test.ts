import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { loadHfTokenizer } from '../../src/tokenizer/hf.js';
import { TokenizerRegistry, parseTokenizerSpec } from '../../src/tokenizer/registry.js';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { HELLO_WORLD_BPE } from './fixtures.js';

const BPE_JSON = HELLO_WORLD_BPE;

async function tmp(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'kvgate-tok-'));
}

test('specs parse, with clear errors', () => {
  assert.deepEqual(parseTokenizerSpec('estimate'), { kind: 'estimate' });
  assert.deepEqual(parseTokenizerSpec('remote'), { kind: 'remote' });
  assert.deepEqual(parseTokenizerSpec('hf:/m/tokenizer.json'), { kind: 'hf', path: '/m/tokenizer.json' });
  assert.throws(() => parseTokenizerSpec('hf:'), /needs a path/);
  assert.throws(() => parseTokenizerSpec('tiktoken'), /unknown tokenizer 'tiktoken'/);
});

test('hf: exact ids from tokenizer.json, special tokens on request; bad files explain themselves', async () => {
  const dir = await tmp();
  try {
    const path = join(dir, 'tokenizer.json');
    await writeFile(path, JSON.stringify(BPE_JSON));
    const t = await loadHfTokenizer(path);
    assert.deepEqual(t.encode('hello world'), [0, 11, 15]);
    assert.deepEqual(t.encode('hello world', false), [11, 15]);
    assert.deepEqual(t.encode('held', false), [8, 3, 7]);
    const reg = await TokenizerRegistry.create({ llama: `hf:${path}` });
    const r = await reg.tokenize('hello hello', { model: 'llama', addSpecialTokens: false });
    assert.deepEqual(r.tokens, [11, 11]);
    assert.equal(r.tokenizer, `hf:${path}`);
    // Unlisted models use the default (estimate).
    const e = await reg.tokenize('hello world', { model: 'other' });
    assert.deepEqual(e.tokens, estimateTokenizer.encode('hello world'));
    await reg.close();

    await assert.rejects(loadHfTokenizer(join(dir, 'missing.json')), /cannot read tokenizer file .*missing\.json.*ENOENT/);
    await writeFile(join(dir, 'bad.json'), '{not json');
    await assert.rejects(loadHfTokenizer(join(dir, 'bad.json')), /not valid JSON/);
    await writeFile(join(dir, 'nomodel.json'), '{"version":"1.0"}');
    await assert.rejects(loadHfTokenizer(join(dir, 'nomodel.json')), /no "model" section/);
    await writeFile(join(dir, 'weird.json'), JSON.stringify({ model: { type: 'Nope' } }));
    await assert.rejects(loadHfTokenizer(join(dir, 'weird.json')), /not supported/);
    await assert.rejects(TokenizerRegistry.create({ m: `hf:${join(dir, 'missing.json')}` }), /tokenizer for model 'm'/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('remote: the worker’s /tokenize gives the ids it will compute', async () => {
  const worker = await startSimWorker({ model: 'llama-3.1-8b', speed: 100 });
  try {
    const reg = await TokenizerRegistry.create({ 'llama-3.1-8b': 'remote' });
    const text = 'The quick brown fox jumps over the lazy dog, 12345 times.';
    const r = await reg.tokenize(text, { model: 'llama-3.1-8b', workerUrl: worker.url });
    assert.equal(r.tokenizer, 'remote');
    assert.equal(r.degraded, undefined);
    assert.deepEqual(r.tokens, estimateTokenizer.encode(text));
    assert.equal(reg.stats.remoteCalls, 1);
    assert.equal(reg.stats.remoteFailures, 0);
  } finally {
    await worker.close();
  }
});

test("remote: a chat prompt is sent as its messages, so the worker applies its model's chat template", async () => {
  const bodies: Array<Record<string, unknown>> = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      bodies.push(JSON.parse(raw) as Record<string, unknown>);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"tokens":[7,8,9],"count":3}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const reg = await TokenizerRegistry.create({ m: 'remote' });
    const messages = [{ role: 'user', content: 'hello' }];
    const r = await reg.tokenize('<|user|>\nhello\n<|assistant|>\n', { model: 'm', workerUrl: url, messages });
    assert.deepEqual(r.tokens, [7, 8, 9]);
    assert.deepEqual(bodies[0], { model: 'm', messages, add_generation_prompt: true });
    await reg.tokenize('plain text', { model: 'm', workerUrl: url });
    assert.deepEqual(bodies[1], { model: 'm', prompt: 'plain text' });
    // The request's rendering parameters go too, in vLLM's TokenizeChatRequest fields.
    const tools = [{ type: 'function', function: { name: 'f' } }];
    await reg.tokenize('ignored', {
      model: 'm',
      workerUrl: url,
      messages,
      addSpecialTokens: true,
      render: { addGenerationPrompt: true, continueFinalMessage: true, tools, documents: [{ text: 'd' }], templateKwargs: { enable_thinking: false } },
    });
    assert.deepEqual(bodies[2], {
      model: 'm',
      messages,
      add_generation_prompt: false,
      continue_final_message: true,
      tools,
      chat_template_kwargs: { enable_thinking: false },
      add_special_tokens: true,
    });
    // The simulated worker renders messages with its template: the ids of the rendered prompt.
    const sim = await startSimWorker({ model: 'llama-3.1-8b', speed: 100 });
    try {
      const simReg = await TokenizerRegistry.create({ 'llama-3.1-8b': 'remote' });
      const s = await simReg.tokenize('ignored', { model: 'llama-3.1-8b', workerUrl: sim.url, messages });
      assert.equal(s.degraded, undefined);
      assert.deepEqual(s.tokens, estimateTokenizer.encode('<|user|>\nhello\n<|assistant|>\n'));
    } finally {
      await sim.close();
    }
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('remote failures degrade to the estimate with a reason, never fail the request', async () => {
  let mode: 'error' | 'garbage' | 'slow' = 'error';
  const server: Server = createServer((req, res) => {
    if (mode === 'error') {
      res.writeHead(500, { 'content-type': 'text/plain' }).end('boom');
    } else if (mode === 'garbage') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"tokens":"no"}');
    } else {
      const t = setTimeout(() => res.writeHead(200).end('{"tokens":[1]}'), 1000);
      req.on('close', () => clearTimeout(t));
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const reg = await TokenizerRegistry.create({ m: 'remote' }, { remoteTimeoutMs: 100 });
    const text = 'hello there';
    const expect = estimateTokenizer.encode(text);
    const r1 = await reg.tokenize(text, { model: 'm', workerUrl: url });
    assert.deepEqual(r1.tokens, expect);
    assert.equal(r1.tokenizer, 'estimate');
    assert.match(r1.degraded!, /answered 500: boom/);
    mode = 'garbage';
    const r2 = await reg.tokenize(text, { model: 'm', workerUrl: url });
    assert.match(r2.degraded!, /integer "tokens" array/);
    mode = 'slow';
    const r3 = await reg.tokenize(text, { model: 'm', workerUrl: url });
    assert.match(r3.degraded!, /timed out after 100 ms/);
    const r4 = await reg.tokenize(text, { model: 'm' });
    assert.match(r4.degraded!, /no worker/);
    server.close();
    const r5 = await reg.tokenize(text, { model: 'm', workerUrl: 'http://127.0.0.1:1' });
    assert.match(r5.degraded!, /failed/);
    assert.deepEqual(r5.tokens, expect);
    assert.equal(reg.stats.remoteFailures, 5);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
