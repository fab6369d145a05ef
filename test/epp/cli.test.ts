/** `kvgate epp` as a user runs it: the built CLI in a child process, a real worker, a real gRPC client. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ExtProcClient, proxyExchange } from '../../src/epp/ext-proc-client.js';
import { MODEL, startSims } from './helpers.js';
import { CLI, runCli } from '../support.js';



test('kvgate epp --help, bad flags, a missing --config and an invalid epp section exit as documented', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-epp-'));
  try {
    const help = await runCli(['epp', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /Usage: kvgate epp --config FILE/);
    assert.match(help.stdout, /healthPort/);
    assert.equal((await runCli(['epp', '--bogus'])).code, 2);
    const missing = await runCli(['epp']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--config FILE is required/);
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'workers:\n  - { url: "http://127.0.0.1:9", model: m }\nepp:\n  healthPort: 70000\n  fallback: 1\n');
    const r = await runCli(['epp', '--config', bad]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /epp\.healthPort/);
    assert.match(r.stderr, /epp.*fallback/);
    const ok = join(dir, 'ok.yaml');
    writeFileSync(ok, 'workers:\n  - { url: "http://127.0.0.1:9", model: m }\n');
    const badPort = await runCli(['epp', '--config', ok, '--health-port', 'x']);
    assert.equal(badPort.code, 2);
    assert.match(badPort.stderr, /kvgate epp: --health-port must be an integer 0\.\.65535, got 'x'/);
    const badLevel = await runCli(['epp', '--config', ok, '--log-level', 'loud']);
    assert.equal(badLevel.code, 2);
    assert.match(badLevel.stderr, /kvgate epp: --log-level must be one of fatal, error/);
    // A port already taken: exit 1, naming the addresses.
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const port = (taken.address() as AddressInfo).port;
      const r1 = await runCli(['epp', '--config', ok, '--port', String(port), '--health-port', '0', '--metrics-port', '0']);
      assert.equal(r1.code, 1);
      assert.match(r1.stderr, new RegExp(`kvgate epp: cannot listen on 127\\.0\\.0\\.1 \\(ports ${port}, 0, 0\\)`));
    } finally {
      taken.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('kvgate epp serves the protocol in front of a worker and exits 0 on SIGTERM', async () => {
  const [sim] = await startSims(1);
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-epp-'));
  const file = join(dir, 'epp.yaml');
  writeFileSync(
    file,
    `pools:\n  - name: main\n    model: ${MODEL}\n    workers: [{ url: "${sim!.url}" }]\nshutdown: { drainDelayMs: 0, graceMs: 1000 }\nepp: { listen: { host: 127.0.0.1, port: 0 }, healthPort: 0, metricsPort: 0 }\n`,
  );
  const child = spawn(process.execPath, [CLI, 'epp', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    let out = '';
    const port = await new Promise<number>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no listening line in: ${out}`)), 10_000);
      child.stdout.on('data', (d: Buffer) => {
        out += d;
        const m = /"extProc":(\d+)/.exec(out);
        if (m) {
          clearTimeout(t);
          resolve(Number(m[1]));
        }
      });
    });
    const client = new ExtProcClient(`127.0.0.1:${port}`);
    // The worker may not be probed healthy yet: ask until it is picked.
    let x = await proxyExchange(client, { path: '/v1/completions', body: Buffer.from(JSON.stringify({ model: MODEL, prompt: 'hello', max_tokens: 3 })) });
    for (let i = 0; i < 50 && x.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      x = await proxyExchange(client, { path: '/v1/completions', body: Buffer.from(JSON.stringify({ model: MODEL, prompt: 'hello', max_tokens: 3 })) });
    }
    assert.equal(x.status, 200);
    assert.equal(x.answer.endpoint, new URL(sim!.url).host);
    client.close();
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    await sim!.close();
  }
});
