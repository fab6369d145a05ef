/**
 * The proxy's side of `npm run bench -- epp`, in a process of its own: ext_proc streams to the
 * EPP as Envoy's filter opens them (src/epp/ext-proc-client.ts), one per request: the request
 * headers, the body in 16 KiB chunks (FULL_DUPLEX_STREAMED), then the answer read; then a
 * worker's answer passed through (response headers, one JSON body with usage) and the stream
 * closed. No worker is called: the EPP's cost is what is measured, and the proxy's hop is nginx's
 * (measured beside it by benchmarks/epp.ts).
 *
 * The decision latency of a request: from the moment its last body chunk is handed to the
 * stream to the arrival of the request-headers response (the pick).
 * Writes one JSON LoadResult line on stdout.
 * Argument: a file holding the JSON LoadSpec.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { ExtProcClient, type ExtProcStream } from '../../src/epp/ext-proc-client.js';
import { completion } from '../overhead/responses.js';

export interface LoadSpec {
  address: string;
  /** Request bodies, used in turn. */
  bodies: string[];
  seconds: number;
  /** Open loop at this rate (req/s) … */
  rate?: number;
  /** … or this many streams in a closed loop. */
  concurrency?: number;
  /** gRPC connections the streams are spread over (Envoy keeps a few per worker thread). */
  connections: number;
}

export interface LoadResult {
  requests: number;
  errors: number;
  firstError: string | null;
  /** Decision latencies, µs, one per request. */
  latencyUs: number[];
  /** This process's CPU time over the measurement, µs. */
  cpuUs: number;
  wallMs: number;
}

const CHUNK = 16_384;
const RESPONSE = Buffer.from(completion);

/** One request through the stream; resolves with its decision latency in µs. */
async function exchange(client: ExtProcClient, body: Buffer): Promise<number> {
  const s: ExtProcStream = client.open();
  s.requestHeaders({ ':method': 'POST', ':path': '/v1/chat/completions', ':authority': 'epp.bench', 'content-type': 'application/json', 'content-length': String(body.length) });
  s.requestBody(body, CHUNK);
  const t0 = performance.now();
  let m = await s.next();
  const latency = (performance.now() - t0) * 1000;
  if (!m || m.immediate_response) {
    s.end();
    throw new Error(m ? `ImmediateResponse ${m.immediate_response?.status?.code}` : 'stream ended before the pick');
  }
  // The body echoed back, up to its end.
  for (;;) {
    m = await s.next();
    if (!m) throw new Error('stream ended in the body echo');
    if (m.request_body?.response?.body_mutation?.streamed_response?.end_of_stream === true) break;
  }
  s.responseHeaders(200, { 'content-type': 'application/json' });
  await s.next();
  s.responseBody(RESPONSE, true);
  await s.next();
  s.end();
  // The EPP ends the stream once the proxy has: a stream it leaves open is a failed request.
  const closed = await Promise.race([s.status.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 10_000).unref())]);
  if (!closed) {
    s.cancel();
    throw new Error('the EPP did not end the stream within 10 s of the proxy');
  }
  return latency;
}

async function run(spec: LoadSpec): Promise<LoadResult> {
  const clients = Array.from({ length: spec.connections }, () => new ExtProcClient(spec.address));
  const bodies = spec.bodies.map((b) => Buffer.from(b));
  const latencyUs: number[] = [];
  let errors = 0;
  let firstError: string | null = null;
  let n = 0;
  const one = async (): Promise<void> => {
    const i = n++;
    try {
      latencyUs.push(await exchange(clients[i % clients.length]!, bodies[i % bodies.length]!));
    } catch (e) {
      errors++;
      firstError ??= (e as Error).message;
    }
  };
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + spec.seconds * 1000;
  if (spec.rate !== undefined) {
    // Open loop: arrivals on a fixed schedule, whatever the answers do.
    const gap = 1000 / spec.rate;
    const pending: Promise<void>[] = [];
    for (let k = 0; start + k * gap < end; k++) {
      const wait = start + k * gap - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      pending.push(one());
    }
    await Promise.all(pending);
  } else {
    const loops = Array.from({ length: spec.concurrency ?? 1 }, async () => {
      while (performance.now() < end) await one();
    });
    await Promise.all(loops);
  }
  const wallMs = performance.now() - start;
  const c = process.cpuUsage(cpu0);
  for (const cl of clients) cl.close();
  return { requests: latencyUs.length, errors, firstError, latencyUs, cpuUs: c.user + c.system, wallMs };
}

const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as LoadSpec;
run(spec).then(
  (r) => process.stdout.write(JSON.stringify(r) + '\n'),
  (e: Error) => {
    process.stderr.write(`epp load: ${e.message}\n`);
    process.exitCode = 1;
  },
);
