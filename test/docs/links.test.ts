import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { anchors, brokenReason, markdownFiles, relativeLinks, ROOT, slug } from './markdown-links.js';

test('every relative link and #anchor in the repository’s markdown resolves', () => {
  const files = markdownFiles();
  assert.ok(files.some((f) => f.endsWith('README.md')), 'found no README.md');
  const broken: string[] = [];
  let checked = 0;
  for (const file of files) {
    for (const link of relativeLinks(readFileSync(file, 'utf8'))) {
      checked++;
      const why = brokenReason(file, link.target);
      if (why) broken.push(`${relative(ROOT, file)}:${link.line}: ${link.target} (${why})`);
    }
  }
  assert.ok(checked > 100, `only ${checked} links checked`);
  assert.deepEqual(broken, []);
});

test('anchors follow GitHub’s slugs: punctuation dropped, spaces to hyphens, repeats numbered, code ignored', () => {
  assert.equal(slug('Capacity at SLO first'), 'capacity-at-slo-first');
  assert.equal(slug('In the fleet simulation: `kvgate bench --spec-mode`'), 'in-the-fleet-simulation-kvgate-bench---spec-mode');
  assert.equal(slug('Servers that take speculation settings per request (llama.cpp)'), 'servers-that-take-speculation-settings-per-request-llamacpp');
  assert.equal(slug('Gateway replicas (`--replicas`, src/sim/replicas.ts)'), 'gateway-replicas---replicas-srcsimreplicasts');
  const a = anchors('# Title\n## Notes\n```sh\n# not a heading\n```\n## Notes\n<a id="custom"></a>\n');
  assert.deepEqual([...a].sort(), ['custom', 'notes', 'notes-1', 'title']);
});

test('a missing file, a missing heading and a link inside code are told apart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-links-'));
  mkdirSync(join(dir, 'docs'));
  writeFileSync(join(dir, 'docs', 'a.md'), '# A\n## Known heading\n');
  const readme = join(dir, 'README.md');
  writeFileSync(readme, '[ok](docs/a.md#known-heading) [gone](docs/b.md) [typo](docs/a.md#unknown) [self](#top)\n`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n# Top\n');
  const links = relativeLinks(readFileSync(readme, 'utf8')).map((l) => l.target);
  assert.deepEqual(links, ['docs/a.md#known-heading', 'docs/b.md', 'docs/a.md#unknown', '#top']);
  assert.equal(brokenReason(readme, 'docs/a.md#known-heading', dir), null);
  assert.match(brokenReason(readme, 'docs/b.md', dir) ?? '', /does not exist/);
  assert.match(brokenReason(readme, 'docs/a.md#unknown', dir) ?? '', /no heading/);
  assert.equal(brokenReason(readme, '#top', dir), null);
});

test('every docs/ page (and #anchor) named in the code, the benchmarks and the example configs exists', () => {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.(ts|ya?ml)$/.test(name)) files.push(p);
    }
  };
  for (const dir of ['src', 'benchmarks', 'examples', 'deploy']) walk(join(ROOT, dir));
  const broken: string[] = [];
  let checked = 0;
  for (const file of files) {
    for (const m of readFileSync(file, 'utf8').matchAll(/(?<![\w/.-])docs\/[\w./-]+?\.md(?:#[\w-]+)?/g)) {
      checked++;
      const why = brokenReason(join(ROOT, 'README.md'), m[0]);
      if (why) broken.push(`${relative(ROOT, file)}: ${m[0]} (${why})`);
    }
  }
  assert.ok(checked >= 10, `only ${checked} references found`);
  assert.deepEqual(broken, []);
});
