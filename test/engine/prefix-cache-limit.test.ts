/** A request that may read only part of its prompt from the prefix cache (a verifier's scored positions). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Engine } from '../../src/engine/engine.js';
import { buildEngineConfig } from '../../src/engine/profiles.js';
import { hashSampler } from '../../src/engine/synthetic-lm.js';
import type { EngineRequest, FinishedOutput } from '../../src/engine/types.js';

const config = () => ({ ...buildEngineConfig({ gpu: 'h100', model: 'llama-3.1-8b', hashSeed: 42 }), blockSize: 4, numGpuBlocks: 64, maxNumSeqs: 8, maxNumBatchedTokens: 64, kvEvents: false });

function run(e: Engine, req: EngineRequest): FinishedOutput {
  e.add(req);
  let done: FinishedOutput | undefined;
  while (e.hasWork()) for (const f of e.step()!.finished) if (f.id === req.id) done = f;
  return done!;
}

test('prefixCacheLimit caps the tokens read from the cache at whole blocks below it; skipPrefixCache reads none', () => {
  const e = new Engine(config());
  const context = Array.from({ length: 30 }, (_, i) => (i * 37 + 11) % 4000);
  run(e, { id: 'warm', prompt: context, maxTokens: 1, sampler: hashSampler('warm') });
  // The context again with 3 draft tokens: 28 of its tokens are cached (7 blocks of 4).
  const verify = [...context, 7, 8, 9];
  const base = { maxTokens: 1, sampler: hashSampler('v') };
  assert.equal(run(e, { id: 'free', prompt: verify, ...base }).cachedPromptTokens, 28);
  // Up to the last context token (29): 7 whole blocks; the scored positions are computed.
  assert.equal(run(e, { id: 'capped', prompt: verify, prefixCacheLimit: context.length - 1, ...base }).cachedPromptTokens, 28);
  assert.equal(run(e, { id: 'capped-lower', prompt: verify, prefixCacheLimit: 10, ...base }).cachedPromptTokens, 8);
  assert.equal(run(e, { id: 'skipped', prompt: verify, skipPrefixCache: true, ...base }).cachedPromptTokens, 0);
});
