/**
 * /dashboard in a real headless browser (Debian's chromium driven by playwright-core) against a
 * gateway in front of real simulated workers: the page loads with no console errors, shows every
 * worker, and its numbers move when traffic flows. With keys configured it needs the admin key
 * (HTTP Basic, the key as password).
 *
 * Chromium: KVGATE_CHROMIUM, else /usr/bin/chromium (`apt-get install chromium`; .ci/run installs
 * it). Missing: the tests fail under CI=true and skip with the reason otherwise.
 * KVGATE_DASHBOARD_SCREENSHOT=path writes a screenshot of the page under traffic (docs/dashboard.png
 * is made this way).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { MODEL, post, startGateway, startSims } from './helpers.js';
import type { Gateway } from '../../src/gateway/gateway.js';

// Page functions run in the browser; this file is compiled without the DOM library.
declare const document: any;

const CHROMIUM = process.env.KVGATE_CHROMIUM ?? '/usr/bin/chromium';
const missing = !existsSync(CHROMIUM);
if (missing && process.env.CI === 'true') throw new Error(`chromium not found at ${CHROMIUM}: the dashboard browser tests need it in CI (apt-get install chromium)`);
const skip = missing ? `chromium not found at ${CHROMIUM} (apt-get install chromium, or set KVGATE_CHROMIUM)` : false;
if (skip) console.log(`# skipping the dashboard browser tests: ${skip}`);

let browser: Browser | null = null;
let sims: SimWorker[] = [];
const gateways: Gateway[] = [];

before(async () => {
  if (skip) return;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-extensions', '--disable-background-networking', '--no-first-run', '--renderer-process-limit=1'],
  });
  sims = await startSims(3, { speed: 10, numGpuBlocks: 2000 });
});

after(async () => {
  await browser?.close();
  for (const g of gateways) await g.close();
  await Promise.all(sims.map((s) => s.close()));
});

/** Collects console errors, page errors and failed requests of a page. */
function watchErrors(page: Page): string[] {
  const errs: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') errs.push(`console.${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => errs.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => errs.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  return errs;
}

const cellTexts = (page: Page, cls: string): Promise<string[]> =>
  page.$$eval(`#workers tr[data-worker] td.${cls}`, (tds) => tds.map((t) => t.textContent ?? ''));

test('the dashboard shows every worker and its numbers move with traffic, without console errors', { skip, timeout: 60_000 }, async () => {
  const { gw, url } = await startGateway(sims.map((s) => s.url), { cache: { enabled: true } });
  gateways.push(gw);
  const page = await browser!.newPage({ viewport: { width: 1280, height: 720 } });
  const errs = watchErrors(page);
  const external: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(url)) external.push(r.url());
  });
  const resp = await page.goto(url + '/dashboard');
  assert.equal(resp?.status(), 200);
  await page.waitForFunction(() => document.querySelectorAll('#workers tr[data-worker]').length === 3, null, { timeout: 10_000 });
  const ids = await page.$$eval('#workers tr[data-worker]', (trs) => trs.map((t) => t.getAttribute('data-worker')));
  assert.deepEqual(ids.sort(), ['w0', 'w1', 'w2']);
  // A worker's LoRA adapters (as /admin/adapters loads them) are named in its row.
  gw.registry.setLoadedAdapters(gw.registry.get('w1')!, ['sql-lora', 'chat-lora', 'a-lora', 'b-lora']);
  await page.waitForFunction(() => document.querySelector('#workers tr[data-worker="w1"] td:nth-child(2)')?.textContent?.includes('LoRA'), null, { timeout: 10_000 });
  assert.match((await page.textContent('#workers tr[data-worker="w1"] td:nth-child(2)')) ?? '', /LoRA sql-lora, chat-lora, a-lora \+1$/);
  assert.doesNotMatch((await page.textContent('#workers tr[data-worker="w0"] td:nth-child(2)')) ?? '', /LoRA/);
  // Idle: the second poll has a window, and nothing was requested yet.
  await page.waitForFunction(() => document.getElementById('requestRate')?.textContent === '0.0/s', null, { timeout: 10_000 });
  assert.deepEqual(await cellTexts(page, 'routed'), ['0', '0', '0']);
  assert.equal(await page.textContent('#ttftP50'), '—');
  assert.equal(await page.textContent('#tpotP50'), '—');

  // Traffic: streamed requests with long shared prefixes, a few at a time, for a few seconds.
  let stop = false;
  let sent = 0;
  let failed = 0;
  const system = 'You are a careful assistant. '.repeat(40);
  const client = async (c: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      const r = await post(url + '/v1/chat/completions', {
        model: MODEL,
        stream: true,
        max_tokens: 32,
        messages: [{ role: 'system', content: `Team ${c}. ` + system }, { role: 'user', content: `question ${c}.${i}` }],
      });
      sent++;
      if (r.status !== 200) failed++;
    }
  };
  // Two clients: enough to move every number, light enough not to starve the tests that run
  // beside this one on a two-core machine.
  const clients = Array.from({ length: 2 }, (_, c) => client(c));
  try {
    await page.waitForFunction(
      () => {
        const rate = document.getElementById('requestRate')?.textContent ?? '';
        const ttft = document.getElementById('ttftP50')?.textContent ?? '—';
        const tpot = document.getElementById('tpotP99')?.textContent ?? '—';
        const tokens = document.getElementById('outputTokenRate')?.textContent ?? '';
        const routed = [...document.querySelectorAll('#workers tr[data-worker] td.routed')].map((t) => Number(t.textContent));
        const running = [...document.querySelectorAll('#workers tr[data-worker] td.running')].map((t) => Number(t.textContent));
        return parseFloat(rate) > 0 && ttft !== '—' && tpot !== '—' && parseFloat(tokens) > 0 && routed.reduce((a, b) => a + b, 0) > 0 && running.some((r) => r > 0);
      },
      null,
      { timeout: 20_000, polling: 100 },
    );
    if (process.env.KVGATE_DASHBOARD_SCREENSHOT) {
      await new Promise((r) => setTimeout(r, 3000));
      await page.screenshot({ path: process.env.KVGATE_DASHBOARD_SCREENSHOT, fullPage: true });
    }
  } finally {
    stop = true;
    await Promise.all(clients);
  }
  assert.ok(sent > 0 && failed === 0, `${failed} of ${sent} requests failed`);
  const kv = await page.$$eval('#workers tr[data-worker] .kvv', (s) => s.map((x) => x.textContent));
  assert.equal(kv.length, 3);
  const routed = (await cellTexts(page, 'routed')).map(Number);
  assert.ok(routed.reduce((a, b) => a + b, 0) > 0, `routed ${routed}`);
  assert.equal(await page.textContent('#conn'), 'live');
  // The page asked only its own origin for anything.
  assert.deepEqual(external, []);
  assert.deepEqual(errs, []);
  await page.close();
});

test('a worker that stops answering turns "down" on the page while the others stay "ok"', { skip, timeout: 30_000 }, async () => {
  const own = await startSims(2, { speed: 10 });
  const { gw, url } = await startGateway(own.map((s) => s.url));
  gateways.push(gw);
  const page = await browser!.newPage();
  const errs = watchErrors(page);
  try {
    await page.goto(url + '/dashboard');
    const states = (): Promise<string[]> => page.$$eval('#workers tr[data-worker] .badge', (b) => b.map((x) => x.textContent ?? ''));
    await page.waitForFunction(() => [...document.querySelectorAll('#workers tr[data-worker] .badge')].map((b) => b.textContent).join() === 'ok,ok', null, { timeout: 10_000 });
    await own[1]!.close();
    await page.waitForFunction(() => document.querySelector('#workers tr[data-worker="w1"] .badge')?.textContent === 'down', null, { timeout: 15_000 });
    assert.deepEqual(await states(), ['ok', 'down']);
    assert.deepEqual(errs, []);
  } finally {
    await page.close();
    await own[0]!.close();
  }
});

test('with keys configured the dashboard needs the admin key (HTTP Basic) and then works', { skip, timeout: 30_000 }, async () => {
  const { gw, url } = await startGateway(sims.map((s) => s.url), {
    admin: { keys: [{ value: 'sk-admin-dash-0001' }] },
    tenants: [{ id: 'team-a', keys: [{ value: 'sk-team-a-0001' }] }],
  });
  gateways.push(gw);
  // Without a key: 401 in OpenAI's shape, with a Basic challenge so a browser asks.
  const r = await fetch(url + '/dashboard');
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate') ?? '', /^Basic realm="kvgate dashboard"/);
  assert.equal(((await r.json()) as any).error.type, 'invalid_request_error');
  const s = await fetch(url + '/dashboard/state');
  assert.equal(s.status, 401);
  assert.doesNotMatch(s.headers.get('www-authenticate') ?? '', /Basic/, 'the JSON endpoint does not ask the browser for a password');
  // A tenant's key is not an admin key.
  const tenant = await fetch(url + '/dashboard/state', { headers: { authorization: 'Bearer sk-team-a-0001' } });
  assert.equal(tenant.status, 403);
  assert.equal((await fetch(url + '/dashboard/state', { headers: { authorization: 'Bearer sk-admin-dash-0001' } })).status, 200);

  const ctx = await browser!.newContext({ httpCredentials: { username: 'admin', password: 'sk-admin-dash-0001' } });
  const page = await ctx.newPage();
  const errs = watchErrors(page);
  assert.equal((await page.goto(url + '/dashboard'))?.status(), 200);
  await page.waitForFunction(() => document.querySelectorAll('#workers tr[data-worker]').length === 3, null, { timeout: 10_000 });
  await page.waitForFunction(() => document.getElementById('conn')?.textContent === 'live', null, { timeout: 10_000 });
  assert.deepEqual(errs, []);
  await ctx.close();
});
