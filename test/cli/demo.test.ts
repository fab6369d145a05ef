/** `kvgate demo` end to end: the built CLI, a real fleet of simulated workers, Ctrl-C. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

test('demo prints the URL and curl lines, serves chat, and exits 0 on SIGINT', async () => {
  const child = spawn(process.execPath, [CLI, 'demo', '--port', '0', '--workers', '2', '--speed', '50', '--json-logs'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  try {
    const deadline = Date.now() + 15_000;
    while (!stdout.includes('Ctrl-C') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const url = /behind (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
    assert.ok(url, `no URL in: ${stdout}`);
    assert.match(stdout, /curl -s .*\/v1\/chat\/completions/);
    assert.match(stdout, /"stream":true/);
    const r = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'llama-3.1-8b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    assert.equal(r.status, 200);
    const workers = (await (await fetch(url + '/admin/workers')).json()) as any[];
    assert.equal(workers.length, 2);
    child.kill('SIGINT');
    assert.equal(await exited, 0);
    assert.match(stdout, /stopped/);
  } finally {
    child.kill('SIGKILL');
  }
});

test('demo rejects bad flags with exit 2', async () => {
  for (const args of [['--workers', '0'], ['--speed', 'fast'], ['--model', 'gpt-99'], ['--nope'], ['--port', '0', '--policy', 'no-such-policy']]) {
    const child = spawn(process.execPath, [CLI, 'demo', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    assert.equal(code, 2, args.join(' '));
  }
});
