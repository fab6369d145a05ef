/** `kvgate demo --draft-acceptance`: the demo fleet with a draft worker and a speculative cascade. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

test('demo --draft-acceptance serves the model through a cascade', async () => {
  const child = spawn(process.execPath, [CLI, 'demo', '--port', '0', '--workers', '1', '--speed', '50', '--no-cache', '--json-logs', '--draft-acceptance', '0.7'], {
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
    assert.match(stdout, /speculative cascade: llama-3\.1-8b-draft drafts \(acceptance 0\.7\)/);
    const r = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'llama-3.1-8b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, temperature: 1 }),
    });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-kvgate-speculative'), 'cascade');
    assert.equal(r.headers.get('x-kvgate-draft-worker'), 'draft-0');
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});
