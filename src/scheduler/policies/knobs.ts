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
  const expected = `a number ≥ ${min}${max < Infinity ? ` and ≤ ${max}` : ''}${infinite ? ' (or Infinity)' : ''}`;
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

export function choiceKnob<const T extends readonly [string, ...string[]]>(choices: T, dflt: T[number], description: string) {
  return z
    .enum(choices, { error: (iss) => `expected one of ${choices.join(', ')}, got ${show(iss.input)}` })
    .default(dflt)
    .describe(description);
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

/** One knob as listings show it. */
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

export interface KnobInfo {
  name: string;
  default: unknown;
  description: string;
}

/** The knobs of an option schema with their defaults, in declaration order. */
export function knobsOf(schema: z.ZodObject): KnobInfo[] {
  const defaults = schema.parse({}) as Record<string, unknown>;
  return Object.entries(schema.shape).map(([name, s]) => ({
    name,
    default: defaults[name],
    description: (s as z.ZodType).description ?? '',
  }));
}

/** A default as YAML would write it (Infinity as .inf, strings unquoted). */
export function formatKnobValue(v: unknown): string {
  if (v === Infinity) return '.inf';
  return typeof v === 'string' ? v : JSON.stringify(v);
}
