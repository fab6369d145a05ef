/**
 * The named policies. The built-in ones are listed here explicitly, in listing order; the gateway
 * (`policy.name` in the config) and `kvgate bench --policy` find them by the same name.
 */
import { dynamoPolicy } from './policies/dynamo.js';
import { kvgatePolicy, oraclePolicy } from './policies/kvgate.js';
import { leastLoadPolicy } from './policies/least-load.js';
import { llmdPolicy } from './policies/llm-d.js';
import { oracleGreedyPolicy } from './policies/oracle-greedy.js';
import { randomPolicy } from './policies/random.js';
import { roundRobinPolicy } from './policies/round-robin.js';
import { sglangCacheAwarePolicy } from './policies/sglang-cache-aware.js';
import type { Policy, PolicyDefinition, PolicyOptions } from './types.js';

export type { PolicyDefinition, PolicyOptions };

export const BUILTIN_POLICIES: readonly PolicyDefinition[] = [
  kvgatePolicy,
  sglangCacheAwarePolicy,
  llmdPolicy,
  dynamoPolicy,
  oraclePolicy,
  oracleGreedyPolicy,
  roundRobinPolicy,
  randomPolicy,
  leastLoadPolicy,
];

const byName = new Map(BUILTIN_POLICIES.map((d) => [d.name, d]));

/** The definition of policy `name`; throws naming the known policies if there is none. */
export function policyDefinition(name: string): PolicyDefinition {
  const d = byName.get(name);
  if (!d) throw new Error(`unknown policy '${name}' (known: ${policyNames().join(', ')})`);
  return d;
}

export function createPolicy(name: string, options?: PolicyOptions): Policy {
  return policyDefinition(name).create(options);
}

export function policyNames(): string[] {
  return BUILTIN_POLICIES.map((d) => d.name);
}

export function describePolicies(): Array<{ name: string; description: string }> {
  return BUILTIN_POLICIES.map((d) => ({ name: d.name, description: d.description }));
}
