/**
 * Reading policy options: every tunable has a documented default; a value of the wrong type is
 * an error that names the option, never silently ignored.
 */
import type { PolicyOptions } from '../types.js';

export function numberOption(o: PolicyOptions | undefined, key: string, dflt: number, min = -Infinity): number {
  const v = o?.[key];
  if (v === undefined) return dflt;
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || Number.isNaN(n) || n < min) {
    throw new Error(`policy option '${key}' must be a number ≥ ${min}, got ${JSON.stringify(v)}`);
  }
  return n;
}

export function boolOption(o: PolicyOptions | undefined, key: string, dflt: boolean): boolean {
  const v = o?.[key];
  if (v === undefined) return dflt;
  if (typeof v === 'boolean') return v;
  if (v === 'true' || v === 'false') return v === 'true';
  throw new Error(`policy option '${key}' must be true or false, got ${JSON.stringify(v)}`);
}

export function choiceOption<T extends string>(o: PolicyOptions | undefined, key: string, choices: readonly T[], dflt: T): T {
  const v = o?.[key];
  if (v === undefined) return dflt;
  if (typeof v === 'string' && (choices as readonly string[]).includes(v)) return v as T;
  throw new Error(`policy option '${key}' must be one of ${choices.join(', ')}, got ${JSON.stringify(v)}`);
}
