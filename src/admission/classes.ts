/**
 * Priority classes, as in the Gateway API Inference Extension's InferenceObjective criticality:
 * `critical` traffic keeps its SLO, `standard` is queued under pressure, `sheddable` is the first
 * to be refused. Each tenant has a default class; a request may lower it (never raise it) with
 * the `x-kvgate-priority` header or the body's integer `priority`.
 *
 * vLLM's priority scheduling (`--scheduling-policy priority`) takes an integer per request,
 * lower served first. `DEFAULT_VLLM_PRIORITY` is the mapping kvgate uses when it passes the class
 * on (configurable: `admission.vllmPriority`), and the one that reads integers back into classes
 * (bench traces, the body's `priority`): an integer up to critical's value is critical, up to
 * standard's is standard, anything larger is sheddable.
 */

export const PRIORITY_CLASSES = ['critical', 'standard', 'sheddable'] as const;
export type PriorityClass = (typeof PRIORITY_CLASSES)[number];

/** 0 = most important. */
export const CLASS_RANK: Readonly<Record<PriorityClass, number>> = { critical: 0, standard: 1, sheddable: 2 };

export type VllmPriorityMap = Readonly<Record<PriorityClass, number>>;

export const DEFAULT_VLLM_PRIORITY: VllmPriorityMap = { critical: 0, standard: 1, sheddable: 2 };

export function isPriorityClass(v: unknown): v is PriorityClass {
  return v === 'critical' || v === 'standard' || v === 'sheddable';
}

/** The class of a vLLM integer priority under `map`. */
export function classOfVllmPriority(p: number, map: VllmPriorityMap = DEFAULT_VLLM_PRIORITY): PriorityClass {
  if (p <= map.critical) return 'critical';
  if (p <= map.standard) return 'standard';
  return 'sheddable';
}

/**
 * A class name or a vLLM integer ("sheddable", "2", " Critical "), or null if it is neither.
 */
export function parsePriority(v: string | number, map: VllmPriorityMap = DEFAULT_VLLM_PRIORITY): PriorityClass | null {
  if (typeof v === 'number') return Number.isInteger(v) ? classOfVllmPriority(v, map) : null;
  const s = v.trim().toLowerCase();
  if (isPriorityClass(s)) return s;
  if (/^[+-]?\d{1,9}$/.test(s)) return classOfVllmPriority(Number(s), map);
  return null;
}

/** The less important of the two: a request may lower its tenant's class, never raise it. */
export function lowerOnly(tenantClass: PriorityClass, asked: PriorityClass | null | undefined): PriorityClass {
  if (!asked) return tenantClass;
  return CLASS_RANK[asked] > CLASS_RANK[tenantClass] ? asked : tenantClass;
}

/**
 * Parses a mix such as `critical=0.2,standard=0.3,sheddable=0.5` (weights normalised to sum 1;
 * classes not named get 0). Throws with a readable message.
 */
export function parsePriorityMix(text: string): Record<PriorityClass, number> {
  const mix: Record<PriorityClass, number> = { critical: 0, standard: 0, sheddable: 0 };
  for (const part of text.split(',')) {
    const m = /^\s*([a-z]+)\s*=\s*([0-9.]+)\s*$/i.exec(part);
    if (!m) throw new Error(`bad priority mix entry '${part}': expected class=weight`);
    const cls = m[1]!.toLowerCase();
    if (!isPriorityClass(cls)) throw new Error(`unknown priority class '${m[1]}' (known: ${PRIORITY_CLASSES.join(', ')})`);
    const w = Number(m[2]);
    if (!Number.isFinite(w) || w < 0) throw new Error(`bad weight '${m[2]}' for ${cls}`);
    mix[cls] = w;
  }
  const sum = mix.critical + mix.standard + mix.sheddable;
  if (!(sum > 0)) throw new Error('a priority mix needs a positive weight');
  for (const c of PRIORITY_CLASSES) mix[c] /= sum;
  return mix;
}

/** The class that a uniform draw u in [0,1) falls into under `mix` (cumulative, in class order). */
export function classOfDraw(mix: Readonly<Record<PriorityClass, number>>, u: number): PriorityClass {
  let acc = 0;
  for (const c of PRIORITY_CLASSES) {
    acc += mix[c];
    if (u < acc) return c;
  }
  // Rounding: the last class with a positive weight.
  for (let i = PRIORITY_CLASSES.length - 1; i >= 0; i--) if (mix[PRIORITY_CLASSES[i]!] > 0) return PRIORITY_CLASSES[i]!;
  return 'standard';
}
