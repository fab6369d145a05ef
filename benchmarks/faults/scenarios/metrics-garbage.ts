/** A worker whose /metrics returns garbage (through a proxy that serves everything else from a real simulated worker). */
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closedLoop, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const metricsGarbage: FaultScenario = {
  name: 'metrics-garbage',
  description: 'one of three workers serves garbage on /metrics; generation works',
  async run() {
    const sims = await spawnSims(3);
    const target = new URL(sims[2]!.url);
    const proxy = createServer((req, res) => {
      if (req.url === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        return void res.end('\u0000\u0001garbage {{{ vllm:kv_cache_usage_perc NaN NaN\n'.repeat(50));
      }
      const up = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      up.on('error', () => res.destroy());
      res.on('close', () => up.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    const { gw, url } = await startGateway([sims[0]!.url, sims[1]!.url, proxyUrl]);
    try {
      const { tally } = await closedLoop({ base: url, clients: 20, durationMs: 4_000, next: streamChat });
      const w = gw.registry.get('w2')!;
      return {
        tally,
        figures: { 'garbage worker stale': w.isStale(Date.now(), gw.config.scrape.staleAfterMs), 'its last scrape error': w.lastScrapeError ?? 'none', 'requests it served': w.routed },
        checks: { 'every request answered OK': tally.ok === tally.sent, 'it still serves (routed on the gateway’s own accounting)': w.routed > 0 },
      };
    } finally {
      await gw.close();
      proxy.closeAllConnections();
      proxy.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
