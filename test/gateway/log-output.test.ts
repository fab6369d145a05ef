/** A log output that fails costs the gateway nothing but the lines: it keeps serving, and the loss is counted. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLogger } from '../../src/telemetry/logger.js';
import { MODEL, metricValue, post, startGateway, startSims, waitFor } from './helpers.js';

const chat = { model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8 };

test('request logs to a descriptor that fails: answers unchanged, kvgate_log_dropped_bytes_total counts the lost bytes', async (t) => {
  const [sim] = await startSims(1);
  t.after(() => sim!.close());
  // Not an open descriptor: every write of the log fails (EBADF).
  const { gw, url } = await startGateway([sim!.url], {}, { logger: createLogger({ level: 'info', fd: 1_000_000 }) });
  t.after(() => gw.close());
  const dropped = async (): Promise<number> => metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_log_dropped_bytes_total') ?? 0;
  assert.equal(await dropped(), 0);
  for (let i = 0; i < 3; i++) assert.equal((await post(url + '/v1/chat/completions', chat)).status, 200);
  // Request lines leave in batches every 100 ms at most.
  await waitFor(async () => (await dropped()) > 0, 5_000);
  const first = await dropped();
  assert.equal((await post(url + '/v1/chat/completions', chat)).status, 200);
  await waitFor(async () => (await dropped()) > first, 5_000);
});
