/**
 * The table of named policies. Kept apart from policies.ts so modules that register policies can
 * import it without an import cycle.
 */
import type { Policy } from './types.js';

/** Options a policy factory may read; unknown keys are ignored by policies that do not use them. */
export type PolicyOptions = Record<string, unknown>;
export type PolicyFactory = (options?: PolicyOptions) => Policy;

const registry = new Map<string, { factory: PolicyFactory; description: string }>();

export function registerPolicy(name: string, description: string, factory: PolicyFactory): void {
  registry.set(name, { factory, description });
}

export function createPolicy(name: string, options?: PolicyOptions): Policy {
  const entry = registry.get(name);
  if (!entry) {
    throw new Error(`unknown policy '${name}' (known: ${[...registry.keys()].join(', ')})`);
  }
  return entry.factory(options);
}

export function policyNames(): string[] {
  return [...registry.keys()];
}

export function describePolicies(): Array<{ name: string; description: string }> {
  return [...registry].map(([name, e]) => ({ name, description: e.description }));
}
