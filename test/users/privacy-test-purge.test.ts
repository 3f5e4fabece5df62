// Part A, Users: the nightly purge of test data, with its races on PostgreSQL. Tests here move the
// clock forward by days; each signs in again as it needs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { purgeTestData } from '../../src/modules/users/purge.js';
import { blockedBy, client, commitWhileWaiting } from '../helpers/locks.js';
import { createApiKey, createUser, login, uniqueEmail } from '../helpers/fixtures.js';
import {
  assertError, assertStatus, auditFor, auditOfTarget, call, createApplication, createOrganization, DAY, grant, orgGrant, outboxFor, rand, sql, userRow,
} from './support.js';
import { privacyCalls } from './privacy-support.js';

let t: TestApp;

before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const { requestErasure, count } = privacyCalls(() => ({ t }));

test('test data older than 30 days is purged nightly; live rows and younger test rows stay', async () => {
  const live = await createUser(t, { mode: 'live' });
  const old = await createUser(t, { mode: 'test' });
  await login(t, old);
  await login(t, live);
  const app = await createApplication(t);
  await grant(t, old.id, app.id, { mode: 'test' });
  await grant(t, live.id, app.id);
  t.clock.advance(31 * DAY);
  const young = await createUser(t, { mode: 'test' });
  const result = await t.deps.jobs.runNow('test-purge');
  assert.ok(result, 'ran');
  assert.equal(await userRow(t, old.id), undefined, 'old test user purged');
  for (const table of ['profiles', 'settings', 'sessions', 'role_assignments', 'entitlements', 'identities']) {
    assert.equal(await count(table, 'user_id = $1', [old.id]), 0, `${table} of the old test user purged`);
    assert.ok((await count(table, 'user_id = $1', [live.id])) >= 1, `${table} of the live user kept`);
  }
  // What is left about the old user is the purge's own announcement of the grant it deleted (test data
  // itself); its platform member Role goes with the user record, unannounced.
  assert.deepEqual((await auditFor(t, old.id)).map((a) => [a.action, a.actor_type]), [['entitlement.deleted', 'system']], 'old test audit rows purged');
  assert.ok((await count('audit_events', 'target_user_id = $1', [live.id])) >= 1, 'live audit rows kept');
  assert.equal((await userRow(t, live.id))!.status, 'active');
  assert.equal((await userRow(t, young.id))!.test_mode, true, 'a test user younger than 30 days stays');
  assert.equal((await call(t, 'GET', '/v1/users/me', await login(t, live))).statusCode, 200);
});

test('the test purge takes a purged test user\'s mails with it, as the erasure does: a reset mail queued just before the purge is deleted and never sent (its link died with the user)', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: old.email, test_mode: true } });
  assert.equal(forgot.statusCode, 202);
  assert.equal(await count('emails', `user_id = $1 AND template = 'password_reset' AND status = 'queued'`, [old.id]), 1, 'precondition: the reset mail is queued');
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, old.id), undefined, 'precondition: the old test user is purged');
  assert.equal(await count('emails', 'user_id = $1', [old.id]), 0, 'the purged user\'s mails are gone');
  await t.deps.jobs.runNow('mail-delivery');
  assert.equal(await count('emails', `lower(to_address) = lower($1) AND status IN ('sent', 'logged')`, [old.email]), 0, 'nothing was sent to the purged user');
});

test('"Test rows older than 30 days are purged": live mails are not test rows, so the test purge leaves a live mail still queued after 31 days where it is, while it takes a test one of the same age', async () => {
  const live = await createUser(t, { mode: 'live' });
  const tester = await createUser(t, { mode: 'test' });
  for (const [user, testMode] of [[live, false], [tester, true]] as const) {
    const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email, test_mode: testMode } });
    assert.equal(forgot.statusCode, 202);
    assert.equal(await count('emails', `user_id = $1 AND template = 'password_reset' AND status = 'queued'`, [user.id]), 1, 'precondition: the reset mail is queued');
  }
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await count('emails', `user_id = $1 AND status = 'queued'`, [live.id]), 1, 'the live queued mail stays');
  assert.equal(await count('emails', 'user_id = $1', [tester.id]), 0, 'the 31-day-old test mail goes');
});

test('the test purge is a hard delete like the erasure cascade: a stored Idempotency-Key answer of an admin\'s write to a purged test user in its last 24 hours (their Profile) is dropped; a retry runs again and gets 404 user_not_found instead of replaying the purged Profile', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const testAdmin = await createUser(t, { mode: 'test', roles: ['superadmin'] });
  const write = { display_name: 'Purged Person', contact_email: 'purged-contact@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${old.id}/profile`, await login(t, testAdmin), write, { 'idempotency-key': 'purge-late-write' }), 200);
  assert.equal(first.display_name, 'Purged Person');
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');

  const retry = await call(t, 'PATCH', `/v1/users/${old.id}/profile`, await login(t, testAdmin), write, { 'idempotency-key': 'purge-late-write' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'user_not_found');
  for (const value of ['Purged Person', 'purged-contact@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('"API keys are not purged (a CI\'s test key must keep working)": a test-mode key older than 30 days, made by a test user the purge removes, still authenticates after the nightly test purge', async () => {
  const creator = await createUser(t, { mode: 'test' });
  const key = await createApiKey(t, { mode: 'test', permissions: ['users.list'], createdBy: creator.id });
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', key.secret), 200);
  t.clock.advance(31 * DAY);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, creator.id), undefined, 'the test user who made the key is purged');
  assert.equal(await count('api_keys', 'id = $1', [key.id]), 1, 'the key stays');
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', key.secret), 200);
});

test('the test purge is a hard delete like the erasure cascade: a stored Idempotency-Key answer of an admin\'s PATCH /v1/users/{id} of a purged test user in its last 24 hours (the User, with its email) is dropped; a retry runs again and gets 404 user_not_found instead of replaying the purged User', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const testAdmin = await createUser(t, { mode: 'test', roles: ['superadmin'] });
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${old.id}`, await login(t, testAdmin), { status: 'suspended' }, { 'idempotency-key': 'purge-late-user-write' }), 200);
  assert.equal(first.email, old.email);
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');

  const retry = await call(t, 'PATCH', `/v1/users/${old.id}`, await login(t, testAdmin), { status: 'suspended' }, { 'idempotency-key': 'purge-late-user-write' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'user_not_found');
  assert.ok(!retry.body.includes(old.email), 'the retry shows the purged email');
});

test('the test purge is a hard delete like the erasure cascade: a purged test user\'s own stored Idempotency-Key answer (`me` is the caller) of a PATCH /v1/users/me in its last 24 hours (the User, with its email) is gone from the database with them', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const own = await call(t, 'PATCH', '/v1/users/me', await login(t, old), { email: uniqueEmail('purged-own') }, { 'idempotency-key': 'purge-own-write' });
  assert.equal(assertStatus(own, 200).email, old.email);
  assert.equal(await count('idempotency_keys', `key = 'purge-own-write'`, []), 1, 'the answer was stored');
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');
  assert.equal(await count('idempotency_keys', `key = 'purge-own-write'`, []), 0, 'the stored answer about the purged user went with them');
});

test('the test purge takes an erased test user older than 30 days with the record of their completed erasure request', async () => {
  const user = await createUser(t, { mode: 'test' });
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.deepEqual(await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]), [{ status: 'completed' }], 'precondition');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, user.id), undefined, 'the erased test user is purged');
  assert.equal(await count('erasure_requests', 'user_id = $1', [user.id]), 0);
  assert.equal(await count('settings', 'user_id = $1', [user.id]), 0);
});

test('only test rows older than 30 days are purged: a test user 29 days old stays, with its profile and sessions', async () => {
  const recent = await createUser(t, { mode: 'test' });
  await login(t, recent);
  t.clock.advance(29 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, recent.id))?.test_mode, true, 'a 29-day-old test user stays');
  assert.equal(await count('profiles', 'user_id = $1', [recent.id]), 1);
  assert.equal(await count('sessions', 'user_id = $1', [recent.id]), 1);
});

test('"Test rows older than 30 days are purged nightly", on the clock: a test user exactly 30 days old is not older than 30 days and stays; a millisecond later it is purged', async () => {
  await withStoppedClock(t, async () => {
    const edge = await createUser(t, { mode: 'test' });
    t.clock.advance(30 * DAY);
    await t.deps.jobs.runNow('test-purge');
    assert.equal((await userRow(t, edge.id))?.test_mode, true, 'exactly 30 days old: kept');
    t.clock.advance(0.001);
    await t.deps.jobs.runNow('test-purge');
    assert.equal(await userRow(t, edge.id), undefined, '30 days and 1 ms old: purged');
  });
});

test('the test purge keeps test owners of shared catalog rows: a test User owning an Application (and its Tenant), and a test Organization owning one with its org admin, stay after 30 days; a plain old test user goes', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage'] });
  const owner = await createUser(t, { mode: 'test' });
  const orgAdmin = await createUser(t, { mode: 'test' });
  const plain = await createUser(t, { mode: 'test' });
  const slug = () => `purge-${Math.random().toString(36).slice(2, 8)}`;
  const app = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Owned by a test user', launch_url: 'https://owned.example.com', owner_user_id: owner.id }), 201);
  const org = { id: await createOrganization(t, [orgAdmin.id], { mode: 'test' }) };
  const orgApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Owned by a test org', launch_url: 'https://org-owned.example.com', owner_organization_id: org.id }), 201);
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, plain.id), undefined, 'a test user owning nothing is purged');
  assert.equal((await userRow(t, owner.id))?.id, owner.id, "the Application's test owner stays");
  assert.equal((await userRow(t, orgAdmin.id))?.id, orgAdmin.id, "the owning Organization's org admin stays");
  assert.equal(await count('organizations', 'id = $1', [org.id]), 1, 'the owning test Organization stays');
  assert.equal(await count('organization_members', 'organization_id = $1 AND user_id = $2', [org.id, orgAdmin.id]), 1, 'with its org admin');
  const [tenant] = await sql(t, 'SELECT owner_user_id FROM tenants WHERE id = $1', [app.tenant_id]);
  assert.equal(tenant.owner_user_id, owner.id);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, key.secret), 200).owner_user_id, owner.id);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${orgApp.id}`, key.secret), 200).owner_organization_id, org.id);
  assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, key.secret), 200);
});

test('the test purge is a hard delete like any other for the test users who stay: a member younger than 30 days of a purged test Organization, and a kept test owner whose old test entitlement goes, get access.revoked (entitlement_deleted, test_mode) once for each Application whose access flips (Part B: access.revoked fires on allowed to not allowed)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage', 'entitlements.manage'] });
  const app = await createApplication(t);
  const orgAdmin = await createUser(t, { mode: 'test' });
  const org = await createOrganization(t, [orgAdmin.id], { mode: 'test' });
  await orgGrant(t, org, app.id, { mode: 'test' });
  // A test user owning an Application is kept by the purge; their personal test grant is not.
  const owner = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: `own-${Math.random().toString(36).slice(2, 8)}`, name: 'Owned', launch_url: 'https://owned.example.com', owner_user_id: owner.id }), 201);
  await grant(t, owner.id, app.id, { mode: 'test' });
  t.clock.advance(20 * DAY);
  const young = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${org}/members`, key.secret, { user_id: young.id }), 201);
  const allowed = async (id: string) => assertStatus(await call(t, 'GET', `/v1/users/${id}/apps/${app.id}/effective-permissions`, key.secret), 200).allowed;
  assert.equal(await allowed(young.id), true, 'precondition: the young member reaches the Application through the org grant');
  assert.equal(await allowed(owner.id), true, 'precondition: the owner reaches it through the personal grant');
  t.clock.advance(11 * DAY);
  const revoked = async (id: string) => (await outboxFor(t, id)).filter((e) => e.type === 'access.revoked');
  assert.deepEqual(await revoked(young.id), []);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, young.id))?.status, 'active', 'the young member stays');
  assert.equal((await userRow(t, owner.id))?.status, 'active', 'the owner stays');
  for (const id of [young.id, owner.id]) {
    assert.equal(await allowed(id), false, 'access is gone');
    const events = await revoked(id);
    assert.deepEqual(events.map((e) => [e.application_id, e.test_mode, e.data.reason, e.data.entitlement_status]), [[app.id, true, 'entitlement_deleted', 'none']]);
  }
  // A second run finds nothing more to announce.
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await revoked(young.id)).length, 1);
});

test('"entitlement.deleted | hard-deleted": the nightly test purge announces each test Entitlement it hard-deletes (a personal grant and an Organization\'s grant), once, in test mode (webhook with the last state, audit with actor system); live grants of the same age are left alone', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['entitlements.manage', 'organizations.manage'] });
  const liveKey = await createApiKey(t, { mode: 'live', permissions: ['entitlements.manage'] });
  const app = await createApplication(t);
  const holder = await createUser(t, { mode: 'test' });
  const liveHolder = await createUser(t, { mode: 'live' });
  const personal = assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/entitlements`, key.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `k-${rand()}` }), 201);
  const live = assertStatus(await call(t, 'POST', `/v1/users/${liveHolder.id}/entitlements`, liveKey.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `k-${rand()}` }), 201);
  const org = await createOrganization(t, [holder.id], { mode: 'test' });
  const orgWide = assertStatus(await call(t, 'POST', `/v1/organizations/${org}/entitlements`, key.secret, { application_id: app.id }, { 'idempotency-key': `k-${rand()}` }), 201);
  t.clock.advance(31 * DAY);
  const deletedEvents = (id: string) => sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [id]);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await count('entitlements', 'id = ANY($1::text[])', [[personal.id, orgWide.id]]), 0, 'precondition: both test grants are purged');
  for (const { included_member_count: _count, ...ent } of [personal, orgWide]) {
    const events = await deletedEvents(ent.id);
    assert.equal(events.length, 1, `one entitlement.deleted for ${ent.id}: ${JSON.stringify(events)}`);
    assert.equal(events[0].application_id, app.id);
    assert.equal(events[0].test_mode, true);
    assert.deepEqual(events[0].data.entitlement, ent, 'the last state');
    const audit = await auditOfTarget(t, ent.id, 'entitlement.deleted');
    assert.deepEqual(audit.map((a) => [a.actor_type, a.application_id, a.test_mode]), [['system', app.id, true]]);
    assert.deepEqual(audit[0].before, ent);
  }
  assert.equal(await count('entitlements', 'id = $1', [live.id]), 1, 'the live grant stays');
  assert.deepEqual(await deletedEvents(live.id), []);
  // A second run purges nothing more and announces nothing more.
  await t.deps.jobs.runNow('test-purge');
  for (const ent of [personal, orgWide]) {
    assert.equal((await deletedEvents(ent.id)).length, 1);
    assert.equal((await auditOfTarget(t, ent.id, 'entitlement.deleted')).length, 1);
  }
});

test('"organization.member_removed | an active membership … is removed" and "role.removed | assignment … deleted": the nightly test purge announces each membership and Role assignment it hard-deletes (audit with actor system, webhook routed as a removal is), once: a purged member of a test Organization that stays, a young member of a purged test Organization, and a purged user\'s app Role on an Application that stays', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage', 'roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  // A test Organization kept by the purge (it owns an Application), its org admin kept with it.
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  await orgGrant(t, kept, app.id, { mode: 'test' });
  // A plain old test user, member of the kept Organization (reaching the Application through its grant) and holding its app Role.
  const leaver = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { user_id: leaver.id }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${leaver.id}/roles/${roleId}`, key.secret), 201);
  // An old test Organization purged whole; a member who joins it later is young and stays.
  const goneAdmin = await createUser(t, { mode: 'test' });
  const gone = await createOrganization(t, [goneAdmin.id], { mode: 'test' });
  t.clock.advance(20 * DAY);
  const young = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${gone}/members`, key.secret, { user_id: young.id }), 201);
  t.clock.advance(11 * DAY);
  const purgedAt = t.clock.now();
  const memberEvents = () => sql(t, `SELECT application_id, test_mode, data, path_application_ids FROM outbox_events WHERE type = 'organization.member_removed' AND created_at >= $1 ORDER BY data->>'organization_id', data->>'user_id'`, [purgedAt]);
  const memberAudit = () => sql(t, `SELECT organization_id, target_user_id, actor_type, test_mode, before FROM audit_events WHERE action = 'organization.member_removed' AND created_at >= $1 ORDER BY organization_id, target_user_id`, [purgedAt]);
  const roleEvents = (userId: string) => sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'role.removed' AND data->>'user_id' = $1 ORDER BY data->>'role_id'`, [userId]);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, leaver.id), undefined, 'precondition: the old member is purged');
  assert.equal(await count('organizations', 'id = $1', [kept]), 1, 'precondition: the owning Organization stays');
  assert.equal(await count('organizations', 'id = $1', [gone]), 0, 'precondition: the old Organization is purged');
  assert.equal((await userRow(t, young.id))?.status, 'active', 'precondition: the young member stays');

  const removed = [
    { organization_id: kept, user_id: leaver.id, role: 'member' },
    { organization_id: gone, user_id: goneAdmin.id, role: 'org_admin' },
    { organization_id: gone, user_id: young.id, role: 'member' },
  ].sort((a, b) => (a.organization_id + a.user_id < b.organization_id + b.user_id ? -1 : 1));
  const events = await memberEvents();
  assert.deepEqual(events.map((e) => [e.application_id, e.test_mode, e.data]), removed.map((m) => [null, true, m]), 'one organization.member_removed per purged membership');
  assert.deepEqual(events.find((e) => e.data.user_id === leaver.id)!.path_application_ids, [app.id], 'routed to the Application the membership reached');
  assert.deepEqual((await memberAudit()).map((a) => [a.organization_id, a.target_user_id, a.actor_type, a.test_mode, a.before]),
    removed.map((m) => [m.organization_id, m.user_id, 'system', true, { ...m, membership_status: 'active' }]));

  const roles = await roleEvents(leaver.id);
  // Not the platform member Role: part of the user record, it goes unannounced (as in erasure).
  assert.deepEqual(roles.map((r) => [r.application_id, r.test_mode, r.data]), [[app.id, true, { user_id: leaver.id, role_id: roleId, application_id: app.id }]]);
  assert.deepEqual((await auditOfTarget(t, roleId, 'role.removed')).map((a) => [a.target_user_id, a.application_id, a.actor_type, a.test_mode]), [[leaver.id, app.id, 'system', true]]);
  assert.deepEqual(await roleEvents(keptAdmin.id), [], 'kept users keep their Roles');

  // A second run deletes nothing more and announces nothing more.
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await memberEvents()).length, 3);
  assert.equal((await memberAudit()).length, 3);
  assert.equal((await roleEvents(leaver.id)).length, 1);
});

if (storageName === 'postgres') test('three test purges running at once announce each purged membership and Role assignment once: only the run whose DELETE removed the row announces it', async () => {
  const members = [await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' })];
  const org = await createOrganization(t, members.map((u) => u.id), { mode: 'test' });
  const key = await createApiKey(t, { mode: 'test', permissions: ['roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  for (const u of members) assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${roleId}`, key.secret), 201);
  t.clock.advance(31 * DAY);
  const since = t.clock.now();
  await Promise.all([purgeTestData(t.deps), purgeTestData(t.deps), purgeTestData(t.deps)]);
  const sent = await sql(t, `SELECT type, data->>'user_id' AS user_id, count(*)::int AS n FROM outbox_events WHERE type IN ('organization.member_removed', 'role.removed') AND created_at >= $1 AND data->>'user_id' = ANY($2::text[]) GROUP BY 1, 2 ORDER BY 1, 2`, [since, members.map((u) => u.id)]);
  const audited = await sql(t, `SELECT action AS type, target_user_id AS user_id, count(*)::int AS n FROM audit_events WHERE action IN ('organization.member_removed', 'role.removed') AND created_at >= $1 AND target_user_id = ANY($2::text[]) GROUP BY 1, 2 ORDER BY 1, 2`, [since, members.map((u) => u.id)]);
  const once = ['organization.member_removed', 'role.removed'].flatMap((type) => members.map((u) => u.id).sort().map((user_id) => ({ type, user_id, n: 1 })));
  assert.deepEqual(sent, once, 'webhooks');
  assert.deepEqual(audited, once, 'audit rows');
  assert.equal(await count('organizations', 'id = $1', [org]), 0);
});

if (storageName === 'postgres') test('"organization.member_removed" once when a member removal meets the test purge (PostgreSQL): the purge locks the Organizations whose memberships it deletes before it deletes any, so a DELETE /v1/organizations/{id}/members/{userId} of a purged membership waits for it and answers 404 member_not_found, and the removal is announced once, by the purge', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  // A test Organization kept by the purge (it owns an Application), and an old test user invited to it.
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  const leaver = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { email: leaver.email }), 201);
  t.clock.advance(31 * DAY);
  const since = t.clock.now();
  // The purge is held at its delete of the user (its last step about them), the removal sent while it is.
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [leaver.id]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const purge = purgeTestData(t.deps);
    const purgePid = await blockedBy(watcher, rows[0].pid, 'the purge');
    const removal = call(t, 'DELETE', `/v1/organizations/${kept}/members/${leaver.id}`, key.secret);
    await blockedBy(watcher, purgePid, 'the member removal');
    await holder.query('COMMIT');
    await purge;
    assertError(await removal, 404, 'member_not_found');
  } finally {
    await holder.end();
    await watcher.end();
  }
  assert.equal(await userRow(t, leaver.id), undefined, 'precondition: the old test user is purged');
  const audited = await sql(t, `SELECT actor_type, before FROM audit_events WHERE action = 'organization.member_removed' AND target_user_id = $1 AND created_at >= $2`, [leaver.id, since]);
  assert.deepEqual(audited.map((a) => [a.actor_type, a.before]), [['system', { organization_id: kept, user_id: leaver.id, role: 'member', membership_status: 'pending' }]], 'one removal, the purge\'s');
});

/**
 * Runs the test purge held at its delete of `userId`'s profile (after it locked the users it purges),
 * starts `op` once the purge waits, and lets the purge commit once `op` waits for it: `op` found the
 * user live before the purge and takes the user's lock (or its foreign-key check does) after it.
 * PostgreSQL only.
 */
async function whilePurgeDeletes<T>(userId: string, op: () => Promise<T>): Promise<T> {
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM profiles WHERE user_id = $1 FOR UPDATE', [userId]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const purge = purgeTestData(t.deps);
    const purgePid = await blockedBy(watcher, rows[0].pid, 'the purge');
    const running = op();
    await blockedBy(watcher, purgePid, 'the operation');
    await holder.query('COMMIT');
    await purge;
    assert.equal(await userRow(t, userId), undefined, 'precondition: the purge deleted the user');
    return await running;
  } finally {
    await holder.end();
    await watcher.end();
  }
}

if (storageName === 'postgres') test('a personal grant (POST /v1/users/{id}/entitlements) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and writes nothing: the user is read again under its lock (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['entitlements.manage'] });
  const app = await createApplication(t);
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/users/${victim.id}/entitlements`, key.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `purged-${rand(8)}` }));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('entitlements', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'entitlement.granted' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('a Role assignment (POST /v1/users/{id}/roles/{roleId}) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and announces nothing (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/users/${victim.id}/roles/${roleId}`, key.secret));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('role_assignments', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'role.assigned' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('a membership added by user_id (POST /v1/organizations/{id}/members) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and announces nothing (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const admin = await createUser(t, { mode: 'test' });
  const org = await createOrganization(t, [admin.id], { mode: 'test' });
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/organizations/${org}/members`, key.secret, { user_id: victim.id }));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('organization_members', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'organization.member_added' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('"a grant, an assignment or a membership may target" only a live user: a personal grant, a Role assignment and a membership by user_id that waited for the user\'s soft delete (an erasure request, DELETE /v1/users/{id}) answer 404 user_not_found and write nothing, so the erasure cascade is not left a grant announced for a deleted user (PostgreSQL)', async () => {
  const entKey = await createApiKey(t, { permissions: ['entitlements.manage'] });
  const roleKey = await createApiKey(t, { permissions: ['roles.manage'] });
  const orgKey = await createApiKey(t, { permissions: ['organizations.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  const admin = await createUser(t);
  const org = await createOrganization(t, [admin.id]);
  const deletedMeanwhile = (id: string): [string, unknown[]][] => [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [id]],
    [`UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [id]],
  ];
  const writes: [string, (id: string) => Promise<Awaited<ReturnType<typeof call>>>][] = [
    ['grant', (id) => call(t, 'POST', `/v1/users/${id}/entitlements`, entKey.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `deleted-${rand(8)}` })],
    ['assignment', (id) => call(t, 'POST', `/v1/users/${id}/roles/${roleId}`, roleKey.secret)],
    ['membership', (id) => call(t, 'POST', `/v1/organizations/${org}/members`, orgKey.secret, { user_id: id })],
  ];
  for (const [label, write] of writes) {
    const user = await createUser(t);
    const res = await commitWhileWaiting(t, deletedMeanwhile(user.id), () => write(user.id));
    assert.equal(res.statusCode, 404, `${label}: ${res.body}`);
    assert.equal(res.json().error.code, 'user_not_found', label);
    assert.equal(await count('entitlements', 'user_id = $1', [user.id]), 0, label);
    assert.equal(await count('role_assignments', 'user_id = $1 AND role_id = $2', [user.id, roleId]), 0, label);
    assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0, label);
  }
});

test('the test purge keeps a test owner of a Tenant that no longer holds their Application (docs/decisions.md "Test purge": "a test User who owns an Application or a Tenant, a test Organization that owns one, and that Organization\'s org admins are kept"): after the Application moved to another owner, the old owner User and the old owner Organization with its org admin stay with their Tenants', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage'] });
  const [formerUser, orgAdmin] = [await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' })];
  const org = await createOrganization(t, [orgAdmin.id], { mode: 'test' });
  const slug = () => `moved-${Math.random().toString(36).slice(2, 8)}`;
  const userApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Moved from a user', launch_url: 'https://moved.example.com', owner_user_id: formerUser.id }), 201);
  const orgApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Moved from an org', launch_url: 'https://moved.example.com', owner_organization_id: org }), 201);
  for (const app of [userApp, orgApp]) {
    const newOwner = await createUser(t, { mode: 'test' }); // one each: a Starter Tenant holds one Application
    const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, key.secret, { owner_user_id: newOwner.id, owner_organization_id: null }), 200);
    assert.notEqual(moved.tenant_id, app.tenant_id, 'precondition: the Application left its first Tenant');
  }
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, formerUser.id))?.id, formerUser.id, 'the owner of the emptied Tenant stays');
  assert.equal(await count('organizations', 'id = $1', [org]), 1, 'the Organization owning the emptied Tenant stays');
  assert.equal((await userRow(t, orgAdmin.id))?.id, orgAdmin.id, 'with its org admin');
  const owners = await sql(t, 'SELECT t.id, t.owner_user_id, t.owner_organization_id FROM tenants t WHERE t.id = ANY($1::text[]) ORDER BY t.id', [[userApp.tenant_id, orgApp.tenant_id]]);
  for (const o of owners) {
    const ownerLeft = o.owner_user_id ? await userRow(t, o.owner_user_id) : (await sql(t, 'SELECT id FROM organizations WHERE id = $1', [o.owner_organization_id]))[0];
    assert.ok(ownerLeft, `Tenant ${o.id} keeps an owner that exists`);
  }
});

test('the test purge keeps a test User who owns an Application whose Tenant is not theirs (docs/decisions.md "Test purge": "a test User who owns an Application or a Tenant … kept rather than leaving an owner id that points nowhere"): the Application is kept with its owner, whoever owns the Tenant', async () => {
  const tenantOwner = await createUser(t, { mode: 'test' });
  const owner = await createUser(t, { mode: 'test' });
  const app = await createApplication(t, { owner: tenantOwner.id });
  await sql(t, 'UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, owner.id]);
  assert.deepEqual(await sql(t, 'SELECT owner_user_id FROM tenants WHERE owner_user_id = $1', [owner.id]), [], 'precondition: the owner owns no Tenant');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, owner.id))?.id, owner.id, "the Application's owner stays");
  assert.deepEqual(await sql(t, 'SELECT owner_user_id FROM applications WHERE id = $1', [app.id]), [{ owner_user_id: owner.id }]);
});

test('the test purge keeps an Organization\'s org admins, not its pending invitees (Part B: "A pending membership grants nothing"; an owner is "any org_admin", active, as src/access/ownership.ts reads it): an old test user invited as org_admin to a test Organization that owns an Application, never accepting, is purged with the invitation; the active org admin stays', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  const invitee = await createUser(t, { mode: 'test' });
  assert.equal(assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { email: invitee.email, role: 'org_admin' }), 201).membership_status, 'pending');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, invitee.id), undefined, 'the pending invitee owns nothing and is purged');
  assert.equal(await count('organization_members', 'organization_id = $1 AND user_id = $2', [kept, invitee.id]), 0);
  assert.equal((await userRow(t, keptAdmin.id))?.id, keptAdmin.id, 'the active org admin stays');
});
