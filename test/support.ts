/** Helpers shared by the end-to-end tests: SSE parsing, Prometheus samples, polling. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sampleValue } from '../src/fleet/prom-text.js';

/** The `data:` events of an SSE body, JSON-decoded (`[DONE]` kept as the string). */
export function parseSse(text: string): any[] {
  const out: any[] = [];
  for (const block of text.split('\n\n')) {
    if (block.trim() === '') continue;
    if (!block.startsWith('data: ')) throw new Error(`not an SSE data event: ${JSON.stringify(block)}`);
    const data = block.slice(6);
    out.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return out;
}

/** The value of the first sample `name` with (at least) `labels` in a /metrics text, or undefined. */
export const metricValue = sampleValue;

/** Poll `cond` every 10 ms until it holds or `timeoutMs` passes (a bound, not a wait: generous). */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The built CLI (dist/src/cli.js). */
export const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));

/** `kvgate ARGS` in a child process, to its exit (killed after `timeoutMs`). */
export function runCli(args: string[], timeoutMs = 10_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const t = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kvgate ${args.join(' ')} did not exit`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}
