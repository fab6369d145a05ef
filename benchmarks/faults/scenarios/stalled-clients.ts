/**
 * 3,000 sockets that open and then send nothing, or half a request line, against a gateway
 * serving 10 closed-loop clients: the real clients and health checks keep being answered, and
 * every stalled socket is closed within the header timeout.
 *
 * Then stalled bodies with valid keys: two tenants open 600 sockets each from six loopback
 * addresses, send a chat request's headers and stall the body. The tenant limited to 4 concurrent
 * requests holds 4 of them, the unlimited one its share of the connections
 * (server.tenantPendingBodyShare); the rest are refused at once with 429 and closed, and a third
 * tenant's 10 streaming clients are served throughout.
 */
import { connect, type Socket } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { RawConfig } from '../../../src/config/index.js';
import { closedLoop, sleep, spawnSims, startGateway, streamChat, Tally, type FaultScenario, type ScenarioResult, type SimProcess } from '../harness.js';

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
    // The gateway runs in this process: its 1 s check is a timer on this event loop, late by as
    // much as the loop is busy (3,000 sockets and 10 streams on it), so the bound allows the
    // loop's worst delay measured meanwhile.
    const lag = monitorEventLoopDelay({ resolution: 10 });
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
      lag.enable();
      const peak = gw.connections.open;
      const { tally } = await load;
      await checker;
      const deadline = openedBy + HEADERS_TIMEOUT_MS + 1_500;
      while (closed < STALLED && performance.now() < deadline) await sleep(50);
      lag.disable();
      const lagMs = lag.max / 1e6;
      tally.merge(health);
      for (const s of sockets) s.destroy();
      const bodies = await stalledBodies(sims);
      tally.merge(bodies.tally);
      return {
        tally,
        figures: {
          'stalled sockets opened (ms to open them all)': `${STALLED} (${Math.round(openedBy - openedFrom)})`,
          'gateway connections at the peak': peak,
          'closed by the gateway': closed,
          'last closed, ms after the last was opened': Math.round(lastClosedAt - openedBy),
          "this event loop's worst delay meanwhile, ms": Math.round(lagMs),
          'evicted to make room / refused': `${gw.connections.evicted} / ${gw.connections.refused}`,
          'health checks answered': `${health.ok}/${health.sent}`,
          ...bodies.figures,
        },
        checks: {
          ...bodies.checks,
          'every stalled socket closed': closed === STALLED,
          [`within the header timeout plus Node's 1 s check (${HEADERS_TIMEOUT_MS + 1_000} ms) plus the loop's worst delay`]: lastClosedAt - openedBy <= HEADERS_TIMEOUT_MS + 1_000 + lagMs,
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

const BODY_ADDRESSES = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7'];
const BODIES_PER_ADDRESS = 100;
const MAX_CONNECTIONS = 1_000;
const PENDING_SHARE = 0.25;

/** Stalled bodies with valid keys beside a third tenant's streaming clients (see the file comment). */
async function stalledBodies(sims: SimProcess[]): Promise<Omit<ScenarioResult, 'tally'> & { tally: Tally }> {
  const keys = { limited: 'sk-fault-limited-01', unlimited: 'sk-fault-unlimited1', honest: 'sk-fault-honest-001' };
  const { gw, url } = await startGateway(sims.map((s) => s.url), {
    tenants: [
      { id: 'limited', keys: [{ value: keys.limited }], limits: { concurrentRequests: 4 } },
      { id: 'unlimited', keys: [{ value: keys.unlimited }] },
      { id: 'honest', keys: [{ value: keys.honest }] },
    ],
    server: { maxConnections: MAX_CONNECTIONS, maxConnectionsPerAddress: 200, tenantPendingBodyShare: PENDING_SHARE, bodyTimeoutMs: 20_000 },
  } as Partial<RawConfig>);
  const port = Number(new URL(url).port);
  const sockets: Socket[] = [];
  const answers = { limited: { refused429: 0, other: 0, closedUnanswered: 0 }, unlimited: { refused429: 0, other: 0, closedUnanswered: 0 } };
  try {
    const load = closedLoop({
      base: url,
      clients: 10,
      // Longer than opening the stalled bodies takes on a busy machine.
      durationMs: 10_000,
      next: (c, n) => {
        const a = streamChat(c, n);
        return { ...a, headers: { authorization: `Bearer ${keys.honest}` } };
      },
    });
    await sleep(300);
    const t0 = performance.now();
    // In batches of 120 (10 per address and tenant), within the listen backlog.
    for (let b = 0; b < BODIES_PER_ADDRESS; b += 10) {
      await Promise.all(
      (['limited', 'unlimited'] as const).flatMap((tenant) =>
        BODY_ADDRESSES.flatMap((localAddress) =>
          Array.from({ length: 10 }, () =>
            new Promise<void>((resolve) => {
              const s = connect({ port, host: '127.0.0.1', localAddress }, () => {
                s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${keys[tenant]}\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"model":`);
                resolve();
              });
              let first = true;
              s.on('data', (c: Buffer) => {
                if (!first) return;
                first = false;
                if (c.toString('latin1').startsWith('HTTP/1.1 429')) answers[tenant].refused429++;
                else answers[tenant].other++;
              });
              s.on('close', () => {
                if (first) answers[tenant].closedUnanswered++;
              });
              s.on('close', () => {
                if (first) answers[tenant].closedUnanswered++;
              });
              s.on('error', () => resolve());
              sockets.push(s);
            }),
          ),
        ),
      ),
      );
      await sleep(20);
    }
    const openedMs = performance.now() - t0;
    // Until every socket beyond the tenants' bounds has had its answer.
    const settled = () => {
      const n = (t: 'limited' | 'unlimited') => answers[t].refused429 + answers[t].other + answers[t].closedUnanswered;
      return n('limited') >= BODY_ADDRESSES.length * BODIES_PER_ADDRESS - 4 && n('unlimited') >= BODY_ADDRESSES.length * BODIES_PER_ADDRESS - Math.floor(PENDING_SHARE * MAX_CONNECTIONS);
    };
    for (const until = performance.now() + 5_000; !settled() && performance.now() < until; ) await sleep(50);
    const held = { limited: gw.tenantSlots.counts('limited'), unlimited: gw.tenantSlots.counts('unlimited') };
    const open = gw.connections.open;
    const { tally } = await load;
    const cap = Math.floor(PENDING_SHARE * MAX_CONNECTIONS);
    const sent = BODY_ADDRESSES.length * BODIES_PER_ADDRESS;
    return {
      tally,
      figures: {
        'stalled bodies: sockets per tenant (addresses; ms to open all)': `${sent} (${BODY_ADDRESSES.length}; ${Math.round(openedMs)})`,
        'stalled bodies: held by the tenant limited to 4 / refused 429': `${held.limited.pendingBodies} / ${answers.limited.refused429}`,
        [`stalled bodies: held by the unlimited tenant (cap ${cap}) / refused 429`]: `${held.unlimited.pendingBodies} / ${answers.unlimited.refused429}`,
        'stalled bodies: other answers / closed unanswered (limited; unlimited)': `${answers.limited.other} / ${answers.limited.closedUnanswered}; ${answers.unlimited.other} / ${answers.unlimited.closedUnanswered}`,
        'stalled bodies: gateway connections open': open,
        'stalled bodies: third tenant\'s requests ok': `${tally.ok}/${tally.sent}`,
      },
      checks: {
        'stalled bodies: the limited tenant holds at most 4 from its key read': held.limited.inProgress <= 4 && answers.limited.refused429 >= sent - 4,
        [`stalled bodies: the unlimited tenant holds at most ${cap}`]: held.unlimited.pendingBodies <= cap && answers.unlimited.refused429 >= sent - cap,
        'stalled bodies: every request of the third tenant served': tally.ok === tally.sent && tally.sent > 0,
      },
    };
  } finally {
    for (const s of sockets) s.destroy();
    await gw.close();
  }
}
