import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

interface Row {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

function write(...args: string[]): Row[] {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-pm-'));
  try {
    const out = join(dir, 't.jsonl');
    const r = spawnSync(process.execPath, [join(ROOT, 'dist/benchmarks/index.js'), 'product-mix-trace', '--out', out, ...args], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    return readFileSync(out, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('product-mix-trace: chat, document questions and long generations in Mooncake rows that describe their prompts', () => {
  const rows = write('--requests', '3000', '--seed', '3');
  assert.equal(rows.length, 3000);
  let last = 0;
  const kinds = { chat: 0, doc: 0, generation: 0 };
  for (const r of rows) {
    assert.ok(r.timestamp >= last, 'arrivals in order');
    last = r.timestamp;
    // One id per 512-token block, the last one partial.
    assert.equal(r.hash_ids.length, Math.ceil(r.input_length / 512));
    if (r.output_length >= 800) kinds.generation++;
    else if (r.input_length >= 6 * 1024) kinds.doc++;
    else kinds.chat++;
  }
  // 60 / 25 / 15 (a chat answer reaches 800 tokens now and then; a chat prompt never 6k).
  assert.ok(Math.abs(kinds.chat / 3000 - 0.6) < 0.04, JSON.stringify(kinds));
  assert.ok(Math.abs(kinds.doc / 3000 - 0.25) < 0.03, JSON.stringify(kinds));
  assert.ok(Math.abs(kinds.generation / 3000 - 0.15) < 0.03, JSON.stringify(kinds));
  // The same seed writes the same trace; bad options exit 2.
  assert.deepEqual(write('--requests', '50', '--seed', '3'), rows.slice(0, 50));
  const bad = spawnSync(process.execPath, [join(ROOT, 'dist/benchmarks/index.js'), 'product-mix-trace', '--out', '/dev/null', '--doc-zipf', 'x'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
});

test('product-mix-trace: --doc-zipf sets how hot the most asked document is', () => {
  const hottest = (zipf: string): number => {
    const firstBlocks = new Map<number, number>();
    let docs = 0;
    for (const r of write('--requests', '3000', '--seed', '5', '--doc-zipf', zipf)) {
      if (r.input_length < 6 * 1024 || r.output_length >= 800) continue;
      docs++;
      firstBlocks.set(r.hash_ids[0]!, (firstBlocks.get(r.hash_ids[0]!) ?? 0) + 1);
    }
    return Math.max(...firstBlocks.values()) / docs;
  };
  const spread = hottest('1.1');
  const hot = hottest('2.1');
  assert.ok(spread < 0.3, `hottest document at 1.1: ${spread}`);
  assert.ok(hot > 0.45, `hottest document at 2.1: ${hot}`);
});
