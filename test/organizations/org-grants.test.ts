// Organization-wide grants: POST /v1/organizations/{id}/entitlements, member scope, org admin toggles,
// granted_via and the access flips each change causes (Part B, org grant rules and Entitlement status).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import {
  accessEvents, afterChangeCommitsMeanwhile, appKey, assertError, createOrgApi, assertStatus, call, effective, entitlementEvents, invite, newApp, orgAudit, orgGrantApi, orgGrantReq, orgWithMembers,
  assertInvalid, auditOf, DAY, grant, grantReq, inSeconds, patchEnt, person, platformKey, sql,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const GRANTED: [string, string, string] = ['access.granted', 'entitlement_granted', 'active'];

test('POST /v1/organizations/{id}/entitlements: source is always org_seat; entitlement.granted once and access.granted per included active member; included_member_count', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const pending = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, pending.email), 201);
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assert.match(ent.id, /^ent_/);
  assert.equal(ent.source, 'org_seat');
  assert.equal(ent.user_id, null);
  assert.equal(ent.organization_id, org.id);
  assert.equal(ent.application_id, app.id);
  assert.equal(ent.status, 'active');
  assert.equal(ent.member_scope, 'all_members');
  assert.deepEqual(ent.member_overrides, []);
  assert.equal(ent.included_member_count, 3);
  for (const u of [org.owner, ...org.members]) {
    assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED]);
    const view = await effective(t, admin, u.id, app.id);
    assert.equal(view.allowed, true);
    assert.deepEqual(view.access_paths, [{ source: 'org_seat', entitlement_id: ent.id, status: 'active', organization_id: org.id, member_decision: 'included' }]);
  }
  assert.deepEqual(await accessEvents(t, pending.id, app.id), [], 'a pending membership grants nothing');
  const events = (await sql(t, `SELECT type, data FROM outbox_events WHERE data->'entitlement'->>'id' = $1`, [ent.id]));
  assert.deepEqual(events.map((e) => e.type), ['entitlement.granted']);
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org.id);
  const audit = await orgAudit(t, org.id, 'entitlement.granted');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_id, ent.id);
  // The audit row of the grant: the entitlement as created, on its Application and Tenant.
  const { included_member_count: _count, ...granted } = ent;
  assert.deepEqual([audit[0].before, audit[0].after, audit[0].application_id, audit[0].tenant_id], [null, granted, app.id, app.tenant_id]);
});

test('an org grant requires an Idempotency-Key; sending source gets 422', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  assert.equal((await orgGrantReq(t, admin, org.id, { application_id: app.id }, null)).statusCode, 400);
  const res = await orgGrantReq(t, admin, org.id, { application_id: app.id, source: 'org_seat' });
  assert.equal(res.statusCode, 422, res.body);
  const res2 = await orgGrantReq(t, admin, org.id, { application_id: app.id, source: 'purchase' });
  assert.equal(res2.statusCode, 422, res2.body);
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), []);
});

test('one live grant per Organization and Application: 409 entitlement_already_exists (active or disabled); a revoked one does not block', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  const first = await orgGrantApi(t, admin, org.id, app.id);
  let err = assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, first.id);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  err = assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, first.id);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'revoked', disabled_reason: 'ended' }), 200);
  const second = await orgGrantApi(t, admin, org.id, app.id);
  assert.notEqual(second.id, first.id);
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), [
    GRANTED,
    ['access.revoked', 'entitlement_disabled', 'disabled'],
    GRANTED,
  ]);
});

test('an org grant whose ends_at passed does not block a new one before the sweep: it is expired by the system in the same transaction (entitlement.expired, access.revoked entitlement_expired), then the new grant is made', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  const first = await orgGrantApi(t, admin, org.id, app.id, { ends_at: new Date(t.clock.now().getTime() + 30_000).toISOString() });
  t.clock.advance(31);
  const second = await orgGrantApi(t, admin, org.id, app.id);
  assert.notEqual(second.id, first.id);
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [first.id]))[0].status, 'expired');
  assert.deepEqual(await entitlementEvents(t, first.id), ['entitlement.granted', 'entitlement.expired']);
  const expiry = await sql(t, `SELECT actor_type FROM audit_events WHERE target_id = $1 AND action = 'entitlement.expired'`, [first.id]);
  assert.deepEqual(expiry.map((a) => a.actor_type), ['system']);
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), [
    GRANTED,
    ['access.revoked', 'entitlement_expired', 'expired'],
    GRANTED,
  ]);
  await t.deps.jobs.runNow('entitlement-expiry');
  assert.deepEqual(await entitlementEvents(t, first.id), ['entitlement.granted', 'entitlement.expired'], 'the sweep finds nothing left to do');
});

test('member_scope allowlist and denylist with member_overrides of current members only; included_member_count counts members reached', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [a, b] = org.members;
  const allowApp = await newApp(t, admin);
  const denyApp = await newApp(t, admin);
  const allow = await orgGrantApi(t, admin, org.id, allowApp.id, { member_scope: 'allowlist', member_overrides: [a.id] });
  assert.equal(allow.member_scope, 'allowlist');
  assert.deepEqual(allow.member_overrides, [a.id]);
  assert.equal(allow.included_member_count, 1);
  assert.deepEqual(await accessEvents(t, a.id, allowApp.id), [GRANTED]);
  for (const u of [org.owner, b]) assert.deepEqual(await accessEvents(t, u.id, allowApp.id), []);
  const deny = await orgGrantApi(t, admin, org.id, denyApp.id, { member_scope: 'denylist', member_overrides: [a.id] });
  assert.equal(deny.included_member_count, 2);
  assert.deepEqual(await accessEvents(t, a.id, denyApp.id), []);
  for (const u of [org.owner, b]) assert.deepEqual(await accessEvents(t, u.id, denyApp.id), [GRANTED]);
  const excluded = await effective(t, admin, a.id, denyApp.id);
  assert.equal(excluded.allowed, false);
  assert.deepEqual(excluded.access_paths, [{ source: 'org_seat', entitlement_id: deny.id, status: 'active', organization_id: org.id, member_decision: 'excluded' }]);
  // The list view carries included_member_count too.
  const list = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements`, org.owner.token), 200);
  const counts = Object.fromEntries(list.data.map((e: any) => [e.id, e.included_member_count]));
  assert.deepEqual(counts, { [allow.id]: 1, [deny.id]: 2 });
});

test('"member_scope | enum or null", "member_overrides | array of user ids or null": an org grant POST sending both as null is created with the defaults (all_members, no overrides), reaching every member', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const app = await newApp(t, admin);
  const created = await orgGrantApi(t, admin, org.id, app.id, { member_scope: null, member_overrides: null });
  assert.deepEqual([created.member_scope, created.member_overrides, created.included_member_count], ['all_members', [], 3]);
  for (const u of [org.owner, ...org.members]) assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED]);
});

test('member_overrides naming a non-member or a pending member: 422 member_override_not_a_member (create and PATCH)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const outsider = await person(t);
  const pending = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, pending.email), 201);
  const app = await newApp(t, admin);
  for (const id of [outsider.id, pending.id]) {
    assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id, member_scope: 'allowlist', member_overrides: [org.members[0].id, id] }), 422, 'member_override_not_a_member');
  }
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assertError(await patchEnt(t, org.owner.token, ent.id, { member_scope: 'denylist', member_overrides: [outsider.id] }), 422, 'member_override_not_a_member');
  assertError(await patchEnt(t, admin, ent.id, { member_scope: 'allowlist', member_overrides: [pending.id] }), 422, 'member_override_not_a_member');
  assert.equal((await sql(t, 'SELECT member_scope FROM entitlements WHERE id = $1', [ent.id]))[0].member_scope, 'all_members');
});

test('member_overrides hold at most 10,000 user ids (docs/decisions.md): 10,000 pass the size check (then 422 member_override_not_a_member for ids that are no members), 10,001 are 422 validation_failed naming member_overrides; create and PATCH, nothing changes', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  const ids = (n: number) => Array.from({ length: n }, (_, i) => `usr_${String(i).padStart(26, '0')}`);
  const fields = (res: Awaited<ReturnType<typeof call>>) => assertError(res, 422, 'validation_failed').details.fields.map((f: { path: string }) => f.path);
  assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id, member_scope: 'denylist', member_overrides: ids(10_000) }), 422, 'member_override_not_a_member');
  assert.ok(fields(await orgGrantReq(t, admin, org.id, { application_id: app.id, member_scope: 'denylist', member_overrides: ids(10_001) })).includes('member_overrides'));
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: ids(10_000) }), 422, 'member_override_not_a_member');
  assert.ok(fields(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: ids(10_001) })).includes('member_overrides'));
  assert.deepEqual((await sql(t, 'SELECT member_scope, member_overrides FROM entitlements WHERE id = $1', [ent.id]))[0], { member_scope: 'all_members', member_overrides: [] });
});

test('docs/decisions.md "member_overrides": each user id once; one named twice is 422 validation_failed naming member_overrides, before any id is looked up (a non-member named twice is not member_override_not_a_member); create and PATCH, nothing changes', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const [member] = org.members;
  const app = await newApp(t, admin);
  const stranger = `usr_${'0'.repeat(26)}`;
  const fields = (res: Awaited<ReturnType<typeof call>>) => assertError(res, 422, 'validation_failed').details.fields.map((f: { path: string }) => f.path);
  for (const twice of [[member.id, member.id], [stranger, stranger]]) {
    assert.ok(fields(await orgGrantReq(t, admin, org.id, { application_id: app.id, member_scope: 'denylist', member_overrides: twice })).includes('member_overrides'));
  }
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  for (const twice of [[member.id, member.id], [stranger, stranger]]) {
    assert.ok(fields(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: twice })).includes('member_overrides'));
  }
  assert.deepEqual((await sql(t, 'SELECT member_scope, member_overrides FROM entitlements WHERE id = $1', [ent.id]))[0], { member_scope: 'all_members', member_overrides: [] });
});

test('an org admin can never create the grant for their own Organization (403 forbidden), even as the Application owner; the Application owner who is not its org admin may', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const owned = await newApp(t, admin, { owner_user_id: org.owner.id });
  assertError(await orgGrantReq(t, org.owner.token, org.id, { application_id: owned.id }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  assert.deepEqual(await accessEvents(t, org.owner.id, owned.id), []);
  // An Application owner outside the Organization grants it.
  const other = await newApp(t, admin);
  const ent = await orgGrantApi(t, other.owner!.token, org.id, other.id);
  assert.equal(ent.source, 'org_seat');
  assert.equal(ent.included_member_count, 2);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('docs/decisions.md "A suspended Organization": grant writes read the caller\'s own membership after locking the Organization, so an Application owner promoted to its org admin while their grant waits for the Organization gets 403 forbidden and no grant (PostgreSQL)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const [member] = org.members;
  const owned = await newApp(t, admin, { owner_user_id: member.id });
  const promote: [string, unknown[]] = [`UPDATE organization_members SET role = 'org_admin' WHERE organization_id = $1 AND user_id = $2`, [org.id, member.id]];
  assertError(await afterChangeCommitsMeanwhile(t, org.id, promote, () => orgGrantReq(t, member.token, org.id, { application_id: owned.id })), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).length, 0);
  assert.deepEqual(await accessEvents(t, member.id, owned.id), []);
});

test('"A pending membership grants nothing": an Application owner invited as org_admin but not yet accepted is no org admin of the Organization, and still grants it the Application (201); once accepted, their next grant to it is 403 forbidden', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  const appOwner = app.owner!;
  assertStatus(await invite(t, org.owner.token, org.id, appOwner.email, 'org_admin'), 201);
  const ent = await orgGrantApi(t, appOwner.token, org.id, app.id);
  assert.equal(ent.source, 'org_seat');
  assert.equal(ent.included_member_count, 2, 'the pending invitee is not reached');
  assert.deepEqual(await accessEvents(t, appOwner.id, app.id), []);
  // Accepted, the owner is an org admin: org admins only scope and toggle their Organization's grants.
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members/me/accept`, appOwner.token, {}), 200);
  assertError(await orgGrantReq(t, appOwner.token, org.id, { application_id: app.id }), 403, 'forbidden');
  assert.deepEqual((await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id])).map((r) => r.id), [ent.id]);
});

test('an org admin who also holds platform entitlements.manage (a superadmin who created the Organization) may create its grant: 201', async () => {
  const boss = await person(t, { roles: ['support'] });
  const { org } = await createOrgApi(t, boss);
  const app = await newApp(t, admin);
  assert.equal(assertStatus(await orgGrantReq(t, boss.token, org.id, { application_id: app.id }), 201).source, 'org_seat');
});

test('org admins may toggle their org_seat row: disabled with disabled_reason (200, access.revoked per member), back to active (access.granted); revoke or other fields: 403 forbidden', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const member = org.members[0];
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assertError(await patchEnt(t, member.token, ent.id, { status: 'disabled', disabled_reason: 'not mine' }), 403, 'forbidden');
  const off = assertStatus(await patchEnt(t, org.owner.token, ent.id, { status: 'disabled', disabled_reason: 'budget freeze' }), 200);
  assert.equal(off.status, 'disabled');
  assert.equal(off.disabled_reason, 'budget freeze');
  for (const u of [org.owner, member]) assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED, ['access.revoked', 'entitlement_disabled', 'disabled']]);
  const on = assertStatus(await patchEnt(t, org.owner.token, ent.id, { status: 'active' }), 200);
  assert.equal(on.status, 'active');
  assert.equal(on.disabled_reason, null);
  for (const u of [org.owner, member]) assert.deepEqual((await accessEvents(t, u.id, app.id)).at(-1), ['access.granted', 'entitlement_enabled', 'active']);
  assertError(await patchEnt(t, org.owner.token, ent.id, { status: 'revoked', disabled_reason: 'done' }), 403, 'forbidden');
  assertError(await patchEnt(t, org.owner.token, ent.id, { ends_at: new Date(Date.now() + 86400_000).toISOString() }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]))[0].status, 'active');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted']);
  for (const u of [org.owner, member]) assert.equal((await accessEvents(t, u.id, app.id)).length, 3);
});

test('org admins may not renew an expired org_seat row (expired → active is for entitlements.manage or the owner): 403 forbidden, the row stays expired', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { ends_at: new Date(t.clock.now().getTime() + 30_000).toISOString() });
  t.clock.advance(31);
  await t.deps.jobs.runNow('entitlement-expiry');
  // An operator moves the term on without renewing (ends_at is changeable on an expired row).
  assertStatus(await patchEnt(t, admin, ent.id, { ends_at: new Date(t.clock.now().getTime() + 86400_000).toISOString() }), 200);
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]))[0].status, 'expired');
  assertError(await patchEnt(t, org.owner.token, ent.id, { status: 'active' }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]))[0].status, 'expired');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired', 'entitlement.updated']);
});

test('org admins may set member_scope and member_overrides: entitlement.member_scope_changed and exactly the access flips it causes (org_grant_changed)', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [a, b] = org.members;
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  const deny = assertStatus(await patchEnt(t, org.owner.token, ent.id, { member_scope: 'denylist', member_overrides: [a.id] }), 200);
  assert.equal(deny.member_scope, 'denylist');
  assert.deepEqual(deny.member_overrides, [a.id]);
  assert.deepEqual(await accessEvents(t, a.id, app.id), [GRANTED, ['access.revoked', 'org_grant_changed', 'none']]);
  for (const u of [org.owner, b]) assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED]);
  // allowlist [a]: a back in, owner and b out.
  assertStatus(await patchEnt(t, org.owner.token, ent.id, { member_scope: 'allowlist' }), 200);
  assert.deepEqual((await accessEvents(t, a.id, app.id)).at(-1), ['access.granted', 'org_grant_changed', 'active']);
  for (const u of [org.owner, b]) assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED, ['access.revoked', 'org_grant_changed', 'none']]);
  // all_members: owner and b back.
  assertStatus(await patchEnt(t, org.owner.token, ent.id, { member_scope: 'all_members', member_overrides: [] }), 200);
  for (const u of [org.owner, b]) assert.deepEqual((await accessEvents(t, u.id, app.id)).at(-1), ['access.granted', 'org_grant_changed', 'active']);
  assert.equal((await accessEvents(t, a.id, app.id)).length, 3);
  const types = await entitlementEvents(t, ent.id);
  assert.deepEqual(types, ['entitlement.granted', 'entitlement.member_scope_changed', 'entitlement.member_scope_changed', 'entitlement.member_scope_changed']);
  assert.equal((await orgAudit(t, org.id, 'entitlement.member_scope_changed')).length, 3);
  // Sending the current scope again flips nobody.
  const before = (await sql(t, `SELECT count(*)::int AS n FROM outbox_events WHERE type LIKE 'access.%' AND application_id = $1`, [app.id]))[0].n;
  assertStatus(await patchEnt(t, admin, ent.id, { member_scope: 'all_members', member_overrides: [] }), 200);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM outbox_events WHERE type LIKE 'access.%' AND application_id = $1`, [app.id]))[0].n, before);
});

test('a member added after an allowlist grant is not reached by it (no access.granted); a later denylist grant not naming them reaches them', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id, { member_scope: 'allowlist', member_overrides: [org.members[0].id] });
  const late = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: late.id }), 201);
  assert.deepEqual(await accessEvents(t, late.id, app.id), [], 'not on the allowlist: no access.granted');
  const denyApp = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, denyApp.id, { member_scope: 'denylist', member_overrides: [] });
  assert.deepEqual(await accessEvents(t, late.id, denyApp.id), [GRANTED]);
});

test('GET /v1/users/{id}/entitlements annotates org grants with granted_via {organization_id, member_decision included/excluded}', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [a, b] = org.members;
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { member_scope: 'denylist', member_overrides: [a.id] });
  for (const [u, decision] of [[a, 'excluded'], [b, 'included'], [org.owner, 'included']] as const) {
    for (const cred of [admin, u.token]) {
      const list = assertStatus(await call(t, 'GET', `/v1/users/${u.id}/entitlements`, cred), 200);
      const row = list.data.find((e: any) => e.id === ent.id);
      assert.ok(row, `org grant listed for ${decision} member`);
      assert.deepEqual(row.granted_via, { organization_id: org.id, member_decision: decision });
      assert.equal(row.user_id, null);
      assert.equal(row.source, 'org_seat');
    }
  }
  const pending = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, pending.email), 201);
  const none = assertStatus(await call(t, 'GET', `/v1/users/${pending.id}/entitlements`, admin), 200);
  assert.equal(none.data.some((e: any) => e.id === ent.id), false, 'pending members do not see org grants');
});

test('GET /v1/organizations/{id}/entitlements lists org grants for active members and organizations.manage', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const [one, two] = [await newApp(t, admin), await newApp(t, admin)];
  const g1 = await orgGrantApi(t, admin, org.id, one.id);
  const g2 = await orgGrantApi(t, admin, org.id, two.id);
  const elsewhere = await orgWithMembers(t, admin);
  await orgGrantApi(t, admin, elsewhere.id, one.id);
  for (const cred of [org.owner.token, org.members[0].token, admin]) {
    const list = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements`, cred), 200);
    assert.deepEqual(list.data.map((e: any) => e.id).sort(), [g1.id, g2.id].sort());
    for (const e of list.data) {
      assert.equal(e.organization_id, org.id);
      assert.equal(e.user_id, null);
      assert.equal(e.included_member_count, 2);
    }
  }
  const filtered = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements?application_id=${two.id}`, org.owner.token), 200);
  assert.deepEqual(filtered.data.map((e: any) => e.id), [g2.id]);
  const stranger = await person(t);
  assertError(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements`, stranger.token), 404, 'organization_not_found');
});

test('an org grant row that excludes a member is never an access path: users?application_id leaves them out and the app key cannot read them (404), as effective-permissions and app-tokens deny them', async () => {
  const app = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 2);
  const [included, excluded] = org.members;
  const ent = await orgGrantApi(t, admin, org.id, app.id, { member_scope: 'allowlist', member_overrides: [included.id] });
  const listedIds = async () =>
    assertStatus(await call(t, 'GET', `/v1/users?application_id=${app.id}&limit=100`, admin), 200).data.map((u: { id: string }) => u.id);
  assert.equal((await effective(t, admin, excluded.id, app.id)).access_paths[0].member_decision, 'excluded');
  assertError(await call(t, 'POST', '/v1/auth/app-tokens', excluded.token, { application_id: app.id }), 403, 'entitlement_required');
  let ids = await listedIds();
  assert.ok(ids.includes(included.id), 'the included member is listed');
  assert.ok(!ids.includes(excluded.id), 'the excluded member is not listed');
  const key = await appKey(t, app.id, ['users.list']);
  assertStatus(await call(t, 'GET', `/v1/users/${included.id}/profile`, key), 200);
  assertError(await call(t, 'GET', `/v1/users/${excluded.id}/profile`, key), 404, 'user_not_found');
  // A scope change that excludes the included member takes them out of the filter too.
  assertStatus(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: [included.id] }), 200);
  ids = await listedIds();
  assert.ok(!ids.includes(included.id), 'the member now denied is not listed');
  assert.ok(ids.includes(excluded.id), 'the member no longer excluded is listed');
});

test('on a restricted Tenant an org grant gives 402 subscription_required only when a member it includes would be a new seat (an allowlist of seated members is granted)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const seated = org.owner;
  const newcomer = org.members[0];
  const appB = await newApp(t, admin);
  await grant(t, admin, seated.id, appB.id);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [appB.tenant_id]);
  try {
    assertError(await orgGrantReq(t, admin, org.id, { application_id: appB.id }), 402, 'subscription_required');
    assertError(await orgGrantReq(t, admin, org.id, { application_id: appB.id, member_scope: 'allowlist', member_overrides: [newcomer.id] }), 402, 'subscription_required');
    assertError(await orgGrantReq(t, admin, org.id, { application_id: appB.id, member_scope: 'denylist', member_overrides: [seated.id] }), 402, 'subscription_required');
    assert.equal((await sql(t, 'SELECT 1 FROM entitlements WHERE organization_id = $1', [org.id])).length, 0, 'refused grants change nothing');
    const ent = assertStatus(await orgGrantReq(t, admin, org.id, { application_id: appB.id, member_scope: 'allowlist', member_overrides: [seated.id] }), 201);
    assert.equal(ent.included_member_count, 1);
    assert.equal((await effective(t, admin, newcomer.id, appB.id)).allowed, false);
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [appB.tenant_id]);
  }
});

test('on a restricted Tenant only "a new seat gives 402 subscription_required": a personal grant to a member who holds the seat through an org grant is 201 (entitlement.granted, no access.granted), one to a seatless user 402 and nothing written', async () => {
  const org = await orgWithMembers(t, admin, 0);
  const seated = org.owner;
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  const seatless = await person(t);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenant_id]);
  try {
    const err = assertError(await grantReq(t, admin, seatless.id, { application_id: app.id, source: 'admin_grant' }), 402, 'subscription_required');
    assert.deepEqual([err.details.tenant_id, err.details.resource], [app.tenant_id, 'seats']);
    assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE user_id = $1', [seatless.id]), []);
    const ent = assertStatus(await grantReq(t, admin, seated.id, { application_id: app.id, source: 'admin_grant' }), 201);
    assert.equal(ent.status, 'active');
    assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
    assert.equal((await auditOf(t, ent.id, 'entitlement.granted')).length, 1);
    assert.deepEqual(await accessEvents(t, seated.id, app.id), [GRANTED], 'access did not flip: only the org grant\'s access.granted');
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [app.tenant_id]);
  }
});

test('an org grant to an Application whose Tenant is migrating: 503 service_unavailable with Retry-After, and nothing is granted', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET status = 'migrating' WHERE id = $1`, [app.tenant_id]);
  try {
    const res = await orgGrantReq(t, admin, org.id, { application_id: app.id });
    const error = assertError(res, 503, 'service_unavailable');
    assert.ok(Number(res.headers['retry-after']) > 0, 'Retry-After');
    assert.equal(error.details.tenant_id, app.tenant_id);
    assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE organization_id = $1', [org.id]), []);
    for (const u of [org.owner, ...org.members]) assert.deepEqual(await accessEvents(t, u.id, app.id), []);
  } finally {
    await sql(t, `UPDATE tenants SET status = 'active' WHERE id = $1`, [app.tenant_id]);
  }
  assertStatus(await orgGrantReq(t, admin, org.id, { application_id: app.id }), 201);
});

test('on a restricted Tenant a PATCH of an org grant that would give a member a new seat (scope widened, re-enabled) gives 402 subscription_required and changes nothing', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const seated = org.owner;
  const newcomer = org.members[0];
  const app = await newApp(t, admin);
  await grant(t, admin, seated.id, app.id);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { member_scope: 'allowlist', member_overrides: [seated.id] });
  const all = await orgGrantApi(t, admin, (await orgWithMembers(t, admin, 0)).id, app.id);
  assertStatus(await patchEnt(t, admin, all.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenant_id]);
  try {
    assertError(await patchEnt(t, admin, ent.id, { member_scope: 'all_members', member_overrides: [] }), 402, 'subscription_required');
    assertError(await patchEnt(t, admin, ent.id, { member_overrides: [seated.id, newcomer.id] }), 402, 'subscription_required');
    const row = (await sql(t, 'SELECT member_scope, member_overrides FROM entitlements WHERE id = $1', [ent.id]))[0];
    assert.deepEqual([row.member_scope, row.member_overrides], ['allowlist', [seated.id]], 'unchanged');
    assert.equal((await effective(t, admin, newcomer.id, app.id)).allowed, false);
    assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
    // Re-enabling the other Organization's grant gives its owner (not a seat holder) a seat: refused too.
    assertError(await patchEnt(t, admin, all.id, { status: 'active' }), 402, 'subscription_required');
    // A change that adds no seat goes through.
    assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: [newcomer.id] }), 200).member_scope, 'denylist');
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [app.tenant_id]);
  }
});

test('invite_only visibility: a member an org grant excludes has no access path, so the Application and its permission keys stay hidden (404 application_not_found)', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [kept, excluded] = org.members;
  const slug = `io${Date.now().toString(36)}`;
  const target = await newApp(t, admin, { slug, visibility: 'invite_only', permissions: [{ key: `app.${slug}.read`, description: 'Read' }] });
  await orgGrantApi(t, admin, org.id, target.id, { member_scope: 'denylist', member_overrides: [excluded.id] });
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${target.id}`, kept.token), 200).id, target.id, 'an included member sees it');
  assertError(await call(t, 'GET', `/v1/applications/${target.id}`, excluded.token), 404, 'application_not_found');
  const listed = assertStatus(await call(t, 'GET', '/v1/applications?limit=100', excluded.token), 200).data.map((a: any) => a.id);
  assert.equal(listed.includes(target.id), false, 'not in the excluded member\'s catalog');
  assert.deepEqual((await call(t, 'GET', `/v1/permissions?scope=${target.id}`, kept.token)).json().data.map((p: any) => p.key), [`app.${slug}.read`]);
  assert.deepEqual((await call(t, 'GET', `/v1/permissions?scope=${target.id}`, excluded.token)).json().data, [], 'no permission keys of a hidden Application');
});

test('an org grant without an Idempotency-Key is 400 idempotency_key_required, and one sending source ("not accepted") is 422 validation_failed naming source; nothing is granted', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id }, null), 400, 'idempotency_key_required');
  for (const source of ['org_seat', 'purchase']) {
    const error = assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id, source }), 422, 'validation_failed');
    assert.ok(error.details.fields.some((f: { path: string }) => f.path === 'source'), JSON.stringify(error.details));
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE organization_id = $1', [org.id]))[0].n, 0);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE organization_id = $1 AND action = 'entitlement.granted'`, [org.id]))[0].n, 0);
});

test('an org grant to an Application that is not approved (pending_review, rejected, suspended) is 409 application_not_available with its review_status, and nothing is granted', async () => {
  const org = await orgWithMembers(t, admin, 1);
  for (const status of ['pending_review', 'rejected', 'suspended']) {
    const app = await newApp(t, admin);
    await sql(t, 'UPDATE applications SET review_status = $2 WHERE id = $1', [app.id, status]);
    const error = assertError(await orgGrantReq(t, admin, org.id, { application_id: app.id }), 409, 'application_not_available');
    assert.equal(error.details.review_status, status);
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE application_id = $1', [app.id]))[0].n, 0);
    assert.deepEqual(await accessEvents(t, org.members[0].id, app.id), []);
  }
});

test('member_overrides name current members only: a test member the nightly test-purge removes leaves the overrides of the grants that stay (entitlement.member_scope_changed), so the org admin\'s PATCH sending the overrides back is not 422 for a user who no longer exists', async () => {
  const testAdmin = await platformKey(t, undefined, 'test');
  const old = await person(t, { mode: 'test' });
  t.clock.advance(31 * 86400);
  const owner = await person(t, { mode: 'test' });
  const { org } = await createOrgApi(t, owner);
  const stays = await person(t, { mode: 'test' });
  for (const m of [old, stays]) assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, testAdmin, { user_id: m.id }), 201);
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, testAdmin, org.id, app.id, { member_scope: 'denylist', member_overrides: [old.id, stays.id] });
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await sql(t, 'SELECT 1 FROM users WHERE id = $1', [old.id])).length, 0, 'the old test user is purged');
  const read = assertStatus(await call(t, 'GET', `/v1/entitlements/${ent.id}`, testAdmin), 200);
  assert.deepEqual(read.member_overrides, [stays.id]);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.member_scope_changed']);
  const [audit] = await orgAudit(t, org.id, 'entitlement.member_scope_changed');
  assert.deepEqual([audit.before.member_overrides, audit.after.member_overrides], [[old.id, stays.id], [stays.id]]);
  const patched = assertStatus(await patchEnt(t, owner.token, ent.id, { member_scope: 'denylist', member_overrides: read.member_overrides }), 200);
  assert.deepEqual(patched.member_overrides, [stays.id]);
});

test('org grant POST "order_id, starts_at, ends_at (same rules as personal)": starts_at more than 1 year ahead, ends_at not after starts_at and an order_id over 255 characters are 422 validation_failed naming the field, and nothing is granted', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  assertInvalid(await orgGrantReq(t, admin, org.id, { application_id: app.id, starts_at: inSeconds(t, 367 * DAY) }), 'starts_at');
  assertInvalid(await orgGrantReq(t, admin, org.id, { application_id: app.id, starts_at: inSeconds(t, 10 * DAY), ends_at: inSeconds(t, 5 * DAY) }), 'ends_at');
  // One instant for both (the clock runs between two reads of it): ends_at equal to starts_at is not after it.
  const tenDays = inSeconds(t, 10 * DAY);
  assertInvalid(await orgGrantReq(t, admin, org.id, { application_id: app.id, starts_at: tenDays, ends_at: tenDays }), 'ends_at');
  assertInvalid(await orgGrantReq(t, admin, org.id, { application_id: app.id, order_id: 'o'.repeat(256) }), 'order_id');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE organization_id = $1', [org.id]))[0].n, 0);
  assert.deepEqual(await accessEvents(t, org.members[0].id, app.id), []);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { order_id: 'o'.repeat(255), starts_at: inSeconds(t, 364 * DAY) });
  assert.equal(ent.order_id, 'o'.repeat(255));
});

test('an org grant with a future starts_at is created active but resolves as scheduled ("A future starts_at creates the row as active"): no access.granted until it passes, then access.granted (entitlement_started) once per member, one who joined meanwhile included', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { starts_at: inSeconds(t, 3600) });
  assert.equal(ent.status, 'active');
  const late = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: late.id }), 201);
  for (const u of [org.owner, org.members[0], late]) {
    assert.deepEqual(await accessEvents(t, u.id, app.id), []);
    const check = await effective(t, admin, u.id, app.id);
    assert.equal(check.allowed, false);
    assert.equal(check.entitlement_status, 'scheduled');
  }
  t.clock.advance(3601);
  await t.deps.jobs.runNow('scheduled-starts');
  await t.deps.jobs.runNow('scheduled-starts');
  for (const u of [org.owner, org.members[0], late]) {
    assert.deepEqual(await accessEvents(t, u.id, app.id), [['access.granted', 'entitlement_started', 'active']]);
    assert.equal((await effective(t, admin, u.id, app.id)).allowed, true);
  }
});

test('"access.revoked or access.granted fire once per user whose resolved access actually flips": one PATCH disabling an org grant and narrowing it to an allowlist writes entitlement.disabled and entitlement.member_scope_changed, and one access.revoked per member who had access through it', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [a, b] = org.members;
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  await grant(t, admin, b.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'renewal pending', member_scope: 'allowlist', member_overrides: [a.id] }), 200);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.member_scope_changed']);
  assert.deepEqual(await accessEvents(t, a.id, app.id), [GRANTED, ['access.revoked', 'entitlement_disabled', 'disabled']]);
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), [GRANTED, ['access.revoked', 'entitlement_disabled', 'none']]);
  assert.deepEqual(await accessEvents(t, b.id, app.id), [GRANTED], 'b keeps access through a personal grant');
});

test('"access.revoked or access.granted fire once per user whose resolved access actually flips": one PATCH re-enabling a disabled org grant with an allowlist writes entitlement.granted and entitlement.member_scope_changed, and access.granted (entitlement_enabled) only for the allowlisted member without another path', async () => {
  const org = await orgWithMembers(t, admin, 3);
  const [a, b, c] = org.members;
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  await grant(t, admin, c.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const back = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', member_scope: 'allowlist', member_overrides: [a.id, c.id] }), 200);
  assert.equal(back.disabled_reason, null);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted', 'entitlement.member_scope_changed']);
  assert.deepEqual(await accessEvents(t, a.id, app.id), [GRANTED, ['access.revoked', 'entitlement_disabled', 'disabled'], ['access.granted', 'entitlement_enabled', 'active']]);
  for (const u of [org.owner, b]) assert.deepEqual(await accessEvents(t, u.id, app.id), [GRANTED, ['access.revoked', 'entitlement_disabled', 'disabled']], 'excluded: stays off, no event');
  assert.deepEqual(await accessEvents(t, c.id, app.id), [GRANTED], 'c held access personally throughout');
});

test('"access resolution treats ends_at <= now as expired immediately", for every year a date-time can name: an org grant whose whole window lies in the first century (starts_at 0001-01-01, ends_at 0049-06-15) answers those instants as sent, reads them back the same, and never gives its members access', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const [member] = org.members;
  const app = await newApp(t, admin);
  const ent = await orgGrantApi(t, admin, org.id, app.id, { starts_at: '0001-01-01T00:00:00Z', ends_at: '0049-06-15T12:30:00Z' });
  assert.equal(ent.starts_at, '0001-01-01T00:00:00.000Z');
  assert.equal(ent.ends_at, '0049-06-15T12:30:00.000Z');
  const fetched = assertStatus(await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin), 200);
  assert.deepEqual([fetched.starts_at, fetched.ends_at], ['0001-01-01T00:00:00.000Z', '0049-06-15T12:30:00.000Z']);
  const listed = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/entitlements?include_inactive=true`, admin), 200).data;
  assert.deepEqual(listed.map((e: any) => [e.id, e.starts_at, e.ends_at]), [[ent.id, '0001-01-01T00:00:00.000Z', '0049-06-15T12:30:00.000Z']]);
  const access = await effective(t, admin, member.id, app.id);
  assert.equal(access.allowed, false);
  assert.equal(access.entitlement_status, 'expired');
  assert.deepEqual(await accessEvents(t, member.id, app.id), [], 'an ended grant flips no one on');
  assertError(await call(t, 'POST', '/v1/auth/app-tokens', member.token, { application_id: app.id }), 403, 'entitlement_required');
});
