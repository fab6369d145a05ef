/** WorkerRegistry under a config reload: workers added and retired, breaker thresholds retuned. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkerRegistry } from '../../src/fleet/registry.js';
import { PerWorkerLoop } from '../../src/fleet/periodic.js';

const ident = (id: string, model = 'm') => ({ id, url: `http://127.0.0.1:1/${id}`, pool: 'p', model });
const registry = (ids: string[]) =>
  new WorkerRegistry(ids.map((id) => ident(id)), { staleAfterMs: 5000, now: () => 0, breaker: { failuresToOpen: 5, coolDownMs: 60_000 } });

test('an added worker is routable at once; a retired one leaves every list but its requests keep its breaker', () => {
  const r = registry(['a', 'b']);
  const before = r.forModel('m')!;
  const c = r.add(ident('c'));
  assert.deepEqual(r.forModel('m')!.map((w) => w.id), ['a', 'b', 'c']);
  assert.deepEqual(before.map((w) => w.id), ['a', 'b'], 'a list handed out earlier is not changed under its holder');
  assert.throws(() => r.add(ident('c')), /already registered/);
  const a = r.get('a')!;
  const breaker = r.breaker('a');
  assert.equal(r.retire('a'), a);
  assert.equal(a.retired, true);
  assert.equal(a.healthy, false, 'so a request holding an older list never retries there');
  assert.equal(r.get('a'), undefined);
  assert.deepEqual(r.workers.map((w) => w.id), ['b', 'c']);
  assert.deepEqual(r.forModel('m')!.map((w) => w.id), ['b', 'c']);
  assert.equal(r.breaker('a'), breaker, 'found by id while it drains');
  // The same id added again (a changed worker): a new entry with a new breaker.
  const a2 = r.add(ident('a', 'other'));
  assert.notEqual(r.breaker('a'), breaker);
  assert.deepEqual(r.models().sort(), ['m', 'other']);
  r.dropRetired(a);
  assert.equal(r.breaker('a'), r.breakers.get('a'));
  r.retire('a');
  assert.equal(r.forModel('other'), undefined, 'a model with no worker left is gone');
  assert.ok(a2.retired && c.retired === false);
  r.close();
});

test('retuned breaker thresholds apply to every worker at its next failure', () => {
  const r = registry(['a']);
  const b = r.breaker('a');
  b.onFailure();
  b.onFailure();
  assert.equal(b.state, 'closed');
  r.retuneBreakers({ failuresToOpen: 3, coolDownMs: 1000, overloadBackoffMs: 10, maxBackoffMs: 20, failureRate: { threshold: 0.5, minRequests: 20 } });
  b.onFailure();
  assert.equal(b.state, 'open', 'three in a row now open it');
  const c = r.add(ident('c'));
  const bc = r.breaker(c.id);
  for (let i = 0; i < 3; i++) bc.onFailure();
  assert.equal(bc.state, 'open', 'a worker added later gets the new thresholds too');
  r.close();
});

test('the per-worker loop runs an added worker and stops a removed one (a run in progress is not rescheduled)', async () => {
  const workers = [{ id: 'a' }];
  const runs: string[] = [];
  const loop = new PerWorkerLoop(workers, 20, async (w) => void runs.push(w.id));
  loop.start();
  workers.push({ id: 'b' });
  loop.add(workers[1]!);
  await new Promise((r) => setTimeout(r, 70));
  assert.ok(runs.includes('b'));
  loop.remove('a');
  workers.shift();
  const n = runs.filter((id) => id === 'a').length;
  await new Promise((r) => setTimeout(r, 70));
  assert.equal(runs.filter((id) => id === 'a').length, n, 'no run after remove()');
  loop.stop();
});

test('loaded adapters join and leave the model index; a name that conflicts is refused', () => {
  const reg = new WorkerRegistry(
    [
      { id: 'a', url: 'http://a:1', pool: 'p', model: 'm', adapters: ['conf'] },
      { id: 'b', url: 'http://b:1', pool: 'p', model: 'm' },
      { id: 'c', url: 'http://c:1', pool: 'q', model: 'n' },
    ],
    { staleAfterMs: 5000, now: () => 0, breaker: { failuresToOpen: 5, coolDownMs: 60_000 } },
  );
  const [a, b, c] = reg.workers;
  const ids = (model: string) => reg.forModel(model)?.map((w) => w.id);
  // The worker's own model, a base model's name and an adapter of another base are not routed.
  const r = reg.setLoadedAdapters(a!, ['x', 'conf', 'm', 'n', 'x']);
  assert.deepEqual(r, { added: ['x'], removed: [], refused: [{ name: 'n', reason: "'n' is a served model's own name" }] });
  assert.deepEqual(a!.adapters, ['conf', 'x']);
  reg.setLoadedAdapters(b!, ['x']);
  assert.deepEqual([ids('x'), reg.adapterOf('x')], [['a', 'b'], 'm']);
  assert.deepEqual(reg.setLoadedAdapters(c!, ['x']).refused, [{ name: 'x', reason: "adapter 'x' is served on model 'm': an adapter belongs to one base model" }]);
  // Unloaded from one worker, then the other: the name leaves the index with the last.
  assert.deepEqual(reg.setLoadedAdapters(a!, []), { added: [], removed: ['x'], refused: [] });
  assert.deepEqual([ids('x'), ids('conf'), a!.adapters], [['b'], ['a'], ['conf']]);
  reg.retire('b');
  assert.deepEqual([ids('x'), reg.adapterOf('x'), reg.models().sort()], [undefined, undefined, ['conf', 'm', 'n']]);
  // Now free, the name may serve another base model.
  assert.deepEqual(reg.setLoadedAdapters(c!, ['x']).added, ['x']);
  assert.equal(reg.adapterOf('x'), 'n');
});

test('workers that load adapters on demand are candidates for a matching name, never for a base model', () => {
  const reg = new WorkerRegistry(
    [
      { id: 'a', url: 'http://a:1', pool: 'p', model: 'm', resolveAdapters: 'cust-.*' },
      { id: 'b', url: 'http://b:1', pool: 'p', model: 'm', resolveAdapters: 'cust-.*' },
      { id: 'c', url: 'http://c:1', pool: 'q', model: 'n' },
      { id: 'd', url: 'http://d:1', pool: 'r', model: 'o', resolveAdapters: 'cust-.*|other' },
    ],
    { staleAfterMs: 5000, now: () => 0, breaker: { failuresToOpen: 5, coolDownMs: 60_000 } },
  );
  const ids = (model: string) => reg.forModel(model)?.map((w) => w.id);
  // The first resolving pool's base model claims a name; the base models stay theirs.
  assert.deepEqual([ids('cust-1'), reg.adapterOf('cust-1'), reg.serving('cust-1')], [['a', 'b'], 'm', undefined]);
  assert.deepEqual([ids('other'), reg.adapterOf('other')], [['d'], 'o']);
  assert.deepEqual([ids('m'), ids('n'), ids('x-1'), reg.adapterOf('n')], [['a', 'b'], ['c'], undefined, undefined]);
  assert.deepEqual(reg.models().sort(), ['m', 'n', 'o']);
  // Loaded on b: b is listed first, a may still load it.
  reg.setLoadedAdapters(reg.get('b')!, ['cust-1']);
  assert.deepEqual([ids('cust-1'), reg.serving('cust-1')?.map((w) => w.id)], [['b', 'a'], ['b']]);
  reg.retire('a');
  assert.deepEqual(ids('cust-2'), ['b']);
});
