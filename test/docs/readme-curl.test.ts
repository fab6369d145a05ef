/**
 * The README's first curl, sent as a reader would after `npm start`: twice to the demo, and the
 * second answer comes from the response cache (the README says so).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { startDemo } from '../cli/demo-process.js';
import { ROOT } from './markdown-links.js';

/** The first `curl` command in a fenced code block: its URL path and its `-d` body. */
export function firstCurl(markdown: string): { path: string; body: string } {
  const blocks = [...markdown.matchAll(/^```[a-z]*\n([\s\S]*?)^```/gm)].map((m) => m[1]!);
  const block = blocks.find((b) => /^\s*curl\s/m.test(b));
  assert.ok(block, 'no fenced block with a curl command');
  // The command runs from its `curl` to the first line not continued with a backslash.
  const lines = block.slice(block.search(/^\s*curl\s/m)).split('\n');
  const end = lines.findIndex((l) => !l.trimEnd().endsWith('\\'));
  const command = lines.slice(0, end + 1).map((l) => l.trimEnd().replace(/\\$/, '')).join(' ');
  const url = /\shttps?:\/\/[^\s/]+(\/\S*)/.exec(command);
  const body = /\s(?:-d|--data(?:-raw)?)\s+'([^']*)'/.exec(command);
  assert.ok(url && body, `cannot read the URL and -d body of: ${command}`);
  return { path: url[1]!, body: body[1]! };
}

test("the README's first curl is a deterministic request: sent twice to the demo, the second is a cache hit", async () => {
  const { path, body } = firstCurl(readFileSync(join(ROOT, 'README.md'), 'utf8'));
  const request = JSON.parse(body) as { temperature?: number; seed?: number };
  assert.ok(request.temperature === 0 || Number.isInteger(request.seed), `the first curl's body is sampled, so never cached: ${body}`);
  const { url, child, exited } = await startDemo(['--port', '0', '--workers', '2', '--speed', '50', '--json-logs']);
  try {
    const send = () => fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const first = await send();
    assert.equal(first.status, 200, await first.clone().text());
    assert.equal(first.headers.get('x-kvgate-cache'), 'miss');
    const firstAnswer = await first.json();
    const second = await send();
    assert.equal(second.status, 200);
    assert.equal(second.headers.get('x-kvgate-cache'), 'hit');
    assert.deepEqual(await second.json(), firstAnswer);
    child.kill('SIGINT');
    assert.equal(await exited, 0);
  } finally {
    child.kill('SIGKILL');
  }
});

test('firstCurl reads the first command of the first block with one, continued over lines', () => {
  const md = "text\n```sh\nnpm start\n```\n```sh\ncurl -si http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\\n  -d '{\"model\":\"m\",\"max_tokens\":32}'\n\ncurl -s http://x/other -d '{}'\n```\n";
  const c = firstCurl(md);
  assert.equal(c.path, '/v1/chat/completions');
  assert.deepEqual(JSON.parse(c.body), { model: 'm', max_tokens: 32 });
});
