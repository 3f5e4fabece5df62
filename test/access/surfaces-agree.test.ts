// The application-facing surfaces (app-tokens, effective-permissions, AppProfile, AppSettings and
// GET /v1/users?application_id=) answer from the one resolver (src/access/resolve.ts): over user
// status × entitlement status × path kind, they agree on whether access is active and on who has a path.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, atOneInstant, type TestApp } from '../helpers/app.js';
import { appKey, call, createOrg, newApp, orgGrant, person, platformKey, rand, sql, type AppFixture } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
let own: string;
let lister: string;
let entitlementsManager: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
  own = await appKey(t, app.id, ['users.list']);
  lister = await platformKey(t, ['users.list']);
  entitlementsManager = await platformKey(t, ['entitlements.manage']);
});
after(() => t.close());

/** A personal row as the sweep may not have seen it yet (status and instants set directly). */
async function personal(userId: string, status: string, startsAt: Date, endsAt: Date | null): Promise<void> {
  await sql(
    t,
    `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, ends_at, test_mode, created_at, updated_at, start_notified_at)
     VALUES ($1, $2, $3, $4, 'admin_grant', $5, $6, false, $7, $7, $7)`,
    [`ent_${rand(10)}`, userId, app.id, status, startsAt, endsAt, t.clock.now()],
  );
}

test('Part B "allowed = user status active and entitlement_status active" (ends_at <= now is expired at once, a future starts_at scheduled; rows that exclude the member are never an access path): app-tokens, effective-permissions, AppProfile and AppSettings agree on it for self, the app key, users.list and entitlements.manage, and GET /v1/users?application_id= lists exactly the users with an access path', async () => {
  const now = t.clock.now();
  const at = (ms: number) => new Date(now.getTime() + ms);
  const H = 3600_000;
  const inOrg = async (userId: string, opts: Parameters<typeof orgGrant>[3] = {}) => orgGrant(t, await createOrg(t, [{ userId }]), app.id, opts);
  const cases: { name: string; setup: (userId: string) => Promise<unknown>; allowed: boolean; path: boolean; suspended?: boolean }[] = [
    { name: 'personal active', setup: (u) => personal(u, 'active', at(-H), null), allowed: true, path: true },
    { name: 'personal starts_at == now', setup: (u) => personal(u, 'active', now, null), allowed: true, path: true },
    { name: 'personal scheduled', setup: (u) => personal(u, 'active', at(H), null), allowed: false, path: true },
    { name: 'personal ends_at == now', setup: (u) => personal(u, 'active', at(-H), now), allowed: false, path: true },
    { name: 'personal expired before the sweep', setup: (u) => personal(u, 'active', at(-2 * H), at(-H)), allowed: false, path: true },
    { name: 'personal disabled', setup: (u) => personal(u, 'disabled', at(-H), null), allowed: false, path: true },
    { name: 'personal revoked', setup: (u) => personal(u, 'revoked', at(-H), null), allowed: false, path: true },
    { name: 'personal expired', setup: (u) => personal(u, 'expired', at(-H), null), allowed: false, path: true },
    { name: 'no path', setup: async () => {}, allowed: false, path: false },
    { name: 'org included', setup: (u) => inOrg(u), allowed: true, path: true },
    { name: 'org grant ends_at == now', setup: (u) => inOrg(u, { endsAt: now }), allowed: false, path: true },
    { name: 'org grant disabled', setup: (u) => inOrg(u, { status: 'disabled' }), allowed: false, path: true },
    { name: 'org excluded', setup: (u) => inOrg(u, { memberScope: 'allowlist', overrides: [] }), allowed: false, path: false },
    {
      name: 'org seat_limit',
      setup: async (u) => sql(t, 'INSERT INTO org_seat_limits (entitlement_id, user_id, created_at) VALUES ($1, $2, $3)', [await inOrg(u), u, now]),
      allowed: false,
      path: false,
    },
    {
      name: 'org pending member',
      setup: async (u) => orgGrant(t, await createOrg(t, [{ userId: u, status: 'pending' }]), app.id),
      allowed: false,
      path: false,
    },
    { name: 'suspended user, personal active', setup: (u) => personal(u, 'active', at(-H), null), allowed: false, path: true, suspended: true },
  ];
  await atOneInstant(t, async () => {
    for (const c of cases) {
      const user = await person(t);
      await c.setup(user.id);
      if (c.suspended) await sql(t, `UPDATE users SET status = 'suspended' WHERE id = $1`, [user.id]);
      const readers: [string, string][] = [['the app key', own], ['users.list', lister], ['entitlements.manage', entitlementsManager]];
      if (!c.suspended) readers.push(['self', user.token]);
      const statuses = new Set<string>();
      for (const [who, cred] of readers) {
        const res = await call(t, 'GET', `/v1/users/${user.id}/apps/${app.id}/effective-permissions`, cred);
        assert.equal(res.statusCode, 200, `${c.name}, effective-permissions by ${who}: ${res.body}`);
        assert.equal(res.json().allowed, c.allowed, `${c.name}, effective-permissions by ${who}`);
        statuses.add(res.json().entitlement_status);
      }
      assert.equal(statuses.size, 1, `${c.name}: one entitlement_status for every caller`);
      const data = readers.filter(([who]) => who === 'self' || who === 'the app key');
      for (const [who, cred] of data) {
        for (const route of ['profile', 'settings']) {
          const res = await call(t, 'GET', `/v1/users/${user.id}/apps/${app.id}/${route}`, cred);
          assert.equal(res.statusCode, c.allowed ? 200 : 403, `${c.name}, ${route} by ${who}: ${res.body}`);
          if (!c.allowed) assert.equal(res.json().error.code, 'entitlement_required');
        }
      }
      if (!c.suspended) {
        const res = await call(t, 'POST', '/v1/auth/app-tokens', user.token, { application_id: app.id });
        assert.equal(res.statusCode, c.allowed ? 200 : 403, `${c.name}, app-tokens: ${res.body}`);
      }
      for (const [who, cred] of [['the app key', own], ['users.list', lister]]) {
        const query = `application_id=${app.id}&email=${encodeURIComponent(user.email)}${c.suspended ? '&status=suspended' : ''}`;
        const res = await call(t, 'GET', `/v1/users?${query}`, cred);
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().data.length, c.path ? 1 : 0, `${c.name}, GET /v1/users?application_id= by ${who}`);
      }
    }
  });
});
