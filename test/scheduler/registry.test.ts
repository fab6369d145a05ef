import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { kvgateOptions, type KvgatePolicy } from '../../src/scheduler/policies/kvgate/index.js';
import { BUILTIN_POLICIES, createPolicy, describePolicies, policyDefinition, policyNames } from '../../src/scheduler/registry.js';

test('the built-in policies are listed once each, by name, and each creates a policy of that name', () => {
  const names = BUILTIN_POLICIES.map((d) => d.name);
  assert.deepEqual(policyNames(), names);
  assert.equal(new Set(names).size, names.length);
  for (const n of ['round-robin', 'random', 'least-load', 'kvgate', 'oracle', 'sglang-cache-aware', 'llm-d', 'llm-d-precise', 'llm-d-legacy', 'dynamo', 'dynamo-approx', 'oracle-greedy']) {
    assert.ok(names.includes(n), n);
    assert.equal(createPolicy(n).name, n);
  }
  assert.throws(() => createPolicy('nope'), /^Error: unknown policy 'nope' \(known: kvgate, .*least-load\)$/);
  assert.throws(() => policyDefinition('nope'), /unknown policy 'nope'/);
});

test('options left out take the defaults their schema declares; given ones are used, numeric strings too', () => {
  const dflt = (createPolicy('kvgate') as KvgatePolicy).params;
  assert.deepEqual(dflt, kvgateOptions.parse({}));
  assert.equal(dflt.predictedTtlMs, 15_000);
  assert.equal(dflt.approxTtlMs, Infinity);
  const p = (createPolicy('kvgate', { wPrefix: 2, predictedTtlMs: '5000', learnPrefillRate: 'false', approxTtlMs: 'Infinity' }) as KvgatePolicy).params;
  assert.deepEqual(
    { wPrefix: p.wPrefix, predictedTtlMs: p.predictedTtlMs, learnPrefillRate: p.learnPrefillRate, approxTtlMs: p.approxTtlMs, wTtft: p.wTtft },
    { wPrefix: 2, predictedTtlMs: 5000, learnPrefillRate: false, approxTtlMs: Infinity, wTtft: 1 },
  );
  assert.equal((createPolicy('kvgate', { predictedTtlMs: 1000 }) as KvgatePolicy).prefixIndex.predictedTtlMs, 1000);
  assert.equal(createPolicy('llm-d-legacy', { scrapeIntervalMs: 200 }).scrapeIntervalMs, 200);
});

test('an unknown or bad option is an error naming the policy and the option', () => {
  const cases: Array<{ name: string; options: Record<string, unknown>; error: RegExp }> = [
    { name: 'kvgate', options: { spillRelative: 'lots' }, error: /policy 'kvgate' options: spillRelative: expected a number ≥ 0, got "lots"$/ },
    { name: 'kvgate', options: { spillRelative: -1 }, error: /spillRelative: expected a number ≥ 0, got -1/ },
    { name: 'kvgate', options: { prefillTokensPerSec: 0 }, error: /prefillTokensPerSec: expected a number ≥ 1/ },
    { name: 'kvgate', options: { indexMaxBytes: Infinity }, error: /indexMaxBytes: expected a number ≥ 1024, got Infinity/ },
    { name: 'kvgate', options: { maxWorkers: 70_000 }, error: /maxWorkers: expected a number ≥ 1 and ≤ 65535/ },
    { name: 'kvgate', options: { learnPrefillRate: 'yes' }, error: /learnPrefillRate: expected true or false, got "yes"/ },
    { name: 'kvgate', options: { whenNoneFits: 'some' }, error: /whenNoneFits: expected one of all, least-overfull, got "some"/ },
    { name: 'kvgate', options: { wprefix: 2 }, error: /policy 'kvgate' options: Unrecognized key: "wprefix"$/ },
    { name: 'oracle', options: { queueWeight: 2 }, error: /policy 'oracle' options: Unrecognized key: "queueWeight"$/ },
    { name: 'round-robin', options: { seed: 1 }, error: /policy 'round-robin' options: Unrecognized key: "seed"$/ },
    { name: 'dynamo-approx', options: { cacheWindowMs: null }, error: /cacheWindowMs: expected a number ≥ 0 \(or Infinity: \.inf in YAML, "Infinity" in JSON\), got null/ },
    { name: 'dynamo', options: { cacheWindowMs: 1000 }, error: /policy 'dynamo' options: Unrecognized key: "cacheWindowMs"$/ },
    { name: 'dynamo', options: { overlapScoreCredit: 1.5 }, error: /overlapScoreCredit: expected a number ≥ 0 and ≤ 1, got 1.5/ },
    { name: 'dynamo', options: { assumeKvReuse: 'yes' }, error: /assumeKvReuse: expected true or false, got "yes"/ },
  ];
  for (const c of cases) assert.throws(() => createPolicy(c.name, c.options), c.error, JSON.stringify(c));
});

test('listings show each policy’s options with their defaults; oracle shares kvgate’s', () => {
  const listed = new Map(describePolicies().map((p) => [p.name, p]));
  const kvgate = listed.get('kvgate')!;
  // Every knob but the removed one (readHeadroom), each in one of the seven groups, group by group.
  assert.equal(kvgate.options.length, Object.keys(kvgateOptions.shape).length - 1);
  assert.ok(!kvgate.options.some((k) => k.name === 'readHeadroom'));
  const groups = kvgate.options.map((k) => k.group!.split(':')[0]);
  assert.deepEqual([...new Set(groups)], ['weights', 'picker', 'decode', 'stall', 'kvFit', 'learning', 'index']);
  assert.deepEqual(kvgate.options.slice(0, 2).map((k) => k.name), ['wPrefix', 'wTtft']);
  assert.deepEqual(kvgate.options.find((k) => k.name === 'predictedTtlMs')?.default, 15_000);
  assert.ok(kvgate.options.every((k) => k.description.length > 0));
  assert.equal(listed.get('oracle')!.sameOptionsAs, 'kvgate');
  assert.equal(listed.get('kvgate')!.sameOptionsAs, undefined);
  assert.deepEqual(listed.get('round-robin')!.options, []);
  assert.deepEqual(
    listed.get('oracle-greedy')!.options.map((k) => [k.name, k.default]),
    [['prefillTokensPerSec', 10_000], ['decodeMsPerRunning', 0.5]],
  );
});

test('examples/kvgate.yaml documents every option of every policy with its default', () => {
  const text = readFileSync(new URL('../../../examples/kvgate.yaml', import.meta.url), 'utf8');
  const example = parseYaml(text) as { policy: { name: string; options: Record<string, unknown> } };
  // The selected policy's options are set, each to its default.
  assert.equal(example.policy.name, 'kvgate');
  assert.deepEqual(example.policy.options, kvgateOptions.parse({}));
  // The others are commented out below it: `  # <names>:` then `  #   <option>: <default>` lines.
  const blocks = new Map<string, Record<string, unknown>>();
  let current: Record<string, unknown> | null = null;
  for (const line of text.split('\n')) {
    const head = /^ {2}# ([a-z-]+)[^:]*:\s*(.*)$/.exec(line);
    const knob = /^ {2}# {3}(\w+): (\S+)/.exec(line);
    if (knob && current) current[knob[1]!] = parseYaml(knob[2]!);
    else if (head && !line.startsWith('  #   ')) blocks.set(head[1]!, (current = {}));
  }
  for (const p of describePolicies()) {
    const expected = Object.fromEntries(p.options.map((k) => [k.name, k.default]));
    if (p.name === 'kvgate' || p.options.length === 0) continue;
    if (p.sameOptionsAs !== undefined) {
      assert.match(text, new RegExp(`# ${p.name}\\b.*the options of ${p.sameOptionsAs}`), p.name);
      continue;
    }
    assert.deepEqual(blocks.get(p.name), expected, p.name);
  }
  assert.match(text, /# round-robin, random, least-load: no options\./);
});
