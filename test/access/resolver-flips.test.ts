// The one access resolver and flip detection: every mutation that can change access writes
// access.granted / access.revoked exactly once per (user, Application) pair that flips, with the right
// reason, and never when another active path remains.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { latestToken } from '../helpers/mail.js';
import {
  accessEvents, addMember, assertStatus, call, createOrg, effective, grant, newApp, orgGrant, outbox, patchEnt, person, platformKey, sql,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const suspend = async (userId: string) => assertStatus(await call(t, 'POST', `/v1/users/${userId}/suspend`, admin, {}), 200);
const setStatus = async (userId: string, status: string) => assertStatus(await call(t, 'PATCH', `/v1/users/${userId}`, admin, { status }), 200);

test('personal grant + organization grant: disabling, revoking or deleting the personal row emits nothing while the org path remains', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  const org = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, org, app.id);
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, true);
  const first = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'active' }), 200);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  const second = await grant(t, admin, user.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${second.id}`, admin)).statusCode, 204);
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, true);
  assert.equal(result.entitlement_status, 'active');
});

test('disabling the organization grant revokes access once per member whose last path it was (reason entitlement_disabled); members with a personal grant keep access', async () => {
  const app = await newApp(t, admin);
  const [a, b, c] = [await person(t), await person(t), await person(t)];
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }, { userId: c.id }]);
  const grantId = await orgGrant(t, org, app.id);
  await grant(t, admin, c.id, app.id);
  assertStatus(await patchEnt(t, admin, grantId, { status: 'disabled', disabled_reason: 'seat audit' }), 200);
  for (const u of [a, b]) assert.deepEqual(await accessEvents(t, u.id, app.id), [['access.revoked', 'entitlement_disabled', 'disabled']]);
  assert.deepEqual(await accessEvents(t, c.id, app.id), [], 'c keeps access through the personal row');
  // The entitlement.disabled event is about the org row (user_id null) and is written once.
  const events = await outbox(t, { entitlementId: grantId });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.disabled']);
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
  assertStatus(await patchEnt(t, admin, grantId, { status: 'active' }), 200);
  for (const u of [a, b]) assert.deepEqual((await accessEvents(t, u.id, app.id)).at(-1), ['access.granted', 'entitlement_enabled', 'active']);
  assert.deepEqual(await accessEvents(t, c.id, app.id), []);
});

test('deleting an organization grant revokes access once per member whose last path it was (reason entitlement_deleted)', async () => {
  const app = await newApp(t, admin);
  const [a, b] = [await person(t), await person(t)];
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const grantId = await orgGrant(t, org, app.id);
  await grant(t, admin, b.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${grantId}`, admin)).statusCode, 204);
  assert.deepEqual(await accessEvents(t, a.id, app.id), [['access.revoked', 'entitlement_deleted', 'none']]);
  assert.deepEqual(await accessEvents(t, b.id, app.id), []);
  assert.deepEqual((await outbox(t, { entitlementId: grantId })).map((e) => e.type), ['entitlement.deleted']);
});

test('pending members and members excluded by member_scope have no access and get no access events', async () => {
  const app = await newApp(t, admin);
  const [a, pending, denied] = [await person(t), await person(t), await person(t)];
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: pending.id, status: 'pending' }, { userId: denied.id }]);
  const grantId = await orgGrant(t, org, app.id, { memberScope: 'denylist', overrides: [denied.id] });
  for (const u of [pending, denied]) assert.equal((await effective(t, admin, u.id, app.id)).allowed, false);
  const deniedView = await effective(t, admin, denied.id, app.id);
  assert.equal(deniedView.entitlement_status, 'none');
  assert.deepEqual(deniedView.access_paths, [{ source: 'org_seat', entitlement_id: grantId, status: 'active', organization_id: org, member_decision: 'excluded' }]);
  assertStatus(await patchEnt(t, admin, grantId, { status: 'disabled', disabled_reason: 'x' }), 200);
  assert.deepEqual(await accessEvents(t, a.id, app.id), [['access.revoked', 'entitlement_disabled', 'disabled']]);
  for (const u of [pending, denied]) assert.deepEqual(await accessEvents(t, u.id, app.id), []);
});

test('creating a grant for a user who already has access through an organization emits no access.granted', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  const org = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, org, app.id);
  const ent = await grant(t, admin, user.id, app.id);
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  assert.deepEqual((await outbox(t, { entitlementId: ent.id })).map((e) => e.type), ['entitlement.granted']);
});

test('suspending a user revokes access once per Application with active access (reason user_suspended); a repeat suspend writes nothing', async () => {
  const [one, two, three] = [await newApp(t, admin), await newApp(t, admin), await newApp(t, admin)];
  const user = await person(t);
  await grant(t, admin, user.id, one.id);
  await grant(t, admin, user.id, two.id);
  const off = await grant(t, admin, user.id, three.id);
  assertStatus(await patchEnt(t, admin, off.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  const baseline = (await outbox(t, { userId: user.id })).length;
  await suspend(user.id);
  assert.deepEqual((await accessEvents(t, user.id, one.id)).at(-1), ['access.revoked', 'user_suspended', 'active']);
  assert.deepEqual((await accessEvents(t, user.id, two.id)).at(-1), ['access.revoked', 'user_suspended', 'active']);
  assert.deepEqual((await accessEvents(t, user.id, three.id)).map(([type, reason]) => `${type}:${reason}`), ['access.granted:entitlement_granted', 'access.revoked:entitlement_disabled']);
  const after = await outbox(t, { userId: user.id });
  assert.deepEqual(after.slice(baseline).map((e) => e.type).sort(), ['access.revoked', 'access.revoked', 'user.suspended']);
  const view = await effective(t, admin, user.id, one.id);
  assert.equal(view.allowed, false);
  assert.equal(view.user_status, 'suspended');
  assert.equal(view.entitlement_status, 'active', 'entitlements unchanged');
  // Suspending again: 200, no change, no events.
  await suspend(user.id);
  assert.equal((await outbox(t, { userId: user.id })).length, after.length);
});

test('reactivating a suspended user grants access once per Application still accessible (reason user_reactivated)', async () => {
  const [one, two] = [await newApp(t, admin), await newApp(t, admin)];
  const user = await person(t);
  await grant(t, admin, user.id, one.id);
  const revoked = await grant(t, admin, user.id, two.id);
  await suspend(user.id);
  assertStatus(await patchEnt(t, admin, revoked.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  await setStatus(user.id, 'active');
  assert.deepEqual((await accessEvents(t, user.id, one.id)).at(-1), ['access.granted', 'user_reactivated', 'active']);
  assert.deepEqual((await accessEvents(t, user.id, two.id)).map(([type, reason]) => `${type}:${reason}`), ['access.granted:entitlement_granted', 'access.revoked:user_suspended']);
  assert.equal((await outbox(t, { userId: user.id, types: ['user.reactivated'] })).length, 1);
});

test('a grant to a suspended user does not flip access on; reactivation then does', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  await suspend(user.id);
  await grant(t, admin, user.id, app.id);
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  await setStatus(user.id, 'active');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'user_reactivated', 'active']]);
});

test('accepting an account invitation flips access on (docs/decisions.md "Activation flips access": "when an admin sets them active or they accept the invitation, access flips on with access.granted reason user_reactivated"): a grant held while invited emits nothing; invitations/accept emits it once', async () => {
  const app = await newApp(t, admin);
  const user = await person(t, { status: 'invited' });
  await grant(t, admin, user.id, app.id);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [], 'an invited user has no access yet');
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, false);
  assert.equal((await call(t, 'POST', `/v1/users/${user.id}/invitation`, admin, {})).statusCode, 202);
  const token = await latestToken(t, user.email, 'invitation');
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token, password: 'amber-lantern-orchard-77' }), 200);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'user_reactivated', 'active']]);
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, true);
});

test('deleting a user revokes access (reason user_deleted, entitlement_status unchanged); restoring grants it back (user_reactivated)', async () => {
  const app = await newApp(t, admin);
  const viaOrg = await newApp(t, admin);
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const org = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }]);
  await addMember(t, org, user.id);
  await orgGrant(t, org, viaOrg.id);
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin)).statusCode, 204);
  for (const id of [app.id, viaOrg.id]) assert.deepEqual((await accessEvents(t, user.id, id)).at(-1), ['access.revoked', 'user_deleted', 'active']);
  assert.equal((await outbox(t, { userId: user.id, types: ['user.deleted'] })).length, 1);
  await setStatus(user.id, 'active');
  for (const id of [app.id, viaOrg.id]) assert.deepEqual((await accessEvents(t, user.id, id)).at(-1), ['access.granted', 'user_reactivated', 'active']);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 3);
  assert.equal((await accessEvents(t, user.id, viaOrg.id)).length, 2);
});

test('self-deletion also emits access.revoked (user_deleted) once per accessible Application', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assert.equal((await call(t, 'DELETE', '/v1/users/me', user.token)).statusCode, 204);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'user_deleted', 'active'],
  ]);
});

test('a PATCH that does not change access (ends_at moved, order_id set) writes no access event', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { ends_at: new Date(t.clock.now().getTime() + 30 * 86400_000).toISOString() }), 200);
  assertStatus(await patchEnt(t, admin, ent.id, { order_id: 'ord-late' }), 200);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
});

test('access events are written in the same transaction as the change: a refused change writes none', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const before = (await outbox(t, { userId: user.id })).length;
  // Refused moves: no reason, then a stale If-Match.
  assert.equal((await patchEnt(t, admin, ent.id, { status: 'disabled' })).statusCode, 422);
  assert.equal((await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': '"stale"' })).statusCode, 412);
  assert.equal((await outbox(t, { userId: user.id })).length, before);
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]))[0].status, 'active');
});
