/**
 * A real redis-server for the tests, on a free loopback port, with no persistence
 * (`--save '' --appendonly no`), which a test can stop and start again on the same port.
 *
 * redisSkip() says whether the Redis tests can run: with redis-server on the PATH they run; without
 * it they are skipped with the reason printed — except in CI (CI=true), where a missing
 * redis-server is an error, so a CI machine without it cannot pass by skipping.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createConnection, createServer } from 'node:net';

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
  /** Start again on the same port (after stop). */
  start(): Promise<void>;
  /** Freeze the process (SIGSTOP): connections stay open, nothing is answered — a slow Redis. */
  pause(): void;
  resume(): void;
}

let checked: string | false | undefined;

/** false if the Redis tests can run, else why they are skipped. Throws in CI without redis-server. */
export function redisSkip(): string | false {
  if (checked !== undefined) return checked;
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (r.status === 0) return (checked = false);
  const why = 'redis-server is not installed (Debian: apt-get install redis-server); the Redis tests are skipped';
  if (process.env.CI === 'true') throw new Error(`CI=true but ${why.replace('; the Redis tests are skipped', '')}: the Redis tests must run in CI`);
  process.stderr.write(`# ${why}\n`);
  return (checked = why);
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** PING over a raw socket until PONG or timeout. */
async function waitPong(port: number, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = createConnection({ host: '127.0.0.1', port }, () => sock.write('PING\r\n'));
      sock.setTimeout(500, () => sock.destroy());
      sock.once('data', (d) => {
        sock.destroy();
        resolve(d.toString().startsWith('+PONG'));
      });
      sock.once('error', () => resolve(false));
      sock.once('close', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > end) throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  let child: ChildProcess | null = null;
  let output = '';
  const start = async (): Promise<void> => {
    output = '';
    const c = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = c;
    c.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    c.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<never>((_, reject) => c.once('exit', (code) => reject(new Error(`redis-server exited with ${code}: ${output.trim()}`))));
    await Promise.race([waitPong(port, 10_000), exited]);
    exited.catch(() => undefined);
  };
  const stop = async (): Promise<void> => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill('SIGKILL');
    });
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop,
    start,
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
  };
}
