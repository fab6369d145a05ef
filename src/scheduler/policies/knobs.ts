/**
 * Building blocks of the policies' option schemas. Each policy declares its options once, as a
 * zod object of knobs with defaults and a one-line description; that schema is what the config
 * (`policy.options`) is validated against at load, what createPolicy parses, and what
 * `kvgate bench --list` and examples/kvgate.yaml show. Unknown keys are errors.
 *
 * Numbers may be written as numeric strings ("5000", "Infinity"), booleans as "true"/"false", as
 * environment-style configs write them.
 */
import { z } from 'zod';
import { PREFIX_INDEX_DEFAULTS } from '../index/prefix-index.js';
import type { KnobGroup } from '../types.js';

/** A numeric string as its number; anything else (including text that is not a number) as is. */
function numeric(v: unknown): unknown {
  if (typeof v !== 'string' || v.trim() === '') return v;
  const n = Number(v);
  return Number.isNaN(n) ? v : n;
}

/**
 * A number ≥ `min` (default 0), finite unless `infinite` (then Infinity reads as "never" or
 * "unbounded"), at most `max` if given.
 */
export function numberKnob(
  dflt: number,
  description: string,
  opts: { min?: number; max?: number; infinite?: boolean } = {},
) {
  const min = opts.min ?? 0;
  const max = opts.max ?? Infinity;
  const infinite = opts.infinite === true;
  // JSON has no Infinity: a JSON config writes it as the string "Infinity" (YAML: .inf).
  const expected = `a number ≥ ${min}${max < Infinity ? ` and ≤ ${max}` : ''}${infinite ? ' (or Infinity: .inf in YAML, "Infinity" in JSON)' : ''}`;
  return z
    .preprocess(
      numeric,
      z.custom<number>(
        (v) => typeof v === 'number' && v >= min && v <= max && (infinite || Number.isFinite(v)),
        { error: (iss) => `expected ${expected}, got ${show(iss.input)}` },
      ),
    )
    .default(dflt)
    .describe(description);
}

export function booleanKnob(dflt: boolean, description: string) {
  return z
    .preprocess(
      (v) => (v === 'true' ? true : v === 'false' ? false : v),
      z.boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` }),
    )
    .default(dflt)
    .describe(description);
}

/**
 * One of `choices`. `removed`: choices that no longer exist, each with the error to give a config
 * that still names it.
 */
export function choiceKnob<const T extends readonly [string, ...string[]]>(
  choices: T,
  dflt: T[number],
  description: string,
  removed: Readonly<Record<string, string>> = {},
) {
  return z
    .enum(choices, {
      error: (iss) =>
        (typeof iss.input === 'string' && Object.hasOwn(removed, iss.input) ? removed[iss.input] : undefined) ??
        `expected one of ${choices.join(', ')}, got ${show(iss.input)}`,
    })
    .default(dflt)
    .describe(description);
}

/** Knobs that no longer exist, so that knobsOf leaves them out of listings. */
const REMOVED_KNOBS = new WeakSet<z.ZodType>();

/**
 * A knob that was removed: absent is fine, any value fails with `message` (which should say what
 * to do instead), rather than with "unrecognized key".
 */
export function removedKnob(message: string) {
  const s = z.custom<never>(() => false, { error: () => message }).optional();
  REMOVED_KNOBS.add(s);
  return s;
}

/** Knobs of a policy that keeps a PrefixIndex, with the index's defaults. */
export const indexKnobs = {
  indexMaxBytes: numberKnob(PREFIX_INDEX_DEFAULTS.maxBytes, 'prefix index memory bound, bytes', { min: 1024 }),
  maxWorkers: numberKnob(PREFIX_INDEX_DEFAULTS.maxWorkers, 'most workers the prefix index tracks at once', {
    min: 1,
    max: 65535,
  }),
};

function show(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (typeof v === 'number') return String(v);
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/**
 * Policy.retune for a policy that reads its options object at decision time: the new values are
 * copied into `current` unless one of `fixed` (knobs that shaped the policy's structures when it
 * was created: an index size, a block size) differs, in which case nothing changes.
 */
export function retuneInPlace<O extends object>(current: O, next: Record<string, unknown>, fixed: readonly (keyof O & string)[]): boolean {
  if (fixed.some((k) => JSON.stringify(next[k]) !== JSON.stringify(current[k]))) return false;
  Object.assign(current, next);
  return true;
}

/** One knob as listings show it. */
export interface KnobInfo {
  name: string;
  default: unknown;
  description: string;
  /** The title of the knob's group, for a policy that groups its knobs (PolicyDefinition.knobGroups). */
  group?: string;
}

/**
 * The knobs of an option schema with their defaults, in declaration order, or group by group
 * when `groups` is given (knobs in no group last). Removed knobs are left out.
 */
export function knobsOf(schema: z.ZodObject, groups: readonly KnobGroup[] = []): KnobInfo[] {
  const defaults = schema.parse({});
  const knobs: KnobInfo[] = Object.entries(schema.shape)
    .filter(([, s]) => !REMOVED_KNOBS.has(s as z.ZodType))
    .map(([name, s]) => ({
      name,
      default: defaults[name],
      description: (s as z.ZodType).description ?? '',
    }));
  if (groups.length === 0) return knobs;
  const byName = new Map(knobs.map((k) => [k.name, k]));
  const grouped: KnobInfo[] = [];
  for (const g of groups) {
    for (const name of g.knobs) {
      const k = byName.get(name);
      if (!k) throw new Error(`knob group ${g.name} names ${name}, which is no knob`);
      byName.delete(name);
      grouped.push({ ...k, group: `${g.name}: ${g.title}` });
    }
  }
  return [...grouped, ...byName.values()];
}

/** A default as YAML would write it (Infinity as .inf, strings unquoted). */
export function formatKnobValue(v: unknown): string {
  if (v === Infinity) return '.inf';
  return typeof v === 'string' ? v : JSON.stringify(v);
}
