/**
 * What an SGLang pool cannot be asked for, checked across sections: what kvgate relies on vLLM's
 * servers for and SGLang's do not do the same way.
 *
 * - `admission.vllmPriority` sends vLLM's priority values (lower runs first); SGLang's scheduler
 *   runs higher values first unless started with --schedule-low-priority-values-first, so the
 *   same numbers would invert the classes.
 * - A speculative cascade's draft calls read vLLM's `return_tokens_as_token_ids` spelling of the
 *   draft's tokens and their candidates; SGLang's OpenAI completions name tokens by their text
 *   (python/sglang/srt/entrypoints/openai/protocol.py, LogProbs), so a draft pool is a vLLM one.
 *   A target pool may be either (the cascade verifies through SGLang's /generate).
 */
import type { z } from 'zod';
import { configuredWorkers } from '../workers.js';
import type { ConfigSections } from './sections.js';

type Ctx = z.RefinementCtx<ConfigSections>;

export function checkEngines(c: ConfigSections, ctx: Ctx): void {
  const sglangPools = new Set<string>();
  for (const { w, pool } of configuredWorkers(c)) {
    if ((w.engine ?? pool.engine ?? 'vllm') === 'sglang') sglangPools.add(pool.name);
  }
  if (sglangPools.size === 0) return;
  for (const [i, name] of c.admission.vllmPriority.pools.entries()) {
    const hit = name === '*' ? [...sglangPools][0] : sglangPools.has(name) ? name : undefined;
    if (hit === undefined) continue;
    ctx.addIssue({
      code: 'custom',
      path: ['admission', 'vllmPriority', 'pools', i],
      message: `pool '${hit}' runs SGLang, whose scheduler orders priority values the other way round from vLLM's: name the vLLM pools here, not ${name === '*' ? "'*'" : `'${name}'`}`,
    });
  }
  for (const [i, sc] of c.speculative.cascades.entries()) {
    if (!sglangPools.has(sc.draftPool)) continue;
    ctx.addIssue({
      code: 'custom',
      path: ['speculative', 'cascades', i, 'draftPool'],
      message: `pool '${sc.draftPool}' has SGLang workers: a cascade's draft pool must be vLLM (its draft calls read vLLM's token-id logprobs); SGLang pools can be the target`,
    });
  }
}
