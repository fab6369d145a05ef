/** kubernetes-models' validation made strict: a field the schema does not know fails too. */

export interface Validatable {
  validate(): void;
}

/**
 * Validates `obj` with the model's schema, and fails on fields the schema never looked at: the
 * generated validators read only the properties they know (the schemas do not forbid others), so
 * every property read is recorded through a Proxy and any other one is unknown.
 */
export function validateStrict(Model: new (data: any) => Validatable, obj: any): string[] {
  const all = new Set<string>();
  const seen = new Set<string>();
  const track = (v: any, path: string): any => {
    if (v === null || typeof v !== 'object') return v;
    if (!Array.isArray(v)) for (const k of Object.keys(v)) all.add(`${path}/${k}`);
    return new Proxy(v, {
      get(t, k, r) {
        if (typeof k === 'string' && Object.hasOwn(t, k)) {
          if (!Array.isArray(t)) seen.add(`${path}/${k}`);
          return track(t[k], `${path}/${k}`);
        }
        return Reflect.get(t, k, r);
      },
    });
  };
  // The model deep-copies its input (reading every field), so the tracking goes on the copy.
  const m = new Model(obj) as unknown as Record<string, unknown> & Validatable;
  for (const k of Object.keys(m)) if (k !== 'apiVersion' && k !== 'kind') m[k] = track(m[k], `/${k}`);
  m.validate();
  return [...all].filter((p) => !seen.has(p));
}

