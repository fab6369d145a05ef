/**
 * What an SGLang pool cannot be asked for, checked across sections: what kvgate relies on vLLM's
 * OpenAI server for and SGLang's does not do the same way.
 *
 * - `cacheIsolation: tenant` salts each tenant's prompts with vLLM's `cache_salt`; SGLang's OpenAI
 *   request models take no such field (unknown fields are dropped without an error), so a tenant
 *   could learn another's prompts through the cache while the config promised it could not.
 * - `admission.vllmPriority` sends vLLM's priority values (lower runs first); SGLang's scheduler
 *   runs higher values first unless started with --schedule-low-priority-values-first, so the
 *   same numbers would invert the classes.
 */
import type { z } from 'zod';
import { configuredWorkers } from '../workers.js';
import type { ConfigSections } from './sections.js';

type Ctx = z.RefinementCtx<ConfigSections>;

export function checkEngines(c: ConfigSections, ctx: Ctx): void {
  const sglangPools = new Set<string>();
  for (const { w, path, pool } of configuredWorkers(c)) {
    if ((w.engine ?? pool.engine ?? 'vllm') !== 'sglang') continue;
    sglangPools.add(pool.name);
    const isolated = c.pools.find((p) => p.name === pool.name)?.cacheIsolation === 'tenant' || c.workers.some((f) => f.pool === pool.name && f.cacheIsolation === 'tenant');
    if (isolated) {
      ctx.addIssue({
        code: 'custom',
        path: [...path, 'engine'],
        message: `pool '${pool.name}' has cacheIsolation: tenant, which needs vLLM's cache_salt; SGLang's OpenAI routes take none, so tenants' prompts would share its cache`,
      });
    }
  }
  const priorityPools = c.admission.vllmPriority.pools;
  for (const [i, name] of priorityPools.entries()) {
    const hit = name === '*' ? [...sglangPools][0] : sglangPools.has(name) ? name : undefined;
    if (hit === undefined) continue;
    ctx.addIssue({
      code: 'custom',
      path: ['admission', 'vllmPriority', 'pools', i],
      message: `pool '${hit}' runs SGLang, whose scheduler orders priority values the other way round from vLLM's: name the vLLM pools here, not ${name === '*' ? "'*'" : `'${name}'`}`,
    });
  }
}
