// Part A, Users: GET /v1/users (list and search) and the app-confined view of users.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, userToken, type TestUser } from '../helpers/fixtures.js';
import {
  assertError, assertFields, assertStatus, call, createApplication, createOrganization, grant, orgGrant, rand, sql, type TestApplication,
} from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };
let support: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
  support = await userToken(t, { roles: ['support'] });
});
after(() => t.close());

const list = (query: string, token = admin.token) => call(t, 'GET', `/v1/users?${query}`, token);
const ids = (res: Awaited<ReturnType<typeof list>>) => assertStatus(res, 200).data.map((u: { id: string }) => u.id);

/** Users whose emails share a fresh prefix, created `gap` seconds apart (oldest first). */
async function cohort(n: number, opts: { gap?: number; statuses?: ('active' | 'invited' | 'suspended')[] } = {}) {
  const prefix = `lst${rand(4)}`;
  const users: TestUser[] = [];
  for (let i = 0; i < n; i++) {
    if (i > 0 && opts.gap) t.clock.advance(opts.gap);
    users.push(await createUser(t, { email: `${prefix}-${i}@example.com`, status: opts.statuses?.[i] }));
  }
  return { prefix, users };
}

test('GET /v1/users (users.list) returns {data, page}, newest first, keyset-paginated', async () => {
  const { prefix, users } = await cohort(3, { gap: 1 });
  const first = assertStatus(await list(`q=${prefix}&limit=2`, support.token), 200);
  assert.deepEqual(first.data.map((u: { id: string }) => u.id), [users[2].id, users[1].id]);
  assert.equal(first.page.has_more, true);
  assert.equal(typeof first.page.next_cursor, 'string');
  const second = assertStatus(await list(`q=${prefix}&limit=2&cursor=${encodeURIComponent(first.page.next_cursor)}`, support.token), 200);
  assert.deepEqual(second.data.map((u: { id: string }) => u.id), [users[0].id]);
  assert.deepEqual(second.page, { next_cursor: null, has_more: false });
  const u = first.data[0];
  assert.deepEqual(Object.keys(u).sort(), [
    'created_at', 'email', 'email_verified', 'id', 'last_login_at', 'mfa_enabled', 'pending_email', 'signup_application_id', 'status', 'test_mode', 'updated_at',
  ]);
});

test('GET /v1/users needs users.list: a plain user gets 403 forbidden, no credential 401', async () => {
  const plain = await userToken(t);
  assertError(await list('', plain.token), 403, 'forbidden');
  assert.equal((await call(t, 'GET', '/v1/users', null)).statusCode, 401);
});

test('status filter: active, invited, suspended; deleted users are never listed otherwise', async () => {
  const { prefix, users } = await cohort(4, { statuses: ['active', 'invited', 'suspended', 'active'] });
  assert.equal((await call(t, 'DELETE', `/v1/users/${users[3].id}`, admin.token)).statusCode, 204);
  assert.deepEqual(ids(await list(`q=${prefix}&status=active`, support.token)), [users[0].id]);
  assert.deepEqual(ids(await list(`q=${prefix}&status=invited`, support.token)), [users[1].id]);
  assert.deepEqual(ids(await list(`q=${prefix}&status=suspended`, support.token)), [users[2].id]);
  assert.deepEqual(ids(await list(`q=${prefix}`, support.token)), [users[2].id, users[1].id, users[0].id]);
  assert.deepEqual(ids(await list(`q=${prefix}`, admin.token)), [users[2].id, users[1].id, users[0].id], 'not by default, even for users.manage');
  assert.deepEqual(ids(await list(`q=${prefix}&include_inactive=true`, support.token)), [users[2].id, users[1].id, users[0].id], 'never for users.list');
  assert.deepEqual(ids(await list(`q=${prefix}&include_inactive=true`, admin.token)), [users[3].id, users[2].id, users[1].id, users[0].id], 'include_inactive adds them for users.manage');
});

test('status=deleted is only for users.manage: it lists soft-deleted users (for a credential holding users.manage alone too); a users.list holder gets 403 forbidden', async () => {
  const { prefix, users } = await cohort(2);
  assert.equal((await call(t, 'DELETE', `/v1/users/${users[0].id}`, admin.token)).statusCode, 204);
  assert.deepEqual(ids(await list(`q=${prefix}&status=deleted`, admin.token)), [users[0].id]);
  const manager = await createApiKey(t, { permissions: ['users.manage'] });
  assert.deepEqual(ids(await list(`q=${prefix}&status=deleted`, manager.secret)), [users[0].id]);
  assertError(await list(`q=${prefix}&status=deleted`, support.token), 403, 'forbidden');
  const key = await createApiKey(t, { permissions: ['users.list'] });
  assertError(await list(`q=${prefix}&status=deleted`, key.secret), 403, 'forbidden');
});

test('email filter: exact match, case-insensitive', async () => {
  const { prefix, users } = await cohort(2);
  assert.deepEqual(ids(await list(`email=${encodeURIComponent(users[1].email.toUpperCase())}`, support.token)), [users[1].id]);
  assert.deepEqual(ids(await list(`email=${encodeURIComponent(users[1].email)}`, support.token)), [users[1].id]);
  assert.deepEqual(ids(await list(`email=${prefix}`, support.token)), [], 'not a prefix match');
  assert.deepEqual(ids(await list(`email=${encodeURIComponent(`x${users[1].email}`)}`, support.token)), []);
});

test('email filter matches in ASCII case only: `İ` (U+0130) and the Kelvin sign (U+212A), which PostgreSQL lowers to `i` and `k`, find no user', async () => {
  const user = await createUser(t, { email: `kim-${rand(6)}@example.com` });
  const typed = user.email.replace('k', '\u212a').replace('i', '\u0130');
  assert.deepEqual(ids(await list(`email=${encodeURIComponent(typed)}`, support.token)), []);
  assert.deepEqual(ids(await list(`email=${encodeURIComponent(user.email.toUpperCase())}`, support.token)), [user.id]);
});

test('q filter finds a name searched exactly as it is stored, also where JavaScript and PostgreSQL lower it differently (`İ`, a word-final `Σ`)', async () => {
  const tag = rand(4);
  const made: Record<string, string> = {};
  for (const name of [`İlker Yılmaz ${tag}`, `ΟΔΟΣ Ένα ${tag}`]) {
    made[name] = assertStatus(await call(t, 'POST', '/v1/users', admin.token, { email: `${rand(6)}@example.com`, display_name: name, send_invitation: false }), 201).id;
  }
  for (const [name, id] of Object.entries(made)) {
    for (const q of [name, name.split(' ')[0], name.split(' ')[0].toUpperCase()]) {
      assert.deepEqual(ids(await list(`q=${encodeURIComponent(q)}`, support.token)), [id], `q=${q} finds ${name}`);
    }
  }
});

test('q filter: case-insensitive prefix of email or display_name, minimum 3 characters (2 → 422 validation_failed naming q)', async () => {
  const tag = `Zq${rand(3)}`;
  const byName = assertStatus(
    await call(t, 'POST', '/v1/users', admin.token, { email: `${rand(4)}@example.com`, display_name: `${tag} Person`, send_invitation: false }),
    201,
  );
  const byEmail = await createUser(t, { email: `${tag.toLowerCase()}mail@example.com` });
  const middle = await createUser(t, { email: `mid${tag.toLowerCase()}@example.com` });
  const found = ids(await list(`q=${tag.toUpperCase()}`, support.token));
  assert.deepEqual(found.sort(), [byName.id, byEmail.id].sort());
  assert.ok(!found.includes(middle.id), 'a match in the middle is not a prefix');
  assert.deepEqual(ids(await list(`q=${encodeURIComponent(`${tag} pers`)}`, support.token)), [byName.id]);
  assertFields(await list('q=zq', support.token), ['query.q']);
  for (const wild of ['%25%25%25', '___', '%25' + tag.slice(1)]) assert.deepEqual(ids(await list(`q=${wild}`, support.token)), [], `q=${wild} is literal, not a pattern`);
  assert.equal((await list('q=zqx', support.token)).statusCode, 200, 'exactly 3 characters is accepted');
});

test('q "minimum 3 characters" counts code points, as every length of the API: 2 emoji, or an e and a combining accent (2 code points), are 422 validation_failed naming query.q; 3 emoji search, and find a display_name beginning with them', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units: 2 emoji are 4 units
  const tag = rand(3);
  const byName = assertStatus(
    await call(t, 'POST', '/v1/users', admin.token, { email: `${rand(4)}@example.com`, display_name: `${E.repeat(3)}${tag}`, send_invitation: false }),
    201,
  );
  assertFields(await list(`q=${encodeURIComponent(E.repeat(2))}`, support.token), ['query.q']);
  assertFields(await list(`q=${encodeURIComponent('e\u0301')}`, support.token), ['query.q']);
  assert.deepEqual(ids(await list(`q=${encodeURIComponent(`${E.repeat(3)}${tag}`)}`, support.token)), [byName.id]);
  assert.ok(ids(await list(`q=${encodeURIComponent(E.repeat(3))}`, support.token)).includes(byName.id));
});

test('application_id filter naming no Application: 422 validation_failed on query.application_id', async () => {
  assertFields(await list('application_id=app_nope', support.token), ['query.application_id']);
});

test('application_id filter: users with an entitlement row to that Application in any status', async () => {
  const app = await createApplication(t);
  const other = await createApplication(t);
  const { prefix, users } = await cohort(6);
  await grant(t, users[0].id, app.id, { status: 'active' });
  await grant(t, users[1].id, app.id, { status: 'disabled' });
  await grant(t, users[2].id, app.id, { status: 'revoked' });
  await grant(t, users[3].id, app.id, { status: 'expired' });
  await grant(t, users[4].id, other.id, { status: 'active' });
  assert.deepEqual(ids(await list(`q=${prefix}&application_id=${app.id}`, support.token)).sort(), users.slice(0, 4).map((u) => u.id).sort());
  assert.deepEqual(ids(await list(`application_id=${app.id}`, support.token)).sort(), users.slice(0, 4).map((u) => u.id).sort());
});

test('application_id filter: a user whose only access path is organization membership with a grant is listed', async () => {
  const app = await createApplication(t);
  const { users } = await cohort(2);
  const org = await createOrganization(t, [users[0].id]);
  await orgGrant(t, org, app.id);
  assert.deepEqual(ids(await list(`application_id=${app.id}`, support.token)), [users[0].id]);
});

test('application_id filter: an Application more than 1,000 users reach (too many to read the page from their ids) lists them all the same, newest first, keyset-paginated', async () => {
  const app = await createApplication(t);
  const bulk = `usr_bulk${rand(4)}_`;
  const dayAgo = new Date(t.clock.now().getTime() - 86_400_000);
  await sql(t, `INSERT INTO users (id, email, email_verified, status, test_mode, created_at, updated_at)
    SELECT $1 || g, $1 || g || '@example.com', true, 'active', false, $2::timestamptz - g * interval '1 second', $2 FROM generate_series(1, 1000) g`, [bulk, dayAgo]);
  await sql(t, `INSERT INTO profiles (user_id, display_name, updated_at) SELECT id, 'Bulk', updated_at FROM users WHERE id ^@ $1`, [bulk]);
  await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
    SELECT 'ent_' || id, id, $2, 'active', 'admin_grant', $3, false, $3, $3 FROM users WHERE id ^@ $1`, [bulk, app.id, dayAgo]);
  const { users } = await cohort(3, { gap: 1 });
  await grant(t, users[0].id, app.id, { status: 'revoked' });
  await orgGrant(t, await createOrganization(t, [users[1].id]), app.id);
  const expected = [users[1].id, users[0].id, ...Array.from({ length: 1000 }, (_, i) => `${bulk}${i + 1}`)];
  const seen: string[] = [];
  let cursor: string | null = null;
  do {
    const page = assertStatus(await list(`application_id=${app.id}&limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, support.token), 200);
    seen.push(...page.data.map((u: { id: string }) => u.id));
    cursor = page.page.next_cursor;
  } while (cursor);
  assert.deepEqual(seen, expected);
});

test('application_id filter, "organization membership with a grant": an Organization\'s pending invitee is no member, so the grant is no access path for them: neither platform users.list nor the app-scoped key lists them, and the key gets 404 user_not_found for them', async () => {
  const app = await createApplication(t);
  const { prefix, users } = await cohort(1);
  const owner = await userToken(t, { email: `${prefix}-owner@example.com` });
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: `Org ${prefix}` }), 201).id;
  assert.equal(assertStatus(await call(t, 'POST', `/v1/organizations/${org}/members`, owner.token, { email: users[0].email }), 201).membership_status, 'pending');
  await orgGrant(t, org, app.id);
  const appKey = (await createApiKey(t, { scope: app.id, permissions: ['users.list'] })).secret;
  assert.deepEqual(ids(await list(`q=${prefix}&application_id=${app.id}`, support.token)), [owner.user.id], 'the pending invitee is not listed');
  assert.deepEqual(ids(await list(`q=${prefix}`, appKey)), [owner.user.id], 'nor shown to the app-scoped key');
  assertError(await call(t, 'GET', `/v1/users/${users[0].id}`, appKey), 404, 'user_not_found');
});

test('organization_id filter: the organization members', async () => {
  const { prefix, users } = await cohort(3);
  const org = await createOrganization(t, [users[0].id, users[2].id]);
  assert.deepEqual(ids(await list(`organization_id=${org}`, support.token)), [users[2].id, users[0].id]);
  assert.deepEqual(ids(await list(`q=${prefix}&organization_id=${org}`, support.token)), [users[2].id, users[0].id]);
});

test('organization_id filter lists the Organization\'s members, not its pending invitees (an invitation not yet accepted is no membership)', async () => {
  const { prefix, users } = await cohort(3);
  const owner = await userToken(t, { email: `${prefix}-owner@example.com` });
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: `Org ${prefix}` }), 201).id;
  const invited = assertStatus(await call(t, 'POST', `/v1/organizations/${org}/members`, owner.token, { email: users[1].email }), 201);
  assert.equal(invited.membership_status, 'pending');
  assert.deepEqual(ids(await list(`organization_id=${org}`, support.token)), [owner.user.id]);
  assert.deepEqual(ids(await list(`q=${prefix}&organization_id=${org}`, support.token)), [owner.user.id]);
});

test('created_after and created_before filters (ISO 8601)', async () => {
  const { prefix, users } = await cohort(3, { gap: 10 });
  const createdB = new Date(assertStatus(await call(t, 'GET', `/v1/users/${users[1].id}`, support.token), 200).created_at);
  const at = (s: number) => encodeURIComponent(new Date(createdB.getTime() + s * 1000).toISOString());
  assert.deepEqual(ids(await list(`q=${prefix}&created_after=${at(-5)}`, support.token)), [users[2].id, users[1].id]);
  assert.deepEqual(ids(await list(`q=${prefix}&created_before=${at(5)}`, support.token)), [users[1].id, users[0].id]);
  assert.deepEqual(ids(await list(`q=${prefix}&created_after=${at(-5)}&created_before=${at(5)}`, support.token)), [users[1].id]);
  assertFields(await list('created_after=yesterday', support.token), ['query.created_after']);
});

test('"created_after, created_before": both are strict; a user created exactly at the instant is neither created after it nor before it', async () => {
  const { prefix, users } = await cohort(1);
  const created = assertStatus(await call(t, 'GET', `/v1/users/${users[0].id}`, support.token), 200).created_at;
  const at = (ms: number) => encodeURIComponent(new Date(Date.parse(created) + ms).toISOString());
  assert.deepEqual(ids(await list(`q=${prefix}&created_after=${at(0)}`, support.token)), [], 'not created after its own created_at');
  assert.deepEqual(ids(await list(`q=${prefix}&created_before=${at(0)}`, support.token)), [], 'not created before its own created_at');
  assert.deepEqual(ids(await list(`q=${prefix}&created_after=${at(-1)}`, support.token)), [users[0].id], 'created after a millisecond earlier');
  assert.deepEqual(ids(await list(`q=${prefix}&created_before=${at(1)}`, support.token)), [users[0].id], 'created before a millisecond later');
});

async function appKeyWorld(): Promise<{ app: TestApplication; key: { secret: string }; inside: TestUser[]; outside: TestUser; prefix: string }> {
  const app = await createApplication(t);
  const elsewhere = await createApplication(t);
  const { prefix, users } = await cohort(4);
  await grant(t, users[0].id, app.id);
  await grant(t, users[1].id, app.id, { status: 'disabled' });
  await grant(t, users[2].id, elsewhere.id);
  const key = await createApiKey(t, { scope: app.id, permissions: ['users.list'] });
  return { app, key, inside: [users[0], users[1]], outside: users[2], prefix };
}

test('an app-scoped key holding users.list sees only users with an access path to its Application, whatever application_id it sends (one naming no Application too)', async () => {
  const { key, inside, prefix } = await appKeyWorld();
  const other = await createApplication(t);
  const expected = inside.map((u) => u.id).sort();
  assert.deepEqual(ids(await list(`q=${prefix}`, key.secret)).sort(), expected);
  assert.deepEqual(ids(await list('', key.secret)).sort(), expected);
  assert.deepEqual(ids(await list(`application_id=${other.id}`, key.secret)).sort(), expected, 'always exactly its own application_id result');
  assert.deepEqual(ids(await list('application_id=app_nope', key.secret)).sort(), expected, 'an unknown application_id is no 422 for it either');
});

test('an app-scoped key holding users.list gets 404 user_not_found for users without an access path to its Application, and 200 for those with one', async () => {
  const { key, inside, outside } = await appKeyWorld();
  const stranger = await createUser(t);
  for (const u of inside) assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${u.id}`, key.secret), 200).id, u.id);
  for (const u of [outside, stranger]) assertError(await call(t, 'GET', `/v1/users/${u.id}`, key.secret), 404, 'user_not_found');
  // An app-scoped key without users.list sees nobody.
  const bare = await createApiKey(t, { scope: (await createApplication(t)).id, permissions: [] });
  assertError(await list('', bare.secret), 403, 'forbidden');
});

test('an app-scoped key: a user whose access path is organization membership with a grant is visible', async () => {
  const app = await createApplication(t);
  const member = await createUser(t);
  const org = await createOrganization(t, [member.id]);
  await orgGrant(t, org, app.id);
  const key = await createApiKey(t, { scope: app.id, permissions: ['users.list'] });
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${member.id}`, key.secret), 200).id, member.id);
  assert.deepEqual(ids(await list('', key.secret)), [member.id]);
});

test('test mode: a live users.list credential never lists test users and a test one never lists live users', async () => {
  const tag = `mode${rand(4)}`;
  const live = await createUser(t, { email: `${tag}@example.com`, mode: 'live' });
  const testUser = await createUser(t, { email: `${tag}@example.com`, mode: 'test' });
  const liveKey = await createApiKey(t, { permissions: ['users.list'] });
  const testKey = await createApiKey(t, { permissions: ['users.list'], mode: 'test' });
  assert.deepEqual(ids(await list(`q=${tag}`, liveKey.secret)), [live.id]);
  assert.deepEqual(ids(await list(`q=${tag}`, testKey.secret)), [testUser.id]);
  assert.deepEqual(ids(await list(`email=${tag}@example.com`, testKey.secret)), [testUser.id]);
});
