/**
 * The fields a strict object of the config schema accepts, found by walking the schema along an
 * error's path: what "unknown field" errors suggest the nearest of (util/nearest-name.ts).
 */
import type { z } from 'zod';
import { nearestName } from './util/nearest-name.js';

/** The parts of zod 4's schema definitions the walk reads. */
interface Def {
  type: string;
  shape?: Record<string, z.ZodType>;
  innerType?: z.ZodType;
  element?: z.ZodType;
  in?: z.ZodType;
  options?: z.ZodType[];
  valueType?: z.ZodType;
  values?: unknown[];
  getter?: () => z.ZodType;
}

const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Wrappers that hold one schema inside (optional, defaults, refinements' pipes…). */
function unwrap(s: z.ZodType): z.ZodType {
  for (;;) {
    const d = defOf(s);
    if (d.innerType && d.type !== 'object') s = d.innerType;
    else if (d.type === 'pipe' && d.in) s = d.in;
    else if (d.type === 'lazy' && d.getter) s = d.getter();
    else return s;
  }
}

/** A union's alternatives that fit `value`: those whose literal fields (a policy's `name`) match it. */
function alternatives(options: z.ZodType[], value: unknown): z.ZodType[] {
  const fitting = options.filter((o) => {
    const shape = defOf(unwrap(o)).shape;
    if (!shape || value === null || typeof value !== 'object') return true;
    return Object.entries(shape).every(([k, f]) => {
      const lit = defOf(unwrap(f));
      if (lit.type !== 'literal') return true;
      const v = (value as Record<string, unknown>)[k];
      // A literal with a default (the default policy's name) fits a value that leaves it out.
      return (v === undefined && defOf(f).type === 'default') || (lit.values ?? []).includes(v);
    });
  });
  return fitting.length > 0 ? fitting : options;
}

/** The keys of the object schemas at `path` inside `schema`, given the input `value` at the root. */
export function knownKeysAt(schema: z.ZodType, path: readonly PropertyKey[], value: unknown): string[] {
  let here: z.ZodType[] = [schema];
  let v = value;
  for (const seg of path) {
    const next: z.ZodType[] = [];
    for (const s of here) {
      const d = defOf(unwrap(s));
      if (d.type === 'union' && d.options) next.push(...alternatives(d.options, v).map((o) => childOf(o, seg)).filter((c) => c !== undefined));
      else {
        const c = childOf(s, seg);
        if (c) next.push(c);
      }
    }
    here = next;
    v = v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[seg] : undefined;
  }
  const keys = new Set<string>();
  for (const s of here) {
    const d = defOf(unwrap(s));
    const objects = d.type === 'union' && d.options ? alternatives(d.options, v).map((o) => defOf(unwrap(o))) : [d];
    for (const o of objects) for (const k of Object.keys(o.shape ?? {})) keys.add(k);
  }
  return [...keys];
}

function childOf(s: z.ZodType, seg: PropertyKey): z.ZodType | undefined {
  const d = defOf(unwrap(s));
  if (d.type === 'object' && typeof seg === 'string') return d.shape?.[seg];
  if (d.type === 'array' && typeof seg === 'number') return d.element;
  if (d.type === 'record') return d.valueType;
  return undefined;
}

/** The message for a key the strict object at `path` does not know, with the nearest known key if one is close. */
export function unknownFieldMessage(schema: z.ZodType, path: readonly PropertyKey[], key: string, input: unknown): string {
  const near = nearestName(key, knownKeysAt(schema, path, input));
  return `unknown field '${key}'` + (near !== undefined ? `; did you mean '${near}'?` : '');
}
