import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { blockHashes, chainRoot } from '../../src/kv/block-hash.js';
import { LeadingPart, leadingPartOf, recordLeadingPart } from '../../src/kv/leading-part.js';
import { KVGATE_HASH_SEED, PromptBlocks } from '../../src/kv/prompt-blocks.js';
import { seededRng } from '../../src/util/rng.js';
import { idealHitRate } from '../../src/bench/ideal-hit.js';
import { concatTokens } from '../../src/workload/tokens.js';
import type { BenchRequest } from '../../src/workload/types.js';

function tokens(n: number, salt: number): Int32Array {
  return Int32Array.from({ length: n }, (_, i) => (i * 31 + salt * 977) % 4000);
}

test("a part's hashes are its blocks' chained hashes, on each chain asked for", () => {
  const part = new LeadingPart(tokens(70, 1));
  for (const seed of [0, 9]) {
    for (const bs of [4, 16]) assert.deepEqual([...part.hashes(chainRoot(seed), bs)], blockHashes(part.tokens, bs, seed));
  }
  // Kept: the same array on the second ask.
  assert.equal(part.hashes(chainRoot(0), 16), part.hashes(chainRoot(0), 16));
});

test("a part built on another reuses its hashes and gives the whole chain's", () => {
  const first = new LeadingPart(tokens(37, 2));
  const second = new LeadingPart(concatTokens([first.tokens, tokens(50, 3)]), first);
  const third = new LeadingPart(concatTokens([second.tokens, tokens(9, 4)]), second);
  // Asked for in an order where the base is hashed first, and in one where it is not.
  assert.deepEqual([...third.hashes(chainRoot(5), 8)], blockHashes(third.tokens, 8, 5));
  assert.deepEqual([...first.hashes(chainRoot(5), 8)], blockHashes(first.tokens, 8, 5));
  assert.deepEqual([...second.hashes(chainRoot(6), 8)], blockHashes(second.tokens, 8, 6));
});

test('the engine caches the same blocks with and without the prompt part', () => {
  const part = new LeadingPart(tokens(61, 7));
  const prompts = [tokens(20, 8), tokens(45, 9)].map((q) => concatTokens([part.tokens, q]));
  const run = (withPart: boolean): Set<number> => {
    const e = new Engine({ ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 3 }), blockSize: 4, numGpuBlocks: 128 });
    prompts.forEach((prompt, i) => e.add({ id: `r${i}`, prompt, ...(withPart ? { promptPart: part } : {}), maxTokens: 6, sampler: () => 11, ignoreEos: true, lora: i === 1 ? 'a' : undefined }));
    while (e.hasWork()) e.step();
    return e.cachedBlockHashes();
  };
  assert.deepEqual(run(true), run(false));
});

test('the ideal hit rate is the same with and without the prompt parts', () => {
  const part = new LeadingPart(tokens(100, 1));
  const reqs = (withPart: boolean): BenchRequest[] =>
    [5, 40, 17].map((n, i) => ({ arrivalMs: i, promptTokens: concatTokens([part.tokens, tokens(n, i + 2)]), ...(withPart ? { promptPart: part } : {}), maxTokens: 20, outputSeed: i }));
  const hits: number[][] = [[], []];
  const a = idealHitRate(reqs(true), 16, 0, (_, h) => hits[0]!.push(h));
  const b = idealHitRate(reqs(false), 16, 0, (_, h) => hits[1]!.push(h));
  assert.deepEqual(a, b);
  assert.deepEqual(hits[0], hits[1]);
  assert.ok(a.hitTokens > 0);
});

test("a prompt recorded as beginning with a part is hashed by PromptBlocks as one that is not, on every chain", () => {
  const rand = seededRng(17);
  const tokens = (n: number): Int32Array => Int32Array.from({ length: n }, () => Math.floor(rand() * 50_000));
  for (let trial = 0; trial < 40; trial++) {
    const part = new LeadingPart(tokens(1 + Math.floor(rand() * 900)));
    // Two prompts on the part: their hashes past it differ, theirs over it are the part's.
    for (let k = 0; k < 2; k++) {
      const prompt = concatTokens([part.tokens, tokens(Math.floor(rand() * 300))]);
      const plain = Int32Array.from(prompt);
      recordLeadingPart(prompt, part);
      assert.equal(leadingPartOf(prompt), part);
      assert.equal(leadingPartOf(plain), undefined);
      const blockSize = [16, 32, 7][trial % 3]!;
      const salt = trial % 4 === 1 ? `tenant-${trial}` : undefined;
      const adapter = trial % 5 === 2 ? `lora-${trial}` : undefined;
      const seed = trial % 2 === 0 ? KVGATE_HASH_SEED : 12345;
      const want = new PromptBlocks(plain, blockSize, seed, salt, adapter);
      const got = new PromptBlocks(prompt, blockSize, seed, salt, adapter);
      // Read part of the way first (the lazy path), then to the end.
      const mid = Math.floor(got.length / 3);
      assert.equal(got.at(mid), want.at(mid), `trial ${trial}: block ${mid}`);
      assert.deepEqual(got.all(), want.all(), `trial ${trial}`);
    }
  }
  // A part longer than the prompt it is recorded for is not used (the prompt cannot begin with it).
  const part = new LeadingPart(tokens(200));
  const short = tokens(100);
  recordLeadingPart(short, part);
  assert.deepEqual(new PromptBlocks(short, 16, KVGATE_HASH_SEED).all(), new PromptBlocks(Int32Array.from(short), 16, KVGATE_HASH_SEED).all());
});
