import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { configSchema } from '../../src/config/index.js';
import { ROOT } from './markdown-links.js';

test('docs/configuration.md has a row for every top-level section of the config schema', () => {
  const page = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');
  const sections = Object.keys(configSchema.shape);
  assert.ok(sections.length > 10);
  const missing = sections.filter((k) => !page.includes(`| \`${k}\` |`));
  assert.deepEqual(missing, [], 'sections of the config schema (src/config/schema/sections.ts) without a row in docs/configuration.md');
});

test('docs/policy.md has a row for every knob of the kvgate policy', async () => {
  // The knobs `bench --list` shows: a removed knob stays in the schema only to say it was removed.
  const { describePolicies } = await import('../../src/scheduler/registry.js');
  const page = readFileSync(join(ROOT, 'docs', 'policy.md'), 'utf8');
  const knobs = describePolicies().find((p) => p.name === 'kvgate')!.options.map((k) => k.name);
  assert.ok(knobs.length > 10);
  const missing = knobs.filter((k) => !page.includes(`| \`${k}\` |`));
  assert.deepEqual(missing, [], 'knobs of src/scheduler/policies/kvgate/knobs.ts without a row in docs/policy.md');
});
