/**
 * `npm run bench -- chart --out FILE.png [kvgate bench arguments]`: runs `kvgate bench --capacity`
 * with the given arguments, writes its HTML report, and saves the report's "SLO attainment vs
 * offered rate" chart as a PNG (the image in docs/benchmarks.md), rendered by a
 * headless Chromium driven by playwright-core — the browser the dashboard tests use
 * (KVGATE_CHROMIUM, else /usr/bin/chromium; Debian: apt-get install chromium).
 *
 * Example (the chart in docs/benchmarks.md):
 *   npm run bench -- chart --out docs/capacity.png --workload shared-prefix --size 2000 --seed 5 \
 *     --workers 8 --policy round-robin,sglang-cache-aware,llm-d,llm-d-precise,dynamo,kvgate,oracle
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';

const HELP = `npm run bench -- chart --out FILE.png [kvgate bench arguments]

Runs kvgate bench --capacity with the given arguments and saves the HTML report's
"SLO attainment vs offered rate" chart as a PNG. Needs Chromium (KVGATE_CHROMIUM, else
/usr/bin/chromium). See kvgate bench --help for the bench arguments.
`;

const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.js');

async function main(argv: string[]): Promise<number> {
  if (argv.includes('-h') || argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const i = argv.indexOf('--out');
  const out = i >= 0 ? argv[i + 1] : undefined;
  if (!out || !out.endsWith('.png')) {
    process.stderr.write(`bench chart: --out FILE.png is required\n\n${HELP}`);
    return 2;
  }
  const benchArgs = argv.filter((_, j) => j !== i && j !== i + 1);
  const browserPath = process.env.KVGATE_CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(browserPath)) {
    process.stderr.write(`bench chart: chromium not found at ${browserPath} (apt-get install chromium, or set KVGATE_CHROMIUM)\n`);
    return 1;
  }
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-chart-'));
  try {
    const html = join(dir, 'report.html');
    const r = spawnSync(process.execPath, [cli, 'bench', ...benchArgs, '--capacity', '--report', html, '--quiet'], { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) return r.status ?? 1;
    const browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
    try {
      const page = await browser.newPage({ deviceScaleFactor: 2 });
      await page.goto(pathToFileURL(html).href);
      // The report's charts are inline SVGs, each with a <text class="title">.
      const chart = page.locator('svg', { has: page.locator('text.title', { hasText: 'SLO attainment vs offered rate' }) });
      if ((await chart.count()) === 0) throw new Error('the report has no attainment chart');
      await chart.first().screenshot({ path: resolve(out) });
    } finally {
      await browser.close();
    }
    process.stdout.write(`wrote ${out}\n`);
    return 0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main(process.argv.slice(2)).then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench chart: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
