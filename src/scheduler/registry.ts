/**
 * The named policies. The built-in ones are listed here explicitly, in listing order; the gateway
 * (`policy.name` in the config) and `kvgate bench --policy` find them by the same name.
 */
import { formatPath } from '../util/field-path.js';
import { aibrixPolicy } from './policies/aibrix.js';
import { dynamoApproxPolicy } from './policies/dynamo-approx.js';
import { dynamoPolicy } from './policies/dynamo.js';
import { kvgatePolicy, oraclePolicy } from './policies/kvgate/index.js';
import { leastLoadPolicy } from './policies/least-load.js';
import { knobsOf, type KnobInfo } from './policies/knobs.js';
import { llmdLegacyPolicy } from './policies/llm-d-legacy.js';
import { llmdPrecisePolicy } from './policies/llm-d-precise.js';
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
  llmdPrecisePolicy,
  llmdLegacyPolicy,
  dynamoPolicy,
  dynamoApproxPolicy,
  aibrixPolicy,
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
  if (!d) throw new Error(unknownPolicyMessage(name));
  return d;
}

/**
 * A fresh policy `name` with `options` (as written in the config; omitted knobs take their
 * defaults). Throws naming the policy and the offending option if an option is unknown or bad.
 */
export function createPolicy(name: string, options: PolicyOptions = {}): Policy {
  const d = policyDefinition(name);
  const r = d.options.safeParse(options);
  if (!r.success) {
    const problems = r.error.issues.map((i) => (i.path.length > 0 ? `${formatPath(i.path)}: ${i.message}` : i.message));
    throw new Error(`policy '${name}' options: ${problems.join('; ')}`);
  }
  return d.create(r.data);
}

export function unknownPolicyMessage(name: unknown): string {
  const shown = typeof name === 'string' ? `'${name}'` : JSON.stringify(name) ?? String(name);
  return `unknown policy ${shown} (known: ${policyNames().join(', ')})`;
}

export function policyNames(): string[] {
  return BUILTIN_POLICIES.map((d) => d.name);
}

export interface PolicyListing {
  name: string;
  description: string;
  options: KnobInfo[];
  /** An earlier-listed policy declared with the very same options (oracle: kvgate's). */
  sameOptionsAs?: string;
}

/** Every policy with its description and its options' defaults, for listings. */
export function describePolicies(): PolicyListing[] {
  return BUILTIN_POLICIES.map((d, i) => {
    const listing: PolicyListing = { name: d.name, description: d.description, options: knobsOf(d.options, d.knobGroups) };
    const same = BUILTIN_POLICIES.slice(0, i).find((e) => e.options === d.options);
    if (same) listing.sameOptionsAs = same.name;
    return listing;
  });
}
