/**
 * 3,000 sockets that open and then send nothing, or half a request line, against a gateway
 * serving 10 closed-loop clients: the real clients and health checks keep being answered, and
 * every stalled socket is closed within the header timeout.
 */
import { connect, type Socket } from 'node:net';
import { closedLoop, sleep, spawnSims, startGateway, streamChat, Tally, type FaultScenario } from '../harness.js';

const STALLED = 3_000;
const HEADERS_TIMEOUT_MS = 2_000;

export const stalledClients: FaultScenario = {
  name: 'stalled-clients',
  description: `${STALLED} stalled sockets beside 10 streaming clients and a health checker`,
  async run() {
    const sims = await spawnSims(2);
    const { gw, url } = await startGateway(sims.map((s) => s.url), { server: { headersTimeoutMs: HEADERS_TIMEOUT_MS } });
    const port = Number(new URL(url).port);
    const sockets: Socket[] = [];
    let closed = 0;
    let lastClosedAt = 0;
    try {
      const load = closedLoop({ base: url, clients: 10, durationMs: 6_000, next: streamChat });
      const health = new Tally();
      const checker = (async () => {
        const end = performance.now() + 6_000;
        while (performance.now() < end) {
          const t0 = performance.now();
          try {
            const r = await fetch(url + '/health', { signal: AbortSignal.timeout(2_000) });
            await r.text();
            health.add({ kind: r.status === 200 ? 'ok' : 'error', detail: String(r.status), status: r.status, ms: performance.now() - t0, end: performance.now(), text: '' });
          } catch (e) {
            health.add({ kind: 'unanswered', detail: `/health: ${(e as Error).message}`, status: 0, ms: performance.now() - t0, end: performance.now(), text: '' });
          }
          await sleep(100);
        }
      })();
      await sleep(500);
      const openedFrom = performance.now();
      for (let b = 0; b < STALLED; b += 250) {
        await Promise.all(
          Array.from({ length: 250 }, (_, j) =>
            new Promise<void>((resolve) => {
              const s = connect(port, '127.0.0.1', () => {
                if ((b + j) % 2 === 0) s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
                resolve();
              });
              s.on('error', () => resolve());
              s.on('data', () => undefined);
              s.on('close', () => {
                closed++;
                lastClosedAt = performance.now();
              });
              sockets.push(s);
            }),
          ),
        );
        await sleep(20);
      }
      const openedBy = performance.now();
      const peak = gw.connections.open;
      const { tally } = await load;
      await checker;
      const deadline = openedBy + HEADERS_TIMEOUT_MS + 1_500;
      while (closed < STALLED && performance.now() < deadline) await sleep(50);
      tally.merge(health);
      return {
        tally,
        figures: {
          'stalled sockets opened (ms to open them all)': `${STALLED} (${Math.round(openedBy - openedFrom)})`,
          'gateway connections at the peak': peak,
          'closed by the gateway': closed,
          'last closed, ms after the last was opened': Math.round(lastClosedAt - openedBy),
          'evicted to make room / refused': `${gw.connections.evicted} / ${gw.connections.refused}`,
          'health checks answered': `${health.ok}/${health.sent}`,
        },
        checks: {
          'every stalled socket closed': closed === STALLED,
          [`within the header timeout plus Node's 1 s check (${HEADERS_TIMEOUT_MS + 1_000} ms)`]: lastClosedAt - openedBy <= HEADERS_TIMEOUT_MS + 1_000,
          'every health check answered 200': health.ok === health.sent,
        },
      };
    } finally {
      for (const s of sockets) s.destroy();
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
