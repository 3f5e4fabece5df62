// Organizations: creation, visibility, listing, rename, suspend and reactivate (Part B, "Organization
// and member", "Organization status and membership", "Organization-wide grants and Organizations").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, withStoppedClock, storageName, type TestApp } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import {
  accept, accessEvents, addById, afterChangeCommitsMeanwhile, assertError, assertStatus, call, createOrgApi, effective, invite, membership, newApp, orgAudit, orgGrantApi, orgGrantReq, outbox,
  orgWithMembers, patchEnt, person, platformKey, rand, session, sql,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const suspendOrg = async (orgId: string, reason = 'compliance review') =>
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${orgId}`, admin, { status: 'suspended', reason }), 200);

test('POST /v1/organizations: any active user with a User token creates one (201) and becomes its first org_admin in the same transaction; audit organization.created; organization.member_added for the creator ("an active membership begins")', async () => {
  const user = await person(t);
  const res = await call(t, 'POST', '/v1/organizations', user.token, { name: 'Acme Research' });
  const org = assertStatus(res, 201);
  assert.match(org.id, /^org_/);
  assert.equal(org.name, 'Acme Research');
  assert.equal(org.status, 'active');
  assert.equal(org.member_count, 1);
  assert.equal(org.created_by, user.id);
  assert.equal(org.test_mode, false);
  assert.equal(typeof org.created_at, 'string');
  assert.equal(typeof org.updated_at, 'string');
  const members = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members`, user.token), 200);
  assert.equal(members.data.length, 1);
  assert.equal(members.data[0].user_id, user.id);
  assert.equal(members.data[0].role, 'org_admin');
  assert.equal(members.data[0].membership_status, 'active');
  assert.notEqual(members.data[0].joined_at, null);
  const audit = await orgAudit(t, org.id, 'organization.created');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_type, 'user');
  assert.equal(audit[0].actor_id, user.id);
  assert.equal(audit[0].target_type, 'organization');
  assert.equal(audit[0].target_id, org.id);
  assert.equal(audit[0].after.id, org.id);
  assert.equal(audit[0].after.name, 'Acme Research');
  const added = await orgAudit(t, org.id, 'organization.member_added');
  assert.equal(added.length, 1);
  assert.deepEqual(added[0].after, { organization_id: org.id, user_id: user.id, role: 'org_admin' });
  const events = await sql(t, `SELECT type, data FROM outbox_events WHERE data->>'organization_id' = $1 ORDER BY seq`, [org.id]);
  assert.deepEqual(events, [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: user.id, role: 'org_admin' } }]);
});

test('an Organization created with a test-mode User token is test_mode: true (Organization field test_mode), in the answer and when fetched', async () => {
  const user = await person(t, { mode: 'test' });
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: 'Sandbox Org' }), 201);
  assert.equal(org.test_mode, true);
  assert.equal(org.created_by, user.id);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, user.token), 200).test_mode, true);
  assert.equal((await orgAudit(t, org.id, 'organization.created'))[0].after.test_mode, true);
});

test('POST /v1/organizations with an API key: 400 user_token_required and nothing is created', async () => {
  const name = `Keyed ${rand(4)}`;
  assertError(await call(t, 'POST', '/v1/organizations', admin, { name }), 400, 'user_token_required');
  assert.equal((await sql(t, 'SELECT id FROM organizations WHERE name = $1', [name])).length, 0);
});

test('Organization name 1–100 characters, counted in code points: 100 characters (emoji included) are accepted on create and rename; 101 and an empty name are 422 validation_failed naming name and change nothing', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const user = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: E.repeat(100) }), 201);
  assert.equal([...org.name].length, 100);
  for (const name of [E.repeat(101), 'n'.repeat(101), '']) {
    const err = assertError(await call(t, 'POST', '/v1/organizations', user.token, { name }), 422, 'validation_failed');
    assert.deepEqual(err.details.fields.map((f: { path: string }) => f.path), ['name']);
    const rename = assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, user.token, { name }), 422, 'validation_failed');
    assert.deepEqual(rename.details.fields.map((f: { path: string }) => f.path), ['name']);
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM organizations WHERE created_by = $1', [user.id]))[0].n, 1);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, user.token, { name: 'n'.repeat(100) }), 200).name, 'n'.repeat(100));
});

test('organization creation limit: 10 per user per day; the 11th gets 429 rate_limited', async () => {
  const user = await person(t);
  for (let i = 0; i < 10; i++) assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: `Burst ${i}` }), 201);
  const res = await call(t, 'POST', '/v1/organizations', user.token, { name: 'Burst 11' });
  assertError(res, 429, 'rate_limited');
  assert.ok(Number(res.headers['retry-after']) > 0, 'Retry-After is sent');
  assert.equal((await sql(t, 'SELECT id FROM organizations WHERE created_by = $1', [user.id])).length, 10);
  // The limit is per user: another user still creates one.
  await createOrgApi(t);
});

test('organization creation limit: 10 per user per day also when the creations arrive at once: of 20 concurrent creations 10 succeed and 10 get 429 rate_limited', async () => {
  const user = await person(t);
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => call(t, 'POST', '/v1/organizations', user.token, { name: `Rush ${i}` })));
  assert.deepEqual(answers.map((r) => r.statusCode).sort(), [...Array(10).fill(201), ...Array(10).fill(429)]);
  for (const r of answers.filter((a) => a.statusCode === 429)) {
    assertError(r, 429, 'rate_limited');
    assert.ok(Number(r.headers['retry-after']) > 0, `Retry-After on every 429 (${r.headers['retry-after']})`);
  }
  assert.equal((await sql(t, 'SELECT id FROM organizations WHERE created_by = $1', [user.id])).length, 10);
});

test('organization creation limit is a rolling 24 hours: 10 just before midnight UTC leave none for just after, and Retry-After counts to the first one\'s 24 hours', async () => {
  const now = t.clock.now().getTime();
  t.clock.advance((86_400_000 - (now % 86_400_000) - 120_000) / 1000); // 23:58 UTC
  const user = await person(t);
  for (let i = 0; i < 10; i++) assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: `Late ${i}` }), 201);
  t.clock.advance(240); // 00:02 the next day
  const res = await call(t, 'POST', '/v1/organizations', user.token, { name: 'Early' });
  assertError(res, 429, 'rate_limited');
  const retry = Number(res.headers['retry-after']);
  assert.ok(retry > 86_400 - 300 && retry <= 86_400 - 240, `Retry-After ${retry} s: until the first creation is 24 hours old`);
});

test('organization creation limit, 10 per user per day, at the boundary: one second before the first creation is 24 hours old the 11th is 429 rate_limited, at 24 hours it is created', async () => {
  await withStoppedClock(t, async () => {
    const user = await person(t);
    for (let i = 0; i < 10; i++) assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: `Day ${i}` }), 201);
    t.clock.advance(86_399);
    const token = (await session(t, user)).access_token; // the first access token has expired by now
    assertError(await call(t, 'POST', '/v1/organizations', token, { name: 'Early' }), 429, 'rate_limited');
    t.clock.advance(1);
    assertStatus(await call(t, 'POST', '/v1/organizations', token, { name: 'On time' }), 201);
  });
});

test('organization creation limit: the 429 rate_limited is not recorded against its Idempotency-Key: the same request retried with the same key after Retry-After creates the organization (201), once', async () => {
  const user = await person(t);
  for (let i = 0; i < 10; i++) assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: `Keyed ${i}` }), 201);
  const hours = 23;
  t.clock.advance(hours * 3600);
  let moved = hours * 3600;
  try {
    const key = { 'idempotency-key': `org-quota-${user.id}` };
    const fresh = (await session(t, user)).access_token;
    const limited = await call(t, 'POST', '/v1/organizations', fresh, { name: 'Keyed 11' }, key);
    assertError(limited, 429, 'rate_limited');
    const retryAfter = Number(limited.headers['retry-after']);
    assert.ok(retryAfter > 0 && retryAfter <= 3600, `Retry-After ${retryAfter}`);
    t.clock.advance(retryAfter + 1);
    moved += retryAfter + 1;
    const retried = await call(t, 'POST', '/v1/organizations', (await session(t, user)).access_token, { name: 'Keyed 11' }, key);
    const org = assertStatus(retried, 201);
    assert.equal(retried.headers['idempotent-replayed'], undefined);
    assert.equal(org.name, 'Keyed 11');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM organizations WHERE created_by = $1', [user.id]))[0].n, 11);
    assert.equal((await orgAudit(t, org.id, 'organization.created')).length, 1);
    const replay = await call(t, 'POST', '/v1/organizations', (await session(t, user)).access_token, { name: 'Keyed 11' }, key);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(replay.body, retried.body);
  } finally {
    t.clock.advance(-moved);
  }
});

test('GET /v1/organizations/{id}: active members and organizations.manage see it; pending invitees and non-members get 404 organization_not_found', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const invitee = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, invitee.email), 201);
  const stranger = await person(t);
  const superadmin = await person(t, { roles: ['superadmin'] });
  for (const cred of [org.owner.token, org.members[0].token, superadmin.token, admin]) {
    const body = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, cred), 200);
    assert.equal(body.id, org.id);
    assert.equal(body.member_count, 2, 'member_count counts active members only');
  }
  for (const cred of [invitee.token, stranger.token]) {
    assertError(await call(t, 'GET', `/v1/organizations/${org.id}`, cred), 404, 'organization_not_found');
    assertError(await call(t, 'GET', `/v1/organizations/${org.id}/members`, cred), 404, 'organization_not_found');
    assertError(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements`, cred), 404, 'organization_not_found');
  }
  assertError(await call(t, 'GET', '/v1/organizations/org_doesnotexist', superadmin.token), 404, 'organization_not_found');
});

test('GET /v1/organizations lists own Organizations, active and pending, with my_role and my_membership_status', async () => {
  const user = await person(t);
  const { org: own } = await createOrgApi(t, user, 'Own Org');
  const other = await orgWithMembers(t, admin);
  assertStatus(await invite(t, other.owner.token, other.id, user.email), 201);
  const unrelated = await orgWithMembers(t, admin);
  const list = assertStatus(await call(t, 'GET', '/v1/organizations', user.token), 200);
  const byId = new Map(list.data.map((o: any) => [o.id, o]));
  assert.deepEqual([...byId.keys()].sort(), [own.id, other.id].sort());
  assert.equal(byId.has(unrelated.id), false);
  const mine: any = byId.get(own.id);
  assert.equal(mine.my_role, 'org_admin');
  assert.equal(mine.my_membership_status, 'active');
  const pending: any = byId.get(other.id);
  assert.equal(pending.my_role, 'member');
  assert.equal(pending.my_membership_status, 'pending');
});

test('GET /v1/organizations pages newest first (by id among Organizations of one instant) with limit and cursor: a user\'s own Organizations, active and pending, and the q filter hold on every page, none repeated or skipped; organizations.manage pages everything', async () => {
  const user = await person(t);
  const prefix = `Paged ${rand(6)}`;
  const own: any[] = [];
  await atOneInstant(t, async () => {
    for (let i = 0; i < 3; i++) own.push((await createOrgApi(t, user, `${prefix} ${i}`)).org);
  });
  const { org: invited, owner: inviter } = await createOrgApi(t, undefined, `${prefix} invited`);
  assertStatus(await invite(t, inviter.token, invited.id, user.email), 201);
  const { org: unrelated } = await createOrgApi(t, undefined, `${prefix} unrelated`);
  await createOrgApi(t, user, `Other ${rand(6)}`);
  const order = (orgs: any[]) => [...orgs].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at) || (a.id < b.id ? 1 : -1)).map((o) => o.id);
  const walk = async (token: string) => {
    const walked: string[] = [];
    let cursor: string | null = null;
    do {
      const body: any = assertStatus(await call(t, 'GET', `/v1/organizations?q=${encodeURIComponent(prefix)}&limit=2${cursor ? `&cursor=${cursor}` : ''}`, token), 200);
      assert.ok(body.data.length <= 2 && body.data.every((o: any) => o.name.startsWith(prefix)), JSON.stringify(body.data));
      walked.push(...body.data.map((o: any) => o.id));
      cursor = body.page.next_cursor;
      assert.equal(body.page.has_more, cursor !== null);
    } while (cursor);
    return walked;
  };
  assert.deepEqual(await walk(user.token), order([...own, invited]));
  assert.deepEqual(await walk(admin), order([...own, invited, unrelated]));
});

test('GET /v1/organizations with organizations.manage lists everything without my_role; filters status and q (name prefix)', async () => {
  const prefix = `Zeta${rand(3)}`;
  const { org: one } = await createOrgApi(t, undefined, `${prefix} One`);
  const { org: two } = await createOrgApi(t, undefined, `${prefix} Two`);
  const { org: notPrefix } = await createOrgApi(t, undefined, `Other ${prefix}`);
  await suspendOrg(two.id);
  const all = assertStatus(await call(t, 'GET', `/v1/organizations?q=${encodeURIComponent(prefix)}`, admin), 200);
  assert.deepEqual(all.data.map((o: any) => o.id).sort(), [one.id, two.id].sort());
  assert.ok(!all.data.some((o: any) => o.id === notPrefix.id), '!all.data.some((o: any) => o.id === notPrefix.id)');
  for (const o of all.data) {
    assert.equal('my_role' in o, false, 'no my_role for organizations.manage');
    assert.equal('my_membership_status' in o, false);
  }
  const suspended = assertStatus(await call(t, 'GET', `/v1/organizations?status=suspended&q=${encodeURIComponent(prefix)}`, admin), 200);
  assert.deepEqual(suspended.data.map((o: any) => o.id), [two.id]);
  assert.equal(suspended.data[0].status, 'suspended');
  const active = assertStatus(await call(t, 'GET', `/v1/organizations?status=active&q=${encodeURIComponent(prefix)}`, admin), 200);
  assert.deepEqual(active.data.map((o: any) => o.id), [one.id]);
  // A superadmin user token (organizations.manage) sees Organizations it does not belong to.
  const superadmin = await person(t, { roles: ['superadmin'] });
  const viaUser = assertStatus(await call(t, 'GET', `/v1/organizations?q=${encodeURIComponent(prefix)}`, superadmin.token), 200);
  assert.deepEqual(viaUser.data.map((o: any) => o.id).sort(), [one.id, two.id].sort());
  assert.equal('my_role' in viaUser.data[0], false);
});

test('GET /v1/organizations with an API key lacking organizations.manage: 403 forbidden naming the permission, no Organization listed (own Organizations are a user\'s, everything is organizations.manage\'s)', async () => {
  await createOrgApi(t);
  const key = await platformKey(t, ['users.list']);
  const res = await call(t, 'GET', '/v1/organizations', key);
  assertError(res, 403, 'forbidden');
  assert.equal(res.json().error.details.required_permission, 'organizations.manage');
  assert.equal('data' in res.json(), false);
});

test('GET /v1/organizations?q= finds a name searched exactly as it is stored, also where JavaScript and PostgreSQL lower it differently (`İ`, a word-final `Σ`)', async () => {
  const tag = rand(4);
  for (const name of [`İstanbul Devs ${tag}`, `ΟΔΟΣ Ένα ${tag}`]) {
    const { org } = await createOrgApi(t, undefined, name);
    for (const q of [name, name.split(' ')[0], name.split(' ')[0].toUpperCase()]) {
      const found = assertStatus(await call(t, 'GET', `/v1/organizations?q=${encodeURIComponent(q)}`, admin), 200).data.map((o: any) => o.id);
      assert.ok(found.includes(org.id), `q=${q} finds ${name}`);
    }
  }
});

test('a PATCH of an Organization that changes nothing (same name, same status, a reason alone) writes no organization.updated; a real suspend writes one', async () => {
  const org = await orgWithMembers(t, admin);
  for (const body of [{ name: org.name }, { reason: 'just a note' }, { status: 'active' }]) {
    assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, body), 200).status, 'active');
  }
  assert.equal((await orgAudit(t, org.id, 'organization.updated')).length, 0);
  await suspendOrg(org.id, 'a');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'suspended', reason: 'b' }), 200).status, 'suspended');
  assert.equal((await orgAudit(t, org.id, 'organization.updated')).length, 1);
});

test('PATCH is a partial update, also under concurrency: a rename and two suspends of one Organization at the same time keep both changes and write two organization.updated rows (the repeated suspend changes nothing), each starting from the stored row (on PostgreSQL the three run at once)', async () => {
  for (let round = 0; round < 6; round++) {
    const org = await orgWithMembers(t, admin);
    const res = await Promise.all([
      call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { name: 'Renamed Concurrently' }),
      call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'suspended', reason: 'one' }),
      call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'suspended', reason: 'two' }),
    ]);
    for (const r of res) assertStatus(r, 200);
    const stored = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, admin), 200);
    assert.deepEqual([stored.name, stored.status], ['Renamed Concurrently', 'suspended'], `round ${round}`);
    const audit = await orgAudit(t, org.id, 'organization.updated');
    assert.equal(audit.length, 2, `round ${round}: ${JSON.stringify(audit.map((a) => [a.before, a.after]))}`);
    const fromOriginal = audit.filter((r) => r.before.name === org.name && r.before.status === 'active');
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the original`);
    const second = audit.find((r) => r !== fromOriginal[0])!;
    assert.deepEqual([second.before.name, second.before.status], [fromOriginal[0].after.name, fromOriginal[0].after.status]);
  }
});

test('PATCH /v1/organizations/{id}: an org admin renames it (organization.updated); a plain member gets 403 forbidden', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const created = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, org.owner.token), 200);
  t.clock.advance(60);
  const renamed = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { name: 'Renamed Co' }), 200);
  assert.equal(renamed.name, 'Renamed Co');
  assert.equal(renamed.status, 'active');
  assert.equal(renamed.created_at, created.created_at);
  assert.ok(Date.parse(renamed.updated_at) - Date.parse(created.updated_at) >= 60_000, 'a rename moves updated_at');
  const audit = await orgAudit(t, org.id, 'organization.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.name, org.name);
  assert.equal(audit[0].after.name, 'Renamed Co');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.members[0].token, { name: 'Hijacked' }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT name FROM organizations WHERE id = $1', [org.id]))[0].name, 'Renamed Co');
  assert.equal((await orgAudit(t, org.id, 'organization.updated')).length, 1);
});

test('suspend and reactivate only by organizations.manage: an org admin sending status gets 403 forbidden; the reason is recorded on the audit event', async () => {
  const org = await orgWithMembers(t, admin);
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { status: 'suspended' }), 403, 'forbidden');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { name: 'x', status: 'suspended', reason: 'self' }), 403, 'forbidden');
  const row = (await sql(t, 'SELECT name, status FROM organizations WHERE id = $1', [org.id]))[0];
  assert.deepEqual(row, { name: org.name, status: 'active' });
  const suspended = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'suspended', reason: 'chargeback investigation' }), 200);
  assert.equal(suspended.status, 'suspended');
  let audit = await orgAudit(t, org.id, 'organization.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_type, 'api_key');
  assert.equal(audit[0].before.status, 'active');
  assert.equal(audit[0].after.status, 'suspended');
  assert.ok(JSON.stringify(audit[0]).includes('chargeback investigation'), 'reason recorded on the audit event');
  // The org admin cannot reactivate either.
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { status: 'active' }), 403, 'forbidden');
  const reactivated = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'active', reason: 'resolved' }), 200);
  assert.equal(reactivated.status, 'active');
  audit = await orgAudit(t, org.id, 'organization.updated');
  assert.equal(audit.length, 2);
  assert.equal(audit[1].after.status, 'active');
  assert.ok(JSON.stringify(audit[1]).includes('resolved'), 'JSON.stringify(audit[1]).includes(\'resolved\')');
});

test('a suspended Organization is frozen for its org admins: a rename by an org admin is 403 organization_suspended; organizations.manage may still rename it', async () => {
  const org = await orgWithMembers(t, admin);
  await suspendOrg(org.id);
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { name: 'Renamed While Frozen' }), 403, 'organization_suspended');
  assert.equal((await sql(t, 'SELECT name FROM organizations WHERE id = $1', [org.id]))[0].name, org.name);
  assert.equal((await orgAudit(t, org.id, 'organization.updated')).length, 1, 'only the suspension');
  const renamed = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { name: 'Renamed By Platform' }), 200);
  assert.deepEqual([renamed.name, renamed.status], ['Renamed By Platform', 'suspended']);
});

test('the reason belongs to organizations.manage: an org admin sending a reason (alone or with a name) gets 403 forbidden and nothing changes', async () => {
  const org = await orgWithMembers(t, admin);
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { reason: 'my note' }), 403, 'forbidden');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}`, org.owner.token, { name: 'With A Reason', reason: 'my note' }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT name FROM organizations WHERE id = $1', [org.id]))[0].name, org.name);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.updated'), []);
});

test('while suspended: inviting, accepting, adding, org grant creation and PATCH or DELETE of its org_seat entitlement return 403 organization_suspended; existing members keep access', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const member = org.members[0];
  const app = await newApp(t, admin);
  const other = await newApp(t, admin);
  const grant = await orgGrantApi(t, admin, org.id, app.id);
  const invitee = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, invitee.email), 201);
  const outsider = await person(t);
  await suspendOrg(org.id);

  assertError(await invite(t, org.owner.token, org.id, uniqueEmail('late')), 403, 'organization_suspended');
  assertError(await invite(t, admin, org.id, uniqueEmail('late')), 403, 'organization_suspended');
  assertError(await addById(t, admin, org.id, outsider.id), 403, 'organization_suspended');
  assert.equal(await membership(t, org.id, outsider.id), undefined);
  assertError(await accept(t, invitee.token, org.id), 403, 'organization_suspended');
  assert.equal((await membership(t, org.id, invitee.id))?.membership_status, 'pending');
  assertError(await orgGrantReq(t, admin, org.id, { application_id: other.id }), 403, 'organization_suspended');
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1 AND application_id = $2', [org.id, other.id])).length, 0);
  assertError(await patchEnt(t, org.owner.token, grant.id, { status: 'disabled', disabled_reason: 'cost cutting' }), 403, 'organization_suspended');
  assertError(await patchEnt(t, org.owner.token, grant.id, { member_scope: 'denylist', member_overrides: [member.id] }), 403, 'organization_suspended');
  assertError(await patchEnt(t, admin, grant.id, { status: 'disabled', disabled_reason: 'cost cutting' }), 403, 'organization_suspended');
  assert.equal((await sql(t, 'SELECT status, member_scope FROM entitlements WHERE id = $1', [grant.id]))[0].status, 'active');
  // DELETE of the org grant is a write under the Organization too (the operation documents the 403), for platform entitlements.manage.
  assertError(await call(t, 'DELETE', `/v1/entitlements/${grant.id}`, admin), 403, 'organization_suspended');
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE id = $1', [grant.id])).length, 1);
  assert.deepEqual(await outbox(t, { entitlementId: grant.id, types: ['entitlement.deleted'] }), []);

  // Existing grants and members' access are untouched.
  for (const u of [org.owner, member]) {
    const view = await effective(t, admin, u.id, app.id);
    assert.equal(view.allowed, true);
    assert.equal(view.entitlement_status, 'active');
    assert.deepEqual(await accessEvents(t, u.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  }
  assert.equal((await effective(t, admin, invitee.id, app.id)).allowed, false);

  // Reactivated: the pending invitee can join again.
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'active' }), 200);
  assert.equal(assertStatus(await accept(t, invitee.token, org.id), 200).membership_status, 'active');
  assert.deepEqual(await accessEvents(t, invitee.id, app.id), [['access.granted', 'org_member_added', 'active']]);
});

// While suspended, every member write under the Organization returns 403 organization_suspended,
// whoever sends it (the spec makes no exception for organizations.manage or for the member leaving).
const suspendedMemberWrites: [string, (org: Awaited<ReturnType<typeof orgWithMembers>>) => [string, string, string | null, unknown?]][] = [
  ['an org admin changing a role', (org) => ['PATCH', `/v1/organizations/${org.id}/members/${org.members[0].id}`, org.owner.token, { role: 'org_admin' }]],
  ['organizations.manage changing a role', (org) => ['PATCH', `/v1/organizations/${org.id}/members/${org.members[0].id}`, admin, { role: 'org_admin' }]],
  ['an org admin removing a member', (org) => ['DELETE', `/v1/organizations/${org.id}/members/${org.members[0].id}`, org.owner.token]],
  ['organizations.manage removing a member', (org) => ['DELETE', `/v1/organizations/${org.id}/members/${org.members[0].id}`, admin]],
  ['a member leaving (DELETE members/me)', (org) => ['DELETE', `/v1/organizations/${org.id}/members/me`, org.members[0].token]],
];
for (const [label, req] of suspendedMemberWrites) {
  test(`while suspended, ${label} returns 403 organization_suspended and changes nothing`, async () => {
    const org = await orgWithMembers(t, admin, 1);
    const app = await newApp(t, admin);
    await orgGrantApi(t, admin, org.id, app.id);
    await suspendOrg(org.id);
    const [method, url, cred, body] = req(org);
    assertError(await call(t, method, url, cred, body), 403, 'organization_suspended');
    const row = await membership(t, org.id, org.members[0].id);
    assert.equal(row?.membership_status, 'active');
    assert.equal(row?.role, 'member');
    assert.deepEqual(await accessEvents(t, org.members[0].id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  });
}

test('while suspended, declining or withdrawing a pending invitation and changing a pending member\'s role return 403 organization_suspended; the invitation stays pending and nothing is audited', async () => {
  const org = await orgWithMembers(t, admin);
  const declining = await person(t);
  const withdrawn = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, declining.email), 201);
  assertStatus(await invite(t, org.owner.token, org.id, withdrawn.email), 201);
  await suspendOrg(org.id);
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, declining.token), 403, 'organization_suspended');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${withdrawn.id}`, org.owner.token), 403, 'organization_suspended');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${withdrawn.id}`, admin), 403, 'organization_suspended');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${withdrawn.id}`, org.owner.token, { role: 'org_admin' }), 403, 'organization_suspended');
  for (const u of [declining, withdrawn]) {
    const row = await membership(t, org.id, u.id);
    assert.equal(row?.membership_status, 'pending');
    assert.equal(row?.role, 'member');
  }
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_removed'), []);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_role_changed'), []);
});

test('while suspended, every write to its org grant returns 403 organization_suspended, platform entitlements.manage included: DELETE, ends_at, order_id and revoke; the grant and its members\' access stay', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  const grant = await orgGrantApi(t, admin, org.id, app.id);
  await suspendOrg(org.id);
  assertError(await call(t, 'DELETE', `/v1/entitlements/${grant.id}`, admin), 403, 'organization_suspended');
  assertError(await patchEnt(t, admin, grant.id, { ends_at: new Date(t.clock.now().getTime() + 86_400_000).toISOString() }), 403, 'organization_suspended');
  assertError(await patchEnt(t, admin, grant.id, { order_id: 'ord_late' }), 403, 'organization_suspended');
  assertError(await patchEnt(t, admin, grant.id, { status: 'revoked', disabled_reason: 'ended' }), 403, 'organization_suspended');
  const row = (await sql(t, 'SELECT status, ends_at, order_id FROM entitlements WHERE id = $1', [grant.id]))[0];
  assert.deepEqual({ ...row }, { status: 'active', ends_at: null, order_id: null });
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action <> 'entitlement.granted'`, [grant.id]))[0].n, 0);
  assert.deepEqual(await accessEvents(t, org.members[0].id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers these tests.
if (storageName === 'postgres') test('a suspension that commits while a member or grant write waits for the Organization applies to it (PostgreSQL): inviting, adding, accepting, changing a role, withdrawing, leaving and an org grant return 403 organization_suspended and change nothing', async () => {
  const suspend = (orgId: string): [string, unknown[]] => [`UPDATE organizations SET status = 'suspended', updated_at = now() WHERE id = $1`, [orgId]];
  const org = await orgWithMembers(t, admin, 2);
  const [member, leaving] = org.members;
  const app = await newApp(t, admin);
  const [invitee, withdrawn, outsider] = [await person(t), await person(t), await person(t)];
  for (const u of [invitee, withdrawn]) assertStatus(await invite(t, org.owner.token, org.id, u.email), 201);
  const late = uniqueEmail('late');
  const writes: [string, () => Promise<any>][] = [
    ['an invitation', () => invite(t, org.owner.token, org.id, late)],
    ['an addition by user_id', () => addById(t, admin, org.id, outsider.id)],
    ['an acceptance', () => accept(t, invitee.token, org.id)],
    ['a role change', () => call(t, 'PATCH', `/v1/organizations/${org.id}/members/${member.id}`, org.owner.token, { role: 'org_admin' })],
    ['a withdrawal', () => call(t, 'DELETE', `/v1/organizations/${org.id}/members/${withdrawn.id}`, org.owner.token)],
    ['leaving', () => call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, leaving.token)],
    ['an org grant', () => orgGrantReq(t, admin, org.id, { application_id: app.id })],
  ];
  for (const [label, write] of writes) {
    // Active again before each write; the test's own transaction suspends it while the write waits.
    assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}`, admin, { status: 'active' }), 200);
    const res = await afterChangeCommitsMeanwhile(t, org.id, suspend(org.id), write);
    assert.equal(res.statusCode, 403, `${label}: ${res.body}`);
    assert.equal(res.json().error.code, 'organization_suspended', label);
  }
  assert.deepEqual(await sql(t, `SELECT id FROM users WHERE lower(email) = lower($1)`, [late]), [], 'no invited User');
  assert.equal(await membership(t, org.id, outsider.id), undefined);
  for (const u of [invitee, withdrawn]) assert.equal((await membership(t, org.id, u.id))?.membership_status, 'pending');
  assert.equal((await membership(t, org.id, member.id))?.role, 'member');
  assert.equal((await membership(t, org.id, leaving.id))?.membership_status, 'active');
  assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id]), []);
  // Audited (besides the reactivations): the creation, the three members joining and the two invitations made before; nothing since.
  const actions = (await orgAudit(t, org.id)).map((a) => a.action).filter((a) => a !== 'organization.updated').sort();
  assert.deepEqual(actions, ['organization.created', ...Array(3).fill('organization.member_added'), 'organization.member_invited', 'organization.member_invited']);
});
