/**
 * The recipes for kvgate as an Endpoint Picker, deploy/gateway-api/ and deploy/envoy/envoy.yaml:
 * - each Kubernetes manifest is valid: the custom resources (InferencePool, HTTPRoute, Gateway)
 *   against the openAPIV3Schema of the CRDs their projects publish, vendored in
 *   test/fixtures/crds/ (Inference Extension v1.6.0, Gateway API v1.6.1; openapi-schema.ts: the
 *   CEL rules are checked by hand below), the built-in kinds with kubernetes-models, strictly;
 * - the pieces agree with each other, with the model servers of deploy/kubernetes/ and with
 *   kvgate (its config parser, `kvgate epp`'s ports and the header it sets);
 * - envoy.yaml parses and names what kvgate epp speaks (no Envoy binary runs here: its own
 *   validation, `envoy --mode validate`, is not run).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { ConfigMap, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { parseConfig } from '../../src/config/index.js';
import { eppSection } from '../../src/config/schema/epp.js';
import { DESTINATION_KEY } from '../../src/epp/descriptor.js';
import { readCrd, validate, type Crd } from './openapi-schema.js';
import { validateStrict, type Validatable } from './strict-model.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const KIT = join(ROOT, 'deploy', 'gateway-api');
const CRDS = join(ROOT, 'test', 'fixtures', 'crds');

const crds = new Map<string, Crd>();
for (const f of readdirSync(CRDS)) {
  const crd = readCrd(readFileSync(join(CRDS, f), 'utf8'));
  crds.set(`${crd.group}/${crd.kind}`, crd);
}
const MODELS: Record<string, new (data: any) => Validatable> = {
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
};

const files = readdirSync(KIT).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
const docs = files.flatMap((file) =>
  parseAllDocuments(readFileSync(join(KIT, file), 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${file}: ${d.errors[0]!.message}`);
    return { file, obj: d.toJS() };
  }),
);
const find = (kind: string, name: string): any => {
  const d = docs.find((x) => x.obj.kind === kind && x.obj.metadata?.name === name);
  assert.ok(d, `no ${kind} ${name} in deploy/gateway-api/`);
  return d.obj;
};

/** The problems of a custom resource against its CRD's schema for its apiVersion. */
function validateCustom(obj: any): string[] {
  const [group, version] = String(obj.apiVersion).split('/');
  const crd = crds.get(`${group}/${obj.kind}`);
  assert.ok(crd, `no CRD vendored for ${obj.apiVersion} ${obj.kind}`);
  const schema = crd.versions.get(version!);
  assert.ok(schema, `${obj.kind}: version ${version} is not served by the vendored CRD`);
  return validate(schema, obj);
}

test('every manifest is valid against its published schema, with no unknown fields', () => {
  assert.ok(docs.length >= 9);
  for (const { file, obj } of docs) {
    const key = `${obj.apiVersion}/${obj.kind}`;
    const Model = MODELS[key];
    const problems = Model ? validateStrict(Model, obj) : validateCustom(obj);
    assert.deepEqual(problems, [], `${file}: ${key} ${obj.metadata.name}`);
  }
});

test('the CRD schema check catches what it is there for', () => {
  const pool = structuredClone(find('InferencePool', 'vllm-llama-3-1-8b'));
  assert.deepEqual(validateCustom(pool), []);
  const bad = (mutate: (p: any) => void): string[] => {
    const p = structuredClone(pool);
    mutate(p);
    return validateCustom(p);
  };
  assert.deepEqual(bad((p) => (p.spec.endpointPickerRef.failureMode = 'FailOpenish')), ['/spec/endpointPickerRef/failureMode: "FailOpenish" is not one of ["FailOpen","FailClose"]']);
  assert.deepEqual(bad((p) => (p.spec.targetPort = p.spec.targetPorts)), ["/spec: unknown field 'targetPort'"]);
  assert.deepEqual(bad((p) => (p.spec.targetPorts = [{ number: 70000 }])), ['/spec/targetPorts/0/number: above 65535']);
  assert.deepEqual(bad((p) => delete p.spec.selector), ["/spec: missing required field 'selector'"]);
  assert.deepEqual(bad((p) => (p.spec.selector.matchLabels = {})), ['/spec/selector/matchLabels: fewer than 1 properties']);
  const route = structuredClone(find('HTTPRoute', 'llm-route'));
  route.spec.rules[0].backendRefs[0].weight = 'heavy';
  assert.deepEqual(validateCustom(route), ['/spec/rules/0/backendRefs/0/weight: expected integer, got string']);
});

test('the CEL rules of the InferencePool CRD hold (checked by hand: no CEL evaluator here)', () => {
  const crdText = readFileSync(join(CRDS, 'inference.networking.k8s.io_inferencepools.yaml'), 'utf8');
  // The rules this checks are the CRD's own: if they change, this test must be looked at again.
  assert.match(crdText, /rule: self.all\(p1, self.exists_one\(p2, p1.number==p2.number\)\)/);
  assert.match(crdText, /rule: self.kind != 'Service' \|\| has\(self.port\)/);
  const pool = find('InferencePool', 'vllm-llama-3-1-8b');
  const ports = pool.spec.targetPorts.map((p: any) => p.number);
  assert.equal(new Set(ports).size, ports.length, 'port number must be unique');
  const ref = pool.spec.endpointPickerRef;
  assert.ok((ref.kind ?? 'Service') !== 'Service' || ref.port !== undefined, 'port is required when kind is Service');
});

test('kustomization.yaml lists every manifest of the kit', () => {
  const k = parseYaml(readFileSync(join(KIT, 'kustomization.yaml'), 'utf8'));
  assert.deepEqual([...k.resources].sort(), [...files].sort());
  assert.equal(k.namespace, 'kvgate');
});

test('the pool, route, picker and RBAC agree with each other, with the model servers and with kvgate', () => {
  const pool = find('InferencePool', 'vllm-llama-3-1-8b');
  const route = find('HTTPRoute', 'llm-route');
  const gateway = find('Gateway', 'inference-gateway');
  const svc = find('Service', 'kvgate-epp');
  const dep = find('Deployment', 'kvgate-epp');
  const cm = find('ConfigMap', 'kvgate-epp-config');
  const role = find('Role', 'kvgate-epp');
  const binding = find('RoleBinding', 'kvgate-epp');
  const sa = find('ServiceAccount', 'kvgate-epp');

  // The route sends to the pool, through the Gateway.
  assert.deepEqual(route.spec.parentRefs.map((r: any) => r.name), [gateway.metadata.name]);
  const backend = route.spec.rules[0].backendRefs[0];
  assert.deepEqual([backend.group, backend.kind, backend.name], ['inference.networking.k8s.io', 'InferencePool', pool.metadata.name]);

  // The pool selects the vLLM pods of deploy/kubernetes/ on the port they serve.
  const vllm = parseYaml(readFileSync(join(ROOT, 'deploy', 'kubernetes', 'vllm-statefulset.yaml'), 'utf8').split('\n---')[0]!);
  assert.equal(vllm.kind, 'StatefulSet');
  const podLabels = vllm.spec.template.metadata.labels;
  for (const [k, v] of Object.entries(pool.spec.selector.matchLabels)) assert.equal(podLabels[k], v, `the pool's selector ${k}=${v}`);
  const vllmPorts = vllm.spec.template.spec.containers[0].ports.map((p: any) => p.containerPort);
  for (const p of pool.spec.targetPorts) assert.ok(vllmPorts.includes(p.number), `target port ${p.number} is served by the vLLM pods`);
  assert.equal(pool.metadata.namespace, vllm.metadata.namespace);

  // The pool's picker is the Service, whose selector picks the Deployment's pods and whose ports name its container's.
  assert.equal(pool.spec.endpointPickerRef.name, svc.metadata.name);
  const tpl = dep.spec.template;
  for (const [k, v] of Object.entries(svc.spec.selector)) assert.equal(tpl.metadata.labels[k], v);
  const container = tpl.spec.containers[0];
  const portOf = (name: string): number => container.ports.find((p: any) => p.name === name)?.containerPort;
  const svcPort = (name: string): any => svc.spec.ports.find((p: any) => p.name === name);
  assert.equal(svcPort('grpc-ext-proc').port, pool.spec.endpointPickerRef.port.number);
  assert.equal(portOf(svcPort('grpc-ext-proc').targetPort), 9002);
  assert.equal(svcPort('grpc-ext-proc').appProtocol, 'kubernetes.io/h2c');

  // kvgate epp, with the ConfigMap's config: it parses, listens where the pod says, watches this pool.
  assert.deepEqual(container.args.slice(0, 3), ['epp', '--config', '/etc/kvgate/kvgate.yaml']);
  const config = parseConfig(parseYaml(cm.data['kvgate.yaml']), { KVGATE_ADMIN_KEY: 'sk-admin-0123456789', KVGATE_TENANT_KEY: 'sk-tenant-0123456789' });
  assert.equal(config.epp.listen.port, portOf('grpc'));
  assert.equal(config.epp.listen.host, '0.0.0.0');
  assert.equal(config.epp.healthPort, portOf('grpc-health'));
  assert.equal(config.epp.metricsPort, portOf('metrics'));
  assert.equal(portOf(svcPort('http-metrics').targetPort), config.epp.metricsPort);
  assert.equal(config.discovery.kubernetes?.inferencePool, pool.metadata.name);
  assert.equal(config.discovery.kubernetes?.template.model, vllm.spec.template.spec.containers[0].args.find((a: string) => a.startsWith('--served-model-name='))!.split('=')[1]);
  assert.deepEqual(container.readinessProbe.grpc, { port: config.epp.healthPort, service: 'readiness' });
  assert.deepEqual(container.livenessProbe.grpc, { port: config.epp.healthPort, service: 'liveness' });
  const env = new Set(container.env.map((e: any) => e.name));
  for (const name of ['KVGATE_ADMIN_KEY', 'KVGATE_TENANT_KEY']) assert.ok(env.has(name), `${name} is set for the config`);
  assert.equal(tpl.spec.volumes.find((v: any) => v.name === 'config').configMap.name, cm.metadata.name);

  // It runs as the service account that may read pods and InferencePools, and nothing more.
  assert.equal(tpl.spec.serviceAccountName, sa.metadata.name);
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: 'kvgate' }]);
  assert.deepEqual([binding.roleRef.kind, binding.roleRef.name], ['Role', role.metadata.name]);
  const rules = role.rules.map((r: any) => `${r.apiGroups.join()}|${r.resources.join()}|${[...r.verbs].sort().join()}`).sort();
  assert.deepEqual(rules, ['inference.networking.k8s.io|inferencepools|get,list,watch', '|pods|get,list,watch'].sort());
});

test('envoy.yaml parses and names the header, ports and modes kvgate epp speaks', () => {
  const text = readFileSync(join(ROOT, 'deploy', 'envoy', 'envoy.yaml'), 'utf8');
  const e = parseYaml(text);
  const defaults = eppSection.parse({});
  const hcm = e.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  assert.equal(hcm['@type'], 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager');
  const filters = hcm.http_filters.map((f: any) => f.name);
  assert.deepEqual(filters, ['envoy.filters.http.header_mutation', 'envoy.filters.http.ext_proc', 'envoy.filters.http.router']);
  // A client cannot pick the worker: the header kvgate sets is removed before kvgate is asked.
  assert.deepEqual(hcm.http_filters[0].typed_config.mutations.request_mutations, [{ remove: DESTINATION_KEY }]);
  const ext = hcm.http_filters[1].typed_config;
  assert.equal(ext['@type'], 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor');
  assert.deepEqual(ext.processing_mode, {
    request_header_mode: 'SEND',
    response_header_mode: 'SEND',
    request_body_mode: 'FULL_DUPLEX_STREAMED',
    response_body_mode: 'FULL_DUPLEX_STREAMED',
    request_trailer_mode: 'SEND',
    response_trailer_mode: 'SEND',
  });
  assert.equal(typeof ext.failure_mode_allow, 'boolean');
  // failure_mode_allow is explained where it is set: both values.
  const around = text.slice(text.indexOf('# What happens when kvgate cannot be reached'), text.search(/^\s+failure_mode_allow: (true|false)$/m));
  assert.match(around, /false \(fail closed/);
  assert.match(around, /true \(fail open\)/);
  const clusters = new Map<string, any>(e.static_resources.clusters.map((c: any) => [c.name, c]));
  assert.equal(ext.grpc_service.envoy_grpc.cluster_name, 'ext_proc');
  const route = hcm.route_config.virtual_hosts[0].routes[0].route;
  const dst = clusters.get(route.cluster);
  assert.equal(dst.type, 'ORIGINAL_DST');
  assert.equal(dst.lb_policy, 'CLUSTER_PROVIDED');
  assert.deepEqual(dst.original_dst_lb_config, { use_http_header: true, http_header_name: DESTINATION_KEY });
  const proc = clusters.get('ext_proc');
  const ep = proc.load_assignment.endpoints[0].lb_endpoints[0].endpoint;
  assert.equal(ep.address.socket_address.port_value, defaults.listen.port);
  assert.equal(ep.health_check_config.port_value, defaults.healthPort);
  assert.equal(proc.health_checks[0].grpc_health_check.service_name, 'envoy.service.ext_proc.v3.ExternalProcessor');
  assert.ok(proc.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config.http2_protocol_options, 'gRPC needs HTTP/2 to kvgate');
});
