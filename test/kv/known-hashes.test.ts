import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { idealHitRate } from '../../src/bench/ideal-hit.js';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import type { StepResult } from '../../src/engine/types.js';
import { blockHashes, chainRoot, keepHashes, knownHashes } from '../../src/kv/block-hash.js';
import { concatTokens, fillStream } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';

function stream(seed: number, n: number): Int32Array {
  const out = new Int32Array(n);
  fillStream(out, 0, seed, n);
  return out;
}

describe('block hashes known from the prompt a prompt was built on', () => {
  it('a prompt built by concatTokens gets its first part’s blocks once they are kept, and they equal hashing from scratch', () => {
    const bs = 16;
    const root = chainRoot(3);
    const system = stream(1, 1000); // 62 full blocks and 8 tokens
    const a = concatTokens([system, stream(2, 150)]);
    const b = concatTokens([system, stream(3, 90)]);
    const out: number[] = [];
    assert.equal(knownHashes(a, root, bs, out), 0, 'nothing is known before any prompt is hashed');
    const ha = blockHashes(a, bs, 3);
    keepHashes(a, root, bs, ha, ha.length);
    // a's own hashes, and the system prompt's share of them for b: its 62 full blocks.
    assert.equal(knownHashes(a, root, bs, out), ha.length);
    assert.deepEqual(out.slice(0, ha.length), ha);
    const got: number[] = [];
    assert.equal(knownHashes(b, root, bs, got), 62);
    assert.deepEqual(got, blockHashes(b, bs, 3).slice(0, 62));
    // Another root or block size knows nothing.
    assert.equal(knownHashes(b, chainRoot(4), bs, []), 0);
    assert.equal(knownHashes(b, root, 32, []), 0);
    // A session's next turn is built on the whole previous prompt.
    const next = concatTokens([a, stream(4, 40), stream(5, 30)]);
    const n: number[] = [];
    assert.equal(knownHashes(next, root, bs, n), Math.floor(a.length / bs));
    assert.deepEqual(n, blockHashes(next, bs, 3).slice(0, n.length));
  });

  it('the engine caches, hits and reports the same blocks whether or not its prompts were built on others', () => {
    const system = stream(7, 300);
    const built: Int32Array[] = [];
    for (let i = 0; i < 12; i++) {
      const p = concatTokens([system, stream(100 + i, 20 + i * 7)]);
      built.push(i % 3 === 2 ? concatTokens([built[i - 1]!, stream(200 + i, 33)]) : p);
    }
    const run = (prompts: ArrayLike<number>[]): { events: unknown[]; cached: number[] } => {
      const e = new Engine({ ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 9 }), blockSize: 16, numGpuBlocks: 96, kvEvents: true });
      const events: unknown[] = [];
      const cached: number[] = [];
      prompts.forEach((prompt, i) => {
        e.add({ id: `r${i}`, prompt, maxTokens: 20, sampler: () => 11, ignoreEos: true, ...(i % 4 === 3 ? { cacheSalt: 'tenant' } : {}) });
        for (let s = 0; s < 6 && e.hasWork(); s++) {
          const r: StepResult = e.step()!;
          events.push(r.kvEvents);
          for (const st of r.started) cached.push(st.cachedPromptTokens);
        }
      });
      while (e.hasWork()) events.push(e.step()!.kvEvents);
      return { events, cached };
    };
    // The same tokens in fresh arrays that nothing is known of.
    const plain = run(built.map((p) => Array.from(p)));
    const marked = run(built);
    assert.deepEqual(marked, plain);
    assert.ok(plain.cached.some((c) => c > 0), 'some prompts hit the cache');
  });

  it('the ideal hit rate is the same whether or not the prompts were built on others', () => {
    const system = stream(8, 500);
    const reqs: BenchRequest[] = [];
    let prev: Int32Array | null = null;
    for (let i = 0; i < 30; i++) {
      const p: Int32Array = prev !== null && i % 2 === 1 ? concatTokens([prev, stream(300 + i, 25)]) : concatTokens([system, stream(400 + i, 40 + i)]);
      reqs.push({ arrivalMs: i, promptTokens: p, maxTokens: 30, outputSeed: i });
      prev = p;
    }
    const copy = reqs.map((r) => ({ ...r, promptTokens: Array.from(r.promptTokens) }));
    const plain = idealHitRate(copy, 16, 2);
    assert.deepEqual(idealHitRate(reqs, 16, 2), plain);
    assert.deepEqual(idealHitRate(reqs, 16, 2), plain, 'and again, with every hash known');
    assert.ok(plain.hitTokens > 0);
  });
});
