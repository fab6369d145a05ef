/** Runs the built `kvgate demo` as a child process for the demo tests and waits for its banner. */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

export interface DemoProcess {
  /** The gateway's URL, read from the banner. */
  url: string;
  child: ChildProcess;
  /** Everything the demo printed so far. */
  stdout(): string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
}

/** Start `kvgate demo ARGS` and wait (at most 15 s) until it prints its Ctrl-C line. */
export async function startDemo(args: string[]): Promise<DemoProcess> {
  const child = spawn(process.execPath, [CLI, 'demo', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const deadline = Date.now() + 15_000;
  while (!stdout.includes('Ctrl-C') && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 20));
  const url = /behind (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
  if (!url) child.kill('SIGKILL');
  assert.ok(url, `no URL in: ${stdout}`);
  return { url, child, stdout: () => stdout, exited };
}
