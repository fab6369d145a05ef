import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { bearerKey, keyDigests, sha256, TenantDirectory } from '../../src/admission/tenants.js';
import { ApiError } from '../../src/api/errors.js';
import { ConfigError, parseConfig } from '../../src/config/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-tenants-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const POOLS = [{ name: 'p', model: 'm', workers: [{ url: 'http://127.0.0.1:1' }] }];
const hex = (k: string) => sha256(k).toString('hex');

function problems(input: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): string[] {
  try {
    parseConfig({ pools: POOLS, ...input }, env);
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    return e.problems;
  }
  assert.fail('expected a ConfigError');
}

function status(f: () => unknown): { status: number; code: string | null; message: string } {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ApiError);
    return { status: e.status, code: e.code, message: e.message };
  }
  assert.fail('expected an ApiError');
}

describe('tenants and API keys', () => {
  it('with no keys the gateway is open and every request is tenant default', () => {
    const c = parseConfig({ pools: POOLS }, {});
    const t = new TenantDirectory(c.tenants, c.admin.digests);
    assert.equal(t.open, true);
    assert.equal(t.adminGuarded, false);
    assert.equal(t.authenticate(undefined).id, 'default');
    assert.equal(t.authenticate('Bearer whatever').id, 'default');
    assert.equal(t.checkAdmin(undefined), null);
    assert.deepEqual(t.list().map((x) => x.id), ['default']);
  });

  it('reads keys as SHA-256 digests, from environment variables, from files and in plain text', () => {
    const file = join(dir, 'keys.txt');
    writeFileSync(file, '# comment\nsk-file-one\n\n  sk-file-two  \n');
    const c = parseConfig(
      {
        pools: POOLS,
        tenants: [
          { id: 'acme', keys: [{ sha256: hex('sk-acme-digest') }, { env: 'ACME_KEY' }] },
          { id: 'globex', keys: [{ file }, { value: 'sk-globex-plain' }] },
        ],
        admin: { keys: [{ env: 'ADMIN_KEY' }] },
      },
      { ACME_KEY: ' sk-acme-env\n', ADMIN_KEY: 'sk-admin-12345' },
    );
    const t = new TenantDirectory(c.tenants, c.admin.digests);
    assert.equal(t.open, false);
    assert.equal(t.authenticate('Bearer sk-acme-digest').id, 'acme');
    assert.equal(t.authenticate('Bearer sk-acme-env').id, 'acme');
    assert.equal(t.authenticate('bearer   sk-file-one ').id, 'globex', 'the scheme is case-insensitive, spaces are trimmed');
    assert.equal(t.authenticate('Bearer sk-file-two').id, 'globex');
    assert.equal(t.authenticate('Bearer sk-globex-plain').id, 'globex');
    assert.equal(t.byId('acme')?.id, 'acme');
    assert.equal(t.byId('default'), undefined, 'no implicit default tenant once keys exist');
  });

  it('answers a missing or wrong key with a 401 invalid_api_key that never repeats the key', () => {
    const c = parseConfig({ pools: POOLS, tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-secret' }] }] }, {});
    const t = new TenantDirectory(c.tenants, c.admin.digests);
    for (const h of [undefined, '', 'sk-acme-secret', 'Basic c2stYWNtZQ==', 'Bearer', 'Bearer sk-acme-secreT', 'Bearer sk-acme-secret extra']) {
      const s = status(() => t.authenticate(h));
      assert.equal(s.status, 401, String(h));
      assert.equal(s.code, 'invalid_api_key');
      assert.doesNotMatch(s.message, /secret/i);
    }
    // The admin key check: a tenant key is not an admin key.
    assert.equal(t.checkAdmin('Bearer sk-acme-secret')?.status, 403);
    assert.equal(t.checkAdmin(undefined)?.status, 401);
  });

  it('admin keys open /admin/* and nothing else', () => {
    const c = parseConfig({ pools: POOLS, tenants: [{ id: 'a', keys: [{ value: 'sk-tenant-a1' }] }], admin: { keys: [{ value: 'sk-admin-key1' }] } }, {});
    const t = new TenantDirectory(c.tenants, c.admin.digests);
    assert.equal(t.checkAdmin('Bearer sk-admin-key1'), null);
    assert.equal(status(() => t.authenticate('Bearer sk-admin-key1')).status, 401, 'an admin key is not a tenant key');
    // Admin keys alone guard /admin/* but leave the inference routes open.
    const c2 = parseConfig({ pools: POOLS, admin: { keys: [{ value: 'sk-admin-key1' }] } }, {});
    const t2 = new TenantDirectory(c2.tenants, c2.admin.digests);
    assert.equal(t2.open, true);
    assert.equal(t2.adminGuarded, true);
    assert.equal(t2.checkAdmin(undefined)?.status, 401);
  });

  it('reports unreadable key sources and ambiguous keys at load, naming the field and never the key', () => {
    assert.deepEqual(problems({ tenants: [{ id: 'a', keys: [{ env: 'NOPE' }] }] }), ['tenants[0].keys[0].env: environment variable NOPE is not set or empty']);
    assert.match(problems({ tenants: [{ id: 'a', keys: [{ file: join(dir, 'missing') }] }] })[0]!, /^tenants\[0\]\.keys\[0\]\.file: cannot read .*missing \(ENOENT\)/);
    assert.match(problems({ tenants: [{ id: 'a', keys: [{ sha256: 'abc' }] }] })[0]!, /^tenants\[0\]\.keys\[0\]\.sha256: expected 64 hex digits/);
    assert.match(problems({ tenants: [{ id: 'a', keys: [{ value: 'x', env: 'Y' }] }] }).join('\n'), /tenants\[0\]\.keys\[0\]: give exactly one of/);
    assert.match(problems({ tenants: [{ id: 'a', keys: [] }] })[0]!, /^tenants\[0\]\.keys: a tenant needs at least one key/);
    assert.match(problems({ tenants: [{ id: 'bad id', keys: [{ value: 'sk-12345678' }] }] })[0]!, /^tenants\[0\]\.id: letters, digits/);
    assert.match(problems({ tenants: [{ id: 'a', keys: [{ value: 'sk-12345678' }] }, { id: 'a', keys: [{ value: 'sk-87654321' }] }] })[0]!, /^tenants\[1\]\.id: duplicate tenant id 'a'/);
    const shared = problems({ tenants: [{ id: 'a', keys: [{ value: 'sk-shared-key' }] }, { id: 'b', keys: [{ sha256: hex('sk-shared-key') }] }] });
    assert.deepEqual(shared, ['tenants[1]: a key of tenants[1] is also a key of tenants[0]']);
    assert.ok(shared.every((p) => !p.includes('sk-shared-key')));
  });

  it('keyDigests and bearerKey', () => {
    const r = keyDigests({ value: 'sk-abcdefgh' });
    assert.ok(r.ok);
    assert.deepEqual(r.digests, [sha256('sk-abcdefgh')]);
    assert.equal(bearerKey('Bearer abc'), 'abc');
    assert.equal(bearerKey(['Bearer abc']), null);
    assert.equal(bearerKey('Token abc'), null);
  });
});

describe('TenantDirectory.replace (a config reload)', () => {
  it('takes new tenants and keys for the next request; a tenant resolved before keeps its object', () => {
    const dirTenants = new TenantDirectory([{ id: 'acme', digests: [sha256('sk-acme-one-0001')] }], []);
    const before = dirTenants.authenticate('Bearer sk-acme-one-0001');
    assert.equal(before.id, 'acme');
    assert.equal(dirTenants.open, false);
    dirTenants.replace([{ id: 'acme', digests: [sha256('sk-acme-two-0001')], priority: 'critical' }], [sha256('sk-admin-0000001')]);
    assert.throws(() => dirTenants.authenticate('Bearer sk-acme-one-0001'), (e: ApiError) => e.status === 401);
    const after = dirTenants.authenticate('Bearer sk-acme-two-0001');
    assert.equal(after.priority, 'critical');
    assert.equal(before.priority, 'standard', 'the earlier object is unchanged');
    assert.equal(dirTenants.checkAdmin('Bearer sk-admin-0000001'), null);
    dirTenants.replace([], []);
    assert.equal(dirTenants.open, true);
    assert.equal(dirTenants.adminGuarded, false);
    assert.equal(dirTenants.authenticate(undefined).id, 'default');
  });
});
