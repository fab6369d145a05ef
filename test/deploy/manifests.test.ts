/**
 * The deployment kit in deploy/ cannot rot silently:
 * - every manifest is validated against the Kubernetes schemas (kubernetes-models, and the KEDA and
 *   prometheus-operator packages for the custom resources), and a field the schema does not know
 *   (a typo such as `livenesProbe`) fails too. package.json holds these packages at their last
 *   releases that run on Node 20 (kubernetes-models 4.x, keda 0.4, prometheus-operator 4.x): their
 *   next majors declare `engines: node >=22`, which kvgate does not require;
 * - the pieces agree with each other and with kvgate: the ConfigMap's config passes kvgate's own
 *   config parser with the Deployment's environment, probes hit /health and /ready on the port
 *   kvgate listens on, the termination grace covers kvgate's drain, selectors select, the
 *   ScaledObject scales the StatefulSet whose pods the config lists, the image runs as the user the
 *   pod expects;
 * - every metric the Grafana dashboard, the alert rules and the KEDA scaler query exists in
 *   kvgate's exports (read from a running gateway's /metrics) or vLLM's (a simulated worker's
 *   /metrics and src/kv/vllm-metric-names.ts), or is one of the kube-state-metrics series named here.
 *   What the alerts do is tested by alert-rules.test.ts (promtool).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { Namespace, ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { PrometheusRule, ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { TenantDirectory } from '../../src/admission/tenants.js';
import { parseConfig } from '../../src/config/index.js';
import { metricsAccessError } from '../../src/gateway/admin/metrics-access.js';
import { VLLM_METRICS } from '../../src/kv/vllm-metric-names.js';
import { startGateway, startSims, MODEL, post } from '../gateway/helpers.js';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { labelValuesMetric, metricNames } from './promql.js';
import { validateStrict, type Validatable } from './strict-model.js';

const DEPLOY = fileURLToPath(new URL('../../../deploy/', import.meta.url));

type Doc = { file: string; obj: any };
const MODELS: Record<string, new (data: any) => Validatable> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out.sort();
}

// deploy/gateway-api/ (its own kustomization) and deploy/envoy/ are checked by gateway-api.test.ts.
const manifestFiles = filesUnder(DEPLOY).filter((f) => f.endsWith('.yaml') && !f.endsWith('kustomization.yaml') && !/^(gateway-api|envoy)\//.test(relative(DEPLOY, f)));
const docs: Doc[] = manifestFiles.flatMap((file) =>
  parseAllDocuments(readFileSync(file, 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${relative(DEPLOY, file)}: ${d.errors[0]!.message}`);
    return { file: relative(DEPLOY, file), obj: d.toJS() };
  }),
);
const find = (kind: string, name: string): any => {
  const d = docs.find((x) => x.obj.kind === kind && x.obj.metadata?.name === name);
  assert.ok(d, `no ${kind} ${name} in deploy/`);
  return d.obj;
};
const dashboard = JSON.parse(readFileSync(join(DEPLOY, 'grafana/kvgate-fleet.json'), 'utf8'));

test('the kit holds the pieces the deployment needs', () => {
  const kinds = docs.map((d) => `${d.obj.kind}/${d.obj.metadata.name}`).sort();
  for (const k of [
    'ConfigMap/kvgate-config',
    'Deployment/kvgate',
    'Deployment/kvgate-redis',
    'PodDisruptionBudget/kvgate',
    'PrometheusRule/kvgate',
    'ScaledObject/vllm-llama-3-1-8b',
    'Secret/kvgate-keys',
    'Service/kvgate',
    'Service/kvgate-redis',
    'ServiceMonitor/kvgate',
    'StatefulSet/vllm-llama-3-1-8b',
  ])
    assert.ok(kinds.includes(k), `missing ${k}`);
});

test('every manifest is valid against its Kubernetes schema, with no unknown fields', () => {
  assert.ok(docs.length >= 12);
  for (const { file, obj } of docs) {
    const key = `${obj.apiVersion}/${obj.kind}`;
    const Model = MODELS[key];
    assert.ok(Model, `${file}: ${key} has no schema here (add its model to MODELS)`);
    let unknown: string[] = [];
    assert.doesNotThrow(() => (unknown = validateStrict(Model, obj)), `${file}: ${obj.kind} ${obj.metadata?.name}`);
    assert.deepEqual(unknown, [], `${file}: ${obj.kind} ${obj.metadata?.name}: fields the schema does not know`);
    assert.equal(obj.metadata.namespace ?? 'kvgate', 'kvgate', `${file}: namespace`);
  }
});

test('the strict validation catches what it is there for: a misspelt field and a wrong type', () => {
  const dep = structuredClone(find('Deployment', 'kvgate'));
  dep.spec.template.spec.containers[0].livenesProbe = dep.spec.template.spec.containers[0].livenessProbe;
  assert.deepEqual(validateStrict(Deployment, dep), ['/spec/template/spec/containers/0/livenesProbe']);
  const so = structuredClone(find('ScaledObject', 'vllm-llama-3-1-8b'));
  so.spec.maxReplicaCount = 'eight';
  assert.throws(() => validateStrict(ScaledObject, so), /maxReplicaCount/);
});

test('kustomization.yaml lists every manifest and the Grafana dashboard', () => {
  const k = parseYaml(readFileSync(join(DEPLOY, 'kustomization.yaml'), 'utf8'));
  assert.deepEqual([...k.resources].sort(), manifestFiles.map((f) => relative(DEPLOY, f)).sort());
  assert.deepEqual(k.configMapGenerator[0].files, ['grafana/kvgate-fleet.json']);
});

function podOf(workload: any): any {
  return workload.spec.template.spec;
}
function matches(selector: Record<string, string>, labels: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

/** The gateway's config as the Deployment gives it: the ConfigMap's file, the Secret's keys in its environment. */
function deployedConfig(): ReturnType<typeof parseConfig> {
  const c = podOf(find('Deployment', 'kvgate')).containers[0];
  const secret = find('Secret', 'kvgate-keys');
  const env: Record<string, string> = {};
  for (const e of c.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.secretKeyRef) env[e.name] = secret.stringData[e.valueFrom.secretKeyRef.key];
  }
  const cm = find('ConfigMap', 'kvgate-config');
  const configArg: string = c.args[c.args.indexOf('--config') + 1];
  return parseConfig(parseYaml(cm.data[configArg.slice(configArg.lastIndexOf('/') + 1)]), env);
}

test('the gateway Deployment, its config, Secret, Service, PDB and Redis agree with each other and with kvgate', () => {
  const dep = find('Deployment', 'kvgate');
  const pod = podOf(dep);
  const c = pod.containers[0];
  const labels = dep.spec.template.metadata.labels;
  assert.ok(dep.spec.replicas >= 2, 'several replicas');
  assert.ok(matches(dep.spec.selector.matchLabels, labels));
  // Config: mounted where the args (and the image's default CMD) say, and valid for kvgate.
  const configArg = c.args[c.args.indexOf('--config') + 1];
  const mount = c.volumeMounts.find((m: any) => configArg.startsWith(m.mountPath + '/'));
  assert.ok(mount, `no volume mounted for ${configArg}`);
  const vol = pod.volumes.find((v: any) => v.name === mount.name);
  const cm = find('ConfigMap', vol.configMap.name);
  const fileName = configArg.slice(mount.mountPath.length + 1);
  assert.ok(cm.data[fileName], `ConfigMap ${cm.metadata.name} has no ${fileName}`);
  const secret = find('Secret', 'kvgate-keys');
  const env: Record<string, string> = {};
  for (const e of c.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.secretKeyRef) {
      const ref = e.valueFrom.secretKeyRef;
      assert.equal(ref.name, secret.metadata.name);
      assert.ok(secret.stringData[ref.key] !== undefined, `Secret has no ${ref.key}`);
      env[e.name] = secret.stringData[ref.key];
    }
  }
  const config = parseConfig(parseYaml(cm.data[fileName]), env);
  assert.equal(config.cache.redis.url, env.REDIS_URL);
  assert.equal(config.admin.digests.length, 1);
  // Ports and probes: kvgate listens where the probes and the Service look.
  const port = Number(c.args[c.args.indexOf('--port') + 1] ?? config.listen.port);
  assert.equal(port, config.listen.port);
  assert.equal(c.args[c.args.indexOf('--host') + 1], '0.0.0.0');
  const http = c.ports.find((p: any) => p.name === 'http');
  assert.equal(http.containerPort, port);
  assert.equal(c.livenessProbe.httpGet.path, '/health');
  assert.equal(c.readinessProbe.httpGet.path, '/ready');
  assert.equal(c.startupProbe.httpGet.path, '/health');
  for (const p of [c.livenessProbe, c.readinessProbe, c.startupProbe]) assert.equal(p.httpGet.port, 'http');
  // Graceful termination covers the preStop delay, kvgate's drain (shutdown.graceMs) and the 2 s
  // it allows in-flight requests to end after the grace.
  const preStop = Number(c.lifecycle.preStop.exec.command[1]);
  assert.equal(c.lifecycle.preStop.exec.command[0], 'sleep');
  assert.ok(
    pod.terminationGracePeriodSeconds >= preStop + config.shutdown.graceMs / 1000 + 2,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < ${preStop} + ${config.shutdown.graceMs / 1000} + 2`,
  );
  // Resources and security.
  for (const w of [dep, find('Deployment', 'kvgate-redis'), find('StatefulSet', 'vllm-llama-3-1-8b')])
    for (const ct of podOf(w).containers) assert.ok(ct.resources?.requests?.cpu && ct.resources?.requests?.memory, `${w.metadata.name}/${ct.name}: resource requests`);
  assert.equal(pod.securityContext.runAsNonRoot, true);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  // Service and PDB select the gateway's pods; the Service targets the named port.
  const svc = find('Service', 'kvgate');
  assert.ok(matches(svc.spec.selector, labels));
  assert.equal(svc.spec.ports[0].targetPort, 'http');
  assert.ok(matches(find('PodDisruptionBudget', 'kvgate').spec.selector.matchLabels, labels));
  // REDIS_URL names the Redis Service and its port.
  const redisSvc = find('Service', 'kvgate-redis');
  const ru = new URL(env.REDIS_URL!);
  assert.equal(ru.hostname.split('.')[0], redisSvc.metadata.name);
  assert.equal(Number(ru.port), redisSvc.spec.ports[0].port);
  assert.ok(matches(redisSvc.spec.selector, find('Deployment', 'kvgate-redis').spec.template.metadata.labels));
});

test('the ScaledObject scales the vLLM StatefulSet whose pods kvgate lists, up to maxReplicaCount', () => {
  const so = find('ScaledObject', 'vllm-llama-3-1-8b');
  assert.equal(so.spec.scaleTargetRef.kind, 'StatefulSet');
  const sts = find('StatefulSet', so.spec.scaleTargetRef.name);
  const headless = find('Service', sts.spec.serviceName);
  assert.equal(headless.spec.clusterIP, 'None');
  assert.ok(matches(headless.spec.selector, sts.spec.template.metadata.labels));
  const config = deployedConfig();
  const urls = config.workers.map((w) => w.url).sort();
  const want = Array.from(
    { length: so.spec.maxReplicaCount },
    (_, i) => `http://${sts.metadata.name}-${i}.${headless.metadata.name}.${sts.metadata.namespace}.svc.cluster.local:${headless.spec.ports[0].port}`,
  ).sort();
  assert.deepEqual(urls, want);
  const served = podOf(sts).containers[0].args.find((a: string) => a.startsWith('--served-model-name='));
  assert.equal(served.split('=')[1], config.workers[0]!.model);
  for (const t of so.spec.triggers) assert.match(t.metadata.query, new RegExp(`model="${config.workers[0]!.model}"`));
});

test('the ServiceMonitors select the Services and ports they scrape, with the metrics key /metrics needs', () => {
  const gw = find('ServiceMonitor', 'kvgate');
  const svc = find('Service', 'kvgate');
  assert.ok(matches(gw.spec.selector.matchLabels, svc.metadata.labels));
  assert.ok(svc.spec.ports.some((p: any) => p.name === gw.spec.endpoints[0].port));
  assert.equal(gw.spec.endpoints[0].path, '/metrics');
  assert.equal(gw.spec.endpoints[0].authorization.credentials.name, 'kvgate-keys');
  const token = find('Secret', 'kvgate-keys').stringData[gw.spec.endpoints[0].authorization.credentials.key];
  assert.ok(token !== undefined);
  // The scrape's token opens /metrics, which is closed without it, and no admin route.
  const config = deployedConfig();
  const tenants = new TenantDirectory(config.tenants, config.admin.digests);
  assert.equal(metricsAccessError(tenants, config.admin, undefined)?.status, 401);
  assert.equal(metricsAccessError(tenants, config.admin, `Bearer ${token}`), null);
  assert.equal(tenants.checkAdmin(`Bearer ${token}`)?.status, 401, 'the scrape token is not an admin key');
  const vllm = find('ServiceMonitor', 'vllm');
  const vsvc = find('Service', 'vllm-llama-3-1-8b');
  assert.ok(matches(vllm.spec.selector.matchLabels, vsvc.metadata.labels));
  assert.ok(vsvc.spec.ports.some((p: any) => p.name === vllm.spec.endpoints[0].port));
});

test('the container build is multi-stage, runs as the pod’s non-root user and checks /health', () => {
  const cf = readFileSync(join(DEPLOY, 'Containerfile'), 'utf8');
  const lines = cf.split('\n').filter((l) => !l.trimStart().startsWith('#'));
  assert.ok(lines.filter((l) => /^FROM\s/.test(l)).length >= 2, 'multi-stage');
  assert.match(cf, /COPY --from=build /);
  const user = /^USER\s+(\d+)(?::(\d+))?\s*$/m.exec(cf);
  assert.ok(user, 'USER uid:gid, numeric');
  assert.notEqual(user[1], '0');
  const pod = podOf(find('Deployment', 'kvgate'));
  assert.equal(String(pod.securityContext.runAsUser), user[1]);
  assert.match(cf, /^HEALTHCHECK[\s\S]*?127\.0\.0\.1:8080\/health/m);
  assert.match(cf, /^EXPOSE 8080$/m);
  const cmd = JSON.parse(/^CMD\s+(\[.*\])\s*$/m.exec(cf)![1]!);
  assert.deepEqual(cmd, pod.containers[0].args, 'the image’s default command is the one the Deployment runs');
});

test('the Grafana dashboard has the panels operators need, with the 90% line on KV usage', () => {
  const panels = dashboard.panels.filter((p: any) => p.type !== 'row');
  const ids = dashboard.panels.map((p: any) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'unique panel ids');
  const byTitle = (re: RegExp): any => {
    const p = panels.find((x: any) => re.test(x.title));
    assert.ok(p, `no panel matching ${re}`);
    return p;
  };
  const kv = byTitle(/^KV cache usage per worker$/);
  assert.match(kv.targets[0].expr, /kvgate_worker_kv_usage_ratio/);
  assert.ok(kv.fieldConfig.defaults.thresholds.steps.some((s: any) => s.value === 0.9));
  assert.equal(kv.fieldConfig.defaults.custom.thresholdsStyle.mode, 'line');
  assert.match(JSON.stringify(byTitle(/^Running and waiting/).targets), /running.*waiting/);
  const lat = JSON.stringify(byTitle(/^TTFT, TPOT and end-to-end/).targets);
  assert.match(lat, /0\.99.*kvgate_request_ttft_seconds_bucket/);
  assert.match(lat, /0\.99.*kvgate_request_tpot_seconds_bucket/);
  assert.match(lat, /0\.99.*kvgate_request_duration_seconds_bucket/);
  assert.match(JSON.stringify(byTitle(/^Tokens \/ s by tenant$/).targets), /by \(tenant\).*kvgate_generation_tokens_total.*by \(tenant\).*kvgate_prompt_tokens_total/);
  assert.match(JSON.stringify(byTitle(/^Speculative acceptance$/).targets), /spec_decode_num_accepted_tokens/);
  assert.match(JSON.stringify(byTitle(/^Cache hit ratios$/).targets), /kvgate_cache_requests_total/);
  assert.match(JSON.stringify(byTitle(/^Shed and queued by priority$/).targets), /by \(priority, decision\)/);
  for (const p of panels) {
    assert.equal(p.datasource.uid, '${datasource}', `${p.title}: datasource variable`);
    assert.ok(p.targets.length > 0 && p.targets.every((t: any) => typeof t.expr === 'string' && t.expr.length > 0), p.title);
  }
});

test('metricNames reads the metrics of PromQL, not its functions, labels or keywords', () => {
  assert.deepEqual(
    metricNames('histogram_quantile(0.99, sum by (le, model) (rate(kvgate_request_ttft_seconds_bucket{model=~"$model", x="a{b}"}[$__rate_interval]))) > 1e-3'),
    ['kvgate_request_ttft_seconds_bucket'],
  );
  assert.deepEqual(
    metricNames('min by (worker) (kvgate_worker_healthy) == 0 and on (worker) (max by (worker) (vllm:num_requests_waiting) == 0)').sort(),
    ['kvgate_worker_healthy', 'vllm:num_requests_waiting'],
  );
  assert.deepEqual(metricNames('sum(kvgate_queue_depth{model="m"}) / scalar(up)'), ['kvgate_queue_depth', 'up']);
});

let sims: SimWorker[] = [];
let gw: Gateway | null = null;
let gatewayMetrics = '';
let vllmMetrics = '';
before(async () => {
  sims = await startSims(1);
  // Every optional part on, so its series are exported: admission (default), the response cache.
  const g = await startGateway([sims[0]!.url], { cache: { enabled: true } });
  gw = g.gw;
  await post(g.url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true });
  gatewayMetrics = await (await fetch(g.url + '/metrics')).text();
  vllmMetrics = await (await fetch(sims[0]!.url + '/metrics')).text();
});
after(async () => {
  await gw?.close();
  await Promise.all(sims.map((s) => s.close()));
});

/** Series names a Prometheus text exposition declares (histograms: _bucket, _sum, _count). */
function exported(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\w+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(name + s);
    else if (type === 'summary') for (const s of ['', '_sum', '_count']) out.add(name + s);
    else out.add(name);
  }
  return out;
}

test('every metric the dashboard, the alert rules and the scaler query exists in kvgate’s or vLLM’s exports', () => {
  const kvgate = exported(gatewayMetrics);
  const vllm = exported(vllmMetrics);
  // vLLM series the simulated worker does not export (speculative decoding, …): from the shared
  // name list; counters carry _total, histograms _bucket/_sum/_count.
  for (const n of Object.values(VLLM_METRICS)) for (const s of ['', '_total', '_bucket', '_sum', '_count']) vllm.add(n + s);
  assert.ok(kvgate.has('kvgate_worker_kv_usage_ratio') && kvgate.has('kvgate_cache_store_up') && kvgate.has('kvgate_queue_depth'), 'the gateway exported its series');
  assert.ok(vllm.has('vllm:kv_cache_usage_perc'));

  const queries: { where: string; expr: string }[] = [];
  for (const { file, obj } of docs) {
    if (obj.kind === 'PrometheusRule')
      for (const g of obj.spec.groups) for (const r of g.rules) queries.push({ where: `${file} ${r.alert ?? r.record}`, expr: r.expr });
    if (obj.kind === 'ScaledObject') for (const t of obj.spec.triggers) queries.push({ where: `${file} trigger`, expr: t.metadata.query });
  }
  for (const p of dashboard.panels) for (const t of p.targets ?? []) queries.push({ where: `grafana "${p.title}"`, expr: t.expr });
  const used = new Map<string, string>();
  for (const q of queries) {
    const names = metricNames(q.expr);
    assert.ok(names.length > 0, `${q.where}: reads no metric? ${q.expr}`);
    for (const n of names) used.set(n, q.where);
  }
  for (const v of dashboard.templating.list) {
    if (v.type !== 'query') continue;
    const m = labelValuesMetric(typeof v.query === 'string' ? v.query : v.query.query);
    assert.ok(m, `grafana variable ${v.name}: not a label_values() query`);
    used.set(m, `grafana variable ${v.name}`);
  }
  assert.ok(used.size >= 15, `only ${used.size} metrics found: is the extraction broken?`);
  // kube-state-metrics series the kit reads (KvgateWorkerLost: the replicas the StatefulSet should run).
  const kubeState = new Set(['kube_statefulset_replicas']);
  const unknown = [...used].filter(([n]) => !kvgate.has(n) && !vllm.has(n) && !kubeState.has(n)).map(([n, where]) => `${n} (${where})`);
  assert.deepEqual(unknown, [], 'queried but exported by neither kvgate, vLLM nor kube-state-metrics');
});

test('vLLM publishes KV events with a replay socket, and kvgate subscribes to each pod with an exact tokenizer', () => {
  const sts = find('StatefulSet', 'vllm-llama-3-1-8b');
  const vllm = podOf(sts).containers[0];
  const arg: string | undefined = vllm.args.find((a: string) => a.startsWith('--kv-events-config='));
  assert.ok(arg, 'vLLM runs with --kv-events-config');
  const kv = JSON.parse(arg.slice('--kv-events-config='.length));
  // Only fields vLLM's KVEventsConfig has (vllm/config/kv_events.py): a typo would fail vLLM's start.
  const fields = ['enable_kv_cache_events', 'publisher', 'endpoint', 'replay_endpoint', 'buffer_steps', 'hwm', 'max_queue_size', 'topic'];
  assert.deepEqual(Object.keys(kv).filter((k) => !fields.includes(k)), []);
  assert.equal(kv.enable_kv_cache_events, true);
  assert.equal(kv.publisher, 'zmq');
  const port = (name: string): number => vllm.ports.find((p: any) => p.name === name).containerPort;
  assert.equal(kv.endpoint, `tcp://*:${port('kv-events')}`);
  assert.equal(kv.replay_endpoint, `tcp://*:${port('kv-replay')}`);
  assert.ok(vllm.args.includes('--enable-prefix-caching'));
  const headless = find('Service', sts.spec.serviceName);
  for (const name of ['kv-events', 'kv-replay']) assert.equal(headless.spec.ports.find((p: any) => p.name === name)?.targetPort, name);

  // Every worker kvgate lists subscribes to its own pod's sockets.
  const config = deployedConfig();
  assert.equal(config.kvEvents.length, config.workers.length);
  for (const w of config.workers) {
    const e = config.kvEvents.find((x) => x.workerId === w.id);
    assert.ok(e, `${w.id} has kvEvents`);
    const host = new URL(w.url).hostname;
    assert.equal(e.endpoint, `tcp://${host}:${port('kv-events')}`);
    assert.equal(e.replayEndpoint, `tcp://${host}:${port('kv-replay')}`);
    assert.equal(e.topic ?? '', kv.topic);
  }
  // The model's exact tokenizer (hf:), from the repository vLLM serves, in a volume kvgate reads.
  const spec = config.tokenizers.models[config.workers[0]!.model] ?? config.tokenizers.default;
  assert.match(spec, /^hf:\/.+\/tokenizer\.json$/);
  const path = spec.slice(3);
  const dep = find('Deployment', 'kvgate');
  const gw = podOf(dep).containers[0];
  const mount = gw.volumeMounts.find((m: any) => path.startsWith(m.mountPath + '/'));
  assert.ok(mount, `no volume mounted for ${path}`);
  const init = podOf(dep).initContainers.find((c: any) => c.volumeMounts.some((m: any) => m.name === mount.name && !m.readOnly));
  assert.ok(init, 'an init container writes the tokenizer volume');
  const script: string = init.args.join(' ');
  const dir = path.slice(0, path.lastIndexOf('/'));
  assert.ok(script.includes(`dir=${dir};`), `the init container writes ${dir}`);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) assert.ok(script.includes(f), f);
  const repo = init.env.find((e: any) => e.name === 'MODEL_REPO').value;
  assert.equal(`--model=${repo}`, vllm.args.find((a: string) => a.startsWith('--model=')), 'the tokenizer comes from the model vLLM serves');
});
