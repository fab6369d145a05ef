/**
 * A real redis-server for a suite of shared-state tests (call inside `describe`): started before
 * the suite, with a raw client for publishing and inspecting; `closers` run (last first) when the
 * suite ends or at `closeAll()`, then the server stops.
 */
import { after, before } from 'node:test';
import { Redis } from 'ioredis';
import { startRedis, type RedisServer } from '../redis-server.js';

export interface RedisFixture {
  /** The server (set once the suite's `before` ran). */
  server: RedisServer;
  /** A plain client on it, errors ignored (Redis is stopped on purpose in some tests). */
  raw: Redis;
  readonly closers: Array<() => unknown>;
  closeAll(): Promise<void>;
}

export function redisFixture(): RedisFixture {
  const fx = {
    closers: [] as Array<() => unknown>,
    async closeAll() {
      for (const c of fx.closers.splice(0).reverse()) await c();
    },
  } as RedisFixture;
  before(async () => {
    fx.server = await startRedis();
    fx.raw = new Redis(fx.server.url).on('error', () => undefined);
  });
  after(async () => {
    await fx.closeAll();
    fx.raw?.disconnect();
    await fx.server?.stop();
  });
  return fx;
}
