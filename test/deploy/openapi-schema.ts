/**
 * A validator for a CustomResourceDefinition's `openAPIV3Schema` (a structural schema,
 * k8s.io/apiextensions-apiserver), enough for the schemas test/fixtures/crds/ vendors: types
 * (and x-kubernetes-int-or-string), properties and required, additionalProperties, items,
 * enum, pattern, lengths, ranges, counts of items and properties, list-type set/map
 * uniqueness, allOf/anyOf/oneOf/not. A field the schema does not declare is an error, as
 * `kubectl apply` (strict field validation, its default) makes it. The CEL rules
 * (x-kubernetes-validations) are not evaluated: no CEL here; the tests check the few that
 * concern the manifests by hand.
 */
import { parseAllDocuments } from 'yaml';

export interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: Schema | boolean;
  items?: Schema;
  enum?: unknown[];
  pattern?: string;
  format?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  minProperties?: number;
  maxProperties?: number;
  allOf?: Schema[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  not?: Schema;
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-list-type'?: string;
  'x-kubernetes-list-map-keys'?: string[];
}

/** A CRD file's kind and group, and the schema of each served version. */
export interface Crd {
  group: string;
  kind: string;
  versions: Map<string, Schema>;
}

export function readCrd(text: string): Crd {
  const doc = parseAllDocuments(text).map((d) => d.toJS()).find((d) => d?.kind === 'CustomResourceDefinition');
  if (!doc) throw new Error('no CustomResourceDefinition in the file');
  const versions = new Map<string, Schema>();
  for (const v of doc.spec.versions) if (v.served) versions.set(v.name, v.schema.openAPIV3Schema);
  return { group: doc.spec.group, kind: doc.spec.names.kind, versions };
}

const plain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const INT32 = 2 ** 31;

/** The problems of `value` against `schema`, one line each, naming the path (empty: valid). */
export function validate(schema: Schema, value: unknown, path = ''): string[] {
  const at = path === '' ? '/' : path;
  const out: string[] = [];
  if (value === undefined) return out;
  if (schema['x-kubernetes-int-or-string']) {
    if (!Number.isInteger(value) && typeof value !== 'string') out.push(`${at}: expected an integer or a string`);
  } else if (schema.type !== undefined && !hasType(schema.type, value)) {
    return [`${at}: expected ${schema.type}, got ${Array.isArray(value) ? 'array' : value === null ? 'null' : typeof value}`];
  }
  if (schema.enum && !schema.enum.some((e) => e === value)) out.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  if (typeof value === 'string') {
    const len = [...value].length;
    if (schema.minLength !== undefined && len < schema.minLength) out.push(`${at}: shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && len > schema.maxLength) out.push(`${at}: longer than ${schema.maxLength}`);
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(value)) out.push(`${at}: ${JSON.stringify(value)} does not match ${schema.pattern}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${at}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.push(`${at}: above ${schema.maximum}`);
    if (schema.format === 'int32' && (value < -INT32 || value >= INT32)) out.push(`${at}: not an int32`);
  }
  if (Array.isArray(value)) out.push(...validateArray(schema, value, at, path));
  if (plain(value)) out.push(...validateObject(schema, value, at, path));
  for (const s of schema.allOf ?? []) out.push(...validate(s, value, path));
  if (schema.anyOf && !schema.anyOf.some((s) => validate(s, value, path).length === 0)) out.push(`${at}: matches none of anyOf`);
  if (schema.oneOf && schema.oneOf.filter((s) => validate(s, value, path).length === 0).length !== 1) out.push(`${at}: does not match exactly one of oneOf`);
  if (schema.not && validate(schema.not, value, path).length === 0) out.push(`${at}: matches a schema it must not`);
  return out;
}

function hasType(type: string, v: unknown): boolean {
  switch (type) {
    case 'object':
      return plain(v);
    case 'array':
      return Array.isArray(v);
    case 'string':
      return typeof v === 'string';
    case 'integer':
      return Number.isInteger(v);
    case 'number':
      return typeof v === 'number';
    case 'boolean':
      return typeof v === 'boolean';
    default:
      return true;
  }
}

function validateArray(schema: Schema, value: unknown[], at: string, path: string): string[] {
  const out: string[] = [];
  if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${at}: fewer than ${schema.minItems} items`);
  if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push(`${at}: more than ${schema.maxItems} items`);
  if (schema.items) value.forEach((v, i) => out.push(...validate(schema.items!, v, `${path}/${i}`)));
  const listType = schema['x-kubernetes-list-type'];
  if (listType === 'set' || listType === 'map') {
    const keys = value.map((v) => (listType === 'map' ? JSON.stringify((schema['x-kubernetes-list-map-keys'] ?? []).map((k) => (v as Record<string, unknown>)[k])) : JSON.stringify(v)));
    if (new Set(keys).size !== keys.length) out.push(`${at}: duplicate entries in a list of type ${listType}`);
  }
  return out;
}

function validateObject(schema: Schema, value: Record<string, unknown>, at: string, path: string): string[] {
  const out: string[] = [];
  const n = Object.keys(value).length;
  if (schema.minProperties !== undefined && n < schema.minProperties) out.push(`${at}: fewer than ${schema.minProperties} properties`);
  if (schema.maxProperties !== undefined && n > schema.maxProperties) out.push(`${at}: more than ${schema.maxProperties} properties`);
  for (const r of schema.required ?? []) if (!(r in value)) out.push(`${at}: missing required field '${r}'`);
  for (const [k, v] of Object.entries(value)) {
    const p = schema.properties?.[k];
    if (p) out.push(...validate(p, v, `${path}/${k}`));
    else if (plain(schema.additionalProperties)) out.push(...validate(schema.additionalProperties, v, `${path}/${k}`));
    // `metadata` at the root is declared as a bare object: the API server checks it as ObjectMeta.
    else if (schema.properties && !schema['x-kubernetes-preserve-unknown-fields'] && schema.additionalProperties !== true) out.push(`${at}: unknown field '${k}'`);
  }
  return out;
}
