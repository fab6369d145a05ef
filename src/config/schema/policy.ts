/** `policy`: the routing policy and its options, checked against the policy's own schema. */
import { z } from 'zod';
import { BUILTIN_POLICIES, unknownPolicyMessage, type PolicyDefinition } from '../../scheduler/registry.js';

/** The routing policy used when the config names none. */
export const DEFAULT_POLICY_NAME = 'kvgate';

/**
 * `policy`: one alternative per registered policy, told apart by `name`, whose `options` are
 * checked against that policy's own schema (defaults filled in), so a bad or unknown option fails
 * here like any other field.
 */
function policyAlternative(d: PolicyDefinition) {
  return z.strictObject({
    name: d.name === DEFAULT_POLICY_NAME ? z.literal(d.name).default(d.name) : z.literal(d.name),
    options: d.options.prefault({}),
    seed: z.int().optional(),
  });
}
type PolicyAlternative = ReturnType<typeof policyAlternative>;

const policySchema = z.discriminatedUnion(
  'name',
  BUILTIN_POLICIES.map(policyAlternative) as [PolicyAlternative, ...PolicyAlternative[]],
  {
    error: (iss) => (iss.code === 'invalid_union' ? unknownPolicyMessage((iss.input as { name?: unknown } | null | undefined)?.name) : undefined),
  },
);

export const policySection = policySchema.prefault({ name: DEFAULT_POLICY_NAME });
