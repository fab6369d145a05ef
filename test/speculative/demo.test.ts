/** `kvgate demo --draft-acceptance`: the demo fleet with a draft worker and a speculative cascade. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startDemo } from '../cli/demo-process.js';

test('demo --draft-acceptance serves the model through a cascade', async () => {
  const { url, child, exited, stdout } = await startDemo(['--port', '0', '--workers', '1', '--speed', '50', '--no-cache', '--json-logs', '--draft-acceptance', '0.7']);
  try {
    assert.match(stdout(), /speculative cascade: llama-3\.1-8b-draft drafts \(acceptance 0\.7\)/);
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
