/**
 * The alert rules in deploy/kubernetes/prometheusrule.yaml do what their summaries say: the rule
 * tests in prometheusrule.promtool.yaml run under Prometheus's own evaluator (`promtool test rules`,
 * Debian's `prometheus` package), and every alert has a case there. Without promtool the test is
 * skipped with the reason printed — except in CI (CI=true), where that is an error.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const RULES = join(ROOT, 'deploy/kubernetes/prometheusrule.yaml');
const RULE_TESTS = join(ROOT, 'test/deploy/prometheusrule.promtool.yaml');

/** false if promtool can run, else why the test is skipped. Throws in CI without promtool. */
function promtoolSkip(): string | false {
  if (spawnSync('promtool', ['--version']).status === 0) return false;
  const why = 'promtool is not installed (Debian: apt-get install prometheus)';
  if (process.env.CI === 'true') throw new Error(`CI=true but ${why}: the alert rule tests must run in CI`);
  return `${why}; the alert rule tests are skipped`;
}

interface Rule {
  alert?: string;
  record?: string;
}

const rules = parseYaml(readFileSync(RULES, 'utf8')) as { spec: { groups: { name: string; rules: Rule[] }[] } };
const ruleTests = parseYaml(readFileSync(RULE_TESTS, 'utf8')) as { tests: { name: string; alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[] };

test('every alert in deploy/ has a promtool case where it fires', () => {
  const alerts = rules.spec.groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));
  assert.ok(alerts.length >= 10, `only ${alerts.length} alerts read: is the rule file's shape still spec.groups[].rules[]?`);
  const fired = new Set(ruleTests.tests.flatMap((t) => (t.alert_rule_test ?? []).filter((c) => c.exp_alerts.length > 0).map((c) => c.alertname)));
  assert.deepEqual(alerts.filter((a) => !fired.has(a)), [], 'alerts no rule test sees firing');
  assert.ok(ruleTests.tests.some((t) => t.name === 'a crashed worker alerts'));
});

test('the alert rules pass their promtool rule tests', { skip: promtoolSkip() }, () => {
  // promtool reads plain Prometheus rule files: the PrometheusRule's groups, beside the tests.
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-rules-'));
  try {
    writeFileSync(join(dir, 'rules.yaml'), JSON.stringify({ groups: rules.spec.groups }));
    copyFileSync(RULE_TESTS, join(dir, 'tests.yaml'));
    const r = spawnSync('promtool', ['test', 'rules', join(dir, 'tests.yaml')], { encoding: 'utf8' });
    assert.equal(r.status, 0, `promtool test rules failed:\n${r.stdout}${r.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
