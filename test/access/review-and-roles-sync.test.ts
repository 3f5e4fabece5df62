// Application review_status table, and the app Roles that follow available_app_roles and permissions.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { accessEvents, assertError, assertStatus, auditOf, call, effective, grant, newApp, outbox, person, platformKey, setReview, slugOf, sql } from './support.js';
import { createApiKey } from '../helpers/fixtures.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const patch = (cred: string, id: string, body: Record<string, unknown>) => call(t, 'PATCH', `/v1/applications/${id}`, cred, body);
const reviewEvents = async (id: string) => (await outbox(t, { types: ['application.review_status_changed'], applicationId: id })).map((r) => r.data);
const reviewAudits = async (id: string) => (await auditOf(t, id, 'application.review_status_changed')).map((a) => a.after?.review_status);
const roleExists = async (id: string) => (await sql(t, 'SELECT 1 FROM roles WHERE id = $1', [id])).length === 1;

test('approved → suspended needs review_notes (422 review_notes_required); with notes it moves, emits application.review_status_changed and writes audit', async () => {
  const app = await newApp(t, admin);
  assertError(await patch(admin, app.id, { review_status: 'suspended' }), 422, 'review_notes_required');
  assertError(await patch(admin, app.id, { review_status: 'suspended', review_notes: null }), 422, 'review_notes_required');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).review_status, 'approved');
  assert.deepEqual(await reviewEvents(app.id), []);

  const body = assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'abuse report' }), 200);
  assert.equal(body.review_status, 'suspended');
  assert.equal(body.review_notes, 'abuse report');
  assert.deepEqual(await reviewEvents(app.id), [{ application_id: app.id, review_status: 'suspended', review_notes: 'abuse report' }]);
  assert.deepEqual(await reviewAudits(app.id), ['suspended']);
});

test('suspended → approved is a reinstatement (review_notes optional) and emits application.review_status_changed', async () => {
  const app = await newApp(t, admin);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'x' }), 200);
  const body = assertStatus(await patch(admin, app.id, { review_status: 'approved' }), 200);
  assert.equal(body.review_status, 'approved');
  const events = await reviewEvents(app.id);
  assert.deepEqual(events.map((e) => e.review_status), ['suspended', 'approved']);
  assert.deepEqual(await reviewAudits(app.id), ['suspended', 'approved']);
});

test('pending_review → approved needs no notes; pending_review → rejected needs review_notes (422 review_notes_required)', async () => {
  const a = await newApp(t, admin);
  await setReview(t, a.id, 'pending_review');
  assertStatus(await patch(admin, a.id, { review_status: 'approved' }), 200);
  assert.deepEqual((await reviewEvents(a.id)).map((e) => e.review_status), ['approved']);

  const b = await newApp(t, admin);
  await setReview(t, b.id, 'pending_review');
  assertError(await patch(admin, b.id, { review_status: 'rejected' }), 422, 'review_notes_required');
  const rejected = assertStatus(await patch(admin, b.id, { review_status: 'rejected', review_notes: 'missing privacy policy' }), 200);
  assert.equal(rejected.review_status, 'rejected');
  assert.deepEqual(await reviewEvents(b.id), [{ application_id: b.id, review_status: 'rejected', review_notes: 'missing privacy policy' }]);
  assert.deepEqual(await reviewAudits(b.id), ['rejected']);
});

test('moves not in the review table are 409 invalid_review_transition and change nothing', async () => {
  const app = await newApp(t, admin);
  // approved → rejected, approved → pending_review
  assertError(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'x' }), 409, 'invalid_review_transition');
  assertError(await patch(admin, app.id, { review_status: 'pending_review' }), 409, 'invalid_review_transition');
  // suspended → rejected, suspended → pending_review
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'x' }), 200);
  assertError(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'x' }), 409, 'invalid_review_transition');
  assertError(await patch(admin, app.id, { review_status: 'pending_review' }), 409, 'invalid_review_transition');
  // pending_review → suspended
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  assertError(await patch(admin, pending.id, { review_status: 'suspended', review_notes: 'x' }), 409, 'invalid_review_transition');
  // rejected → approved, rejected → suspended, rejected → pending_review (only automatic)
  const rejected = await newApp(t, admin);
  await setReview(t, rejected.id, 'rejected');
  for (const to of ['approved', 'suspended', 'pending_review']) {
    assertError(await patch(admin, rejected.id, { review_status: to, review_notes: 'x' }), 409, 'invalid_review_transition');
  }
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${rejected.id}`, admin), 200).review_status, 'rejected');
  assert.deepEqual(await reviewAudits(rejected.id), []);
});

test("rejected → pending_review happens on the owner's next PATCH of a configuration field (audit application.review_status_changed; no webhook, which is for approved, rejected, suspended, reinstated)", async () => {
  const app = await newApp(t, admin);
  await setReview(t, app.id, 'pending_review');
  assertStatus(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'fix the icon' }), 200);
  // A PATCH naming no field is no PATCH of a configuration field (docs/conventions.md PATCH: a no-op 200): still rejected.
  assert.equal(assertStatus(await patch(app.owner!.token, app.id, {}), 200).review_status, 'rejected');
  assert.deepEqual(await reviewAudits(app.id), ['rejected']);
  const body = assertStatus(await patch(app.owner!.token, app.id, { icon_url: 'https://cdn.example.com/new.png' }), 200);
  assert.equal(body.review_status, 'pending_review');
  assert.equal(body.icon_url, 'https://cdn.example.com/new.png');
  assert.deepEqual(await reviewAudits(app.id), ['rejected', 'pending_review']);
  const hooks = await outbox(t, { types: ['application.review_status_changed'], applicationId: app.id });
  assert.deepEqual(hooks.map((h) => h.data.review_status), ['rejected']);
  // Now it is back in the review queue.
  const queue = assertStatus(await call(t, 'GET', '/v1/applications?review_status=pending_review&limit=100', admin), 200);
  assert.ok(queue.data.some((a: { id: string }) => a.id === app.id), 'queue.data.some((a: { id: string }) => a.id === app.id)');
});

test('a suspended Application blocks new grants (409 application_not_available); existing Entitlements are untouched', async () => {
  const app = await newApp(t, admin);
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'paused' }), 200);
  const other = await person(t);
  const res = await call(t, 'POST', `/v1/users/${other.id}/entitlements`, admin, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `k-${other.id}` });
  assertError(res, 409, 'application_not_available');
  const [row] = await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]);
  assert.equal(row.status, 'active');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [other.id]))[0].n, 0);
});

test('approved → suspended: "existing Entitlements and sessions untouched": the holder keeps resolved access (effective-permissions allowed true, entitlement_status active, the Application\'s permissions), no access.revoked fires, and their session still works', async () => {
  const slug = slugOf('susp');
  const app = await newApp(t, admin, { slug, available_app_roles: ['viewer'], default_app_role: 'viewer', permissions: [{ key: `app.${slug}.read`, description: 'read' }] });
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_viewer`, admin, { permissions: [`app.${slug}.read`] }), 200);
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const granted = [['access.granted', 'entitlement_granted', 'active']];
  assert.deepEqual(await accessEvents(t, holder.id, app.id), granted);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'paused' }), 200);
  const result = await effective(t, admin, holder.id, app.id);
  assert.equal(result.allowed, true);
  assert.equal(result.entitlement_status, 'active');
  assert.deepEqual(result.effective_permissions, [`app.${slug}.read`]);
  assert.deepEqual(await accessEvents(t, holder.id, app.id), granted, 'no access.revoked on suspension');
  assertStatus(await call(t, 'GET', '/v1/users/me', holder.token), 200);
});

test('a suspended Application blocks new grants: returning an Entitlement to active (disabled → active, expired → active renewal), which Part B announces as entitlement.granted, is 409 application_not_available like a POST; nothing changes, no event; disabling, revoking and term changes stay possible', async () => {
  const app = await newApp(t, admin);
  const disabledHolder = await person(t);
  const disabled = await grant(t, admin, disabledHolder.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${disabled.id}`, admin, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const expiredHolder = await person(t);
  const expired = await grant(t, admin, expiredHolder.id, app.id);
  await sql(t, `UPDATE entitlements SET status = 'expired' WHERE id = $1`, [expired.id]);
  const activeHolder = await person(t);
  const active = await grant(t, admin, activeHolder.id, app.id);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'abuse report' }), 200);
  const eventsBefore = (await outbox(t, { applicationId: app.id })).length;

  const reEnable = assertError(await call(t, 'PATCH', `/v1/entitlements/${disabled.id}`, admin, { status: 'active' }), 409, 'application_not_available');
  assert.equal(reEnable.details.review_status, 'suspended');
  assertError(await call(t, 'PATCH', `/v1/entitlements/${expired.id}`, admin, { status: 'active', ends_at: null }), 409, 'application_not_available');
  assertError(await call(t, 'PATCH', `/v1/entitlements/${disabled.id}`, app.owner!.token, { status: 'active' }), 409, 'application_not_available');
  const rows = await sql(t, 'SELECT id, status FROM entitlements WHERE id = ANY($1::text[]) ORDER BY id', [[disabled.id, expired.id]]);
  assert.deepEqual(rows.map((r) => r.status).sort(), ['disabled', 'expired']);
  assert.equal((await outbox(t, { applicationId: app.id })).length, eventsBefore);
  assert.equal((await auditOf(t, disabled.id, 'entitlement.granted')).length, 1);

  // A term change stays possible on a suspended Application (docs/decisions.md), and so does ending access.
  const endsAt = new Date(t.clock.now().getTime() + 30 * 86_400_000).toISOString();
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/entitlements/${active.id}`, admin, { ends_at: endsAt }), 200).ends_at, endsAt);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${active.id}`, admin, { status: 'disabled', disabled_reason: 'cut off' }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${disabled.id}`, admin, { status: 'revoked', disabled_reason: 'gone' }), 200);
  // Reinstated, the Application takes grants again.
  assertStatus(await patch(admin, app.id, { review_status: 'approved' }), 200);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/entitlements/${active.id}`, admin, { status: 'active' }), 200).status, 'active');
});

// ---- app Roles follow available_app_roles ---------------------------------------------------------

test('POST seeds an empty Role role_<slug>_<name> for each name in available_app_roles', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor'] });
  for (const name of ['viewer', 'editor']) {
    const role = assertStatus(await call(t, 'GET', `/v1/roles/role_${app.slug}_${name}`, app.owner!.token), 200);
    assert.equal(role.name, name);
    assert.equal(role.scope, app.id);
    assert.deepEqual(role.permissions, []);
    assert.equal(role.seed, false);
    assert.equal(role.assignment_count, 0);
  }
});

test('PATCH adding a name seeds its Role; removing an unassigned name deletes its Role', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor'] });
  const body = assertStatus(await patch(app.owner!.token, app.id, { available_app_roles: ['viewer', 'admin'] }), 200);
  assert.deepEqual(body.available_app_roles, ['viewer', 'admin']);
  assert.equal(await roleExists(`role_${app.slug}_admin`), true);
  assert.equal(await roleExists(`role_${app.slug}_viewer`), true);
  assert.equal(await roleExists(`role_${app.slug}_editor`), false);
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_editor`, admin), 404, 'role_not_found');
});

test('Roles seeded and deleted through available_app_roles are audited like the Role endpoints ("Writes role.created … role.deleted"): POST and PATCH write role.created with the new Role, removing a name writes role.deleted with the Role as it was', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor'] });
  for (const name of ['viewer', 'editor']) {
    const id = `role_${app.slug}_${name}`;
    const rows = await auditOf(t, id);
    assert.deepEqual(rows.map((r) => r.action), ['role.created'], `${id} audited once at the Application's creation`);
    assert.equal(rows[0].application_id, app.id);
    assert.equal(rows[0].before, null);
    assert.deepEqual(rows[0].after, assertStatus(await call(t, 'GET', `/v1/roles/${id}`, admin), 200));
  }
  assertStatus(await patch(app.owner!.token, app.id, { available_app_roles: ['viewer', 'admin'] }), 200);
  const created = await auditOf(t, `role_${app.slug}_admin`);
  assert.deepEqual(created.map((r) => [r.action, r.actor_type, r.actor_id]), [['role.created', 'user', app.owner!.id]], 'the owner who added the name created the Role');
  assert.equal(created[0].after.name, 'admin');
  const deleted = await auditOf(t, `role_${app.slug}_editor`);
  assert.deepEqual(deleted.map((r) => r.action), ['role.created', 'role.deleted']);
  assert.deepEqual(deleted[1].before, deleted[0].after, 'role.deleted holds the Role as it was');
  assert.equal(deleted[1].after, null);
  assert.equal(deleted[1].application_id, app.id);
  assert.deepEqual((await auditOf(t, `role_${app.slug}_viewer`)).map((r) => r.action), ['role.created'], 'a name kept writes nothing');
});

test('PATCH removing a name whose Role has assignments is 409 app_role_in_use and changes nothing', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor'] });
  const user = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin, {}), 201);
  assertError(await patch(app.owner!.token, app.id, { available_app_roles: ['viewer'] }), 409, 'app_role_in_use');
  const current = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.deepEqual(current.available_app_roles, ['viewer', 'editor']);
  assert.equal(await roleExists(`role_${app.slug}_editor`), true);
  // Once unassigned, the removal goes through.
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin)).statusCode, 204);
  assertStatus(await patch(app.owner!.token, app.id, { available_app_roles: ['viewer'] }), 200);
  assert.equal(await roleExists(`role_${app.slug}_editor`), false);
});

test('PATCH removing a permission still referenced by a Role is 409 permission_in_use with details.role_ids', async () => {
  const slug = `perm${Date.now().toString(36)}`;
  const app = await newApp(t, admin, {
    slug,
    available_app_roles: ['viewer', 'editor'],
    permissions: [{ key: `app.${slug}.read`, description: 'read' }, { key: `app.${slug}.write`, description: 'write' }],
  });
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_viewer`, app.owner!.token, { permissions: [`app.${slug}.read`] }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_editor`, app.owner!.token, { permissions: [`app.${slug}.read`, `app.${slug}.write`] }), 200);
  const err = assertError(await patch(app.owner!.token, app.id, { permissions: [{ key: `app.${slug}.write`, description: 'write' }] }), 409, 'permission_in_use');
  assert.deepEqual([...err.details.role_ids].sort(), [`role_${slug}_editor`, `role_${slug}_viewer`]);
  const current = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.equal(current.permissions.length, 2);
  // An unreferenced permission can be removed.
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_editor`, app.owner!.token, { permissions: [`app.${slug}.read`] }), 200);
  const ok = assertStatus(await patch(app.owner!.token, app.id, { permissions: [{ key: `app.${slug}.read`, description: 'read' }] }), 200);
  assert.deepEqual(ok.permissions, [{ key: `app.${slug}.read`, description: 'read' }]);
});

test("rejected → pending_review happens on the owner's next PATCH of a configuration field even when the owner also holds applications.manage, unless the PATCH sets review_status", async () => {
  const owner = await person(t, { roles: ['superadmin'] });
  const app = await newApp(t, admin, { owner_user_id: owner.id });
  await setReview(t, app.id, 'pending_review');
  assertStatus(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'fix the name' }), 200);

  // A PATCH that sets review_status itself is not moved automatically.
  const kept = assertStatus(await patch(owner.token, app.id, { description: 'still rejected', review_status: 'rejected', review_notes: 'fix the name' }), 200);
  assert.equal(kept.review_status, 'rejected');
  assert.equal(kept.description, 'still rejected');
  assert.deepEqual(await reviewAudits(app.id), ['rejected']);

  const body = assertStatus(await patch(owner.token, app.id, { name: 'Fixed name' }), 200);
  assert.equal(body.review_status, 'pending_review');
  assert.equal(body.name, 'Fixed name');
  assert.deepEqual(await reviewAudits(app.id), ['rejected', 'pending_review']);
  const queue = assertStatus(await call(t, 'GET', '/v1/applications?review_status=pending_review&limit=100', admin), 200);
  assert.ok(queue.data.some((a: { id: string }) => a.id === app.id), 'queue.data.some((a: { id: string }) => a.id === app.id)');
});

test('review_notes of only whitespace count as missing: reject and suspend get 422 review_notes_required and nothing changes', async () => {
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  const approved = await newApp(t, admin);
  for (const notes of ['   ', '\n\t ']) {
    assertError(await patch(admin, pending.id, { review_status: 'rejected', review_notes: notes }), 422, 'review_notes_required');
    assertError(await patch(admin, approved.id, { review_status: 'suspended', review_notes: notes }), 422, 'review_notes_required');
  }
  for (const [app, status] of [[pending, 'pending_review'], [approved, 'approved']] as const) {
    const current = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
    assert.equal(current.review_status, status);
    assert.equal(current.review_notes, null);
    assert.deepEqual(await reviewEvents(app.id), []);
    assert.deepEqual(await reviewAudits(app.id), []);
  }
});

test("rejected → pending_review is the owner's move only: a configuration PATCH by applications.manage (not the owner) leaves a rejected Application rejected", async () => {
  const app = await newApp(t, admin);
  await setReview(t, app.id, 'pending_review');
  assertStatus(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'fix the icon' }), 200);
  const body = assertStatus(await patch(admin, app.id, { icon_url: 'https://cdn.example.com/admin.png' }), 200);
  assert.equal(body.icon_url, 'https://cdn.example.com/admin.png');
  assert.equal(body.review_status, 'rejected');
  assert.deepEqual(await reviewAudits(app.id), ['rejected']);
});

test('a move not in the review table is 409 invalid_review_transition also without review_notes (not 422 review_notes_required), and nothing changes', async () => {
  const approved = await newApp(t, admin);
  let error = assertError(await patch(admin, approved.id, { review_status: 'rejected' }), 409, 'invalid_review_transition');
  assert.deepEqual(error.details, { from: 'approved', to: 'rejected' });
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  error = assertError(await patch(admin, pending.id, { review_status: 'suspended' }), 409, 'invalid_review_transition');
  assert.deepEqual(error.details, { from: 'pending_review', to: 'suspended' });
  const rejected = await newApp(t, admin);
  await setReview(t, rejected.id, 'rejected');
  assertError(await patch(admin, rejected.id, { review_status: 'suspended' }), 409, 'invalid_review_transition');
  for (const [app, status] of [[approved, 'approved'], [pending, 'pending_review'], [rejected, 'rejected']] as const) {
    assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).review_status, status);
    assert.deepEqual(await reviewAudits(app.id), []);
    assert.deepEqual(await reviewEvents(app.id), []);
  }
});

test('Part A convention 11 ("role deletion" is always destructive): a PATCH dropping a name whose unassigned Role goes with it is refused to a restrict_destructive key (403 destructive_operation_restricted) and deletes nothing; adding a name is not', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor'] });
  const editor = `role_${app.slug}_editor`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${editor}`, admin, { permissions: [], description: 'configured by hand' }), 200);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['applications.manage'], intendedUse: 'agent' });
  const error = assertError(await patch(restricted.secret, app.id, { available_app_roles: ['viewer'] }), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, restricted.id);
  assert.equal(await roleExists(editor), true);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${editor}`, admin), 200).description, 'configured by hand');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).available_app_roles, ['viewer', 'editor']);
  assert.deepEqual((await auditOf(t, editor)).map((r) => r.action), ['role.created', 'role.updated'], 'no role.deleted');
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
  // Not a role deletion: adding a name (seeding an empty Role) is open to the restricted key.
  assert.deepEqual(assertStatus(await patch(restricted.secret, app.id, { available_app_roles: ['viewer', 'editor', 'admin'] }), 200).available_app_roles, ['viewer', 'editor', 'admin']);
  // The unrestricted twin makes the deletion.
  const twin = await createApiKey(t, { scope: 'platform', permissions: ['applications.manage'], intendedUse: 'agent', restrictDestructive: false });
  assertStatus(await patch(twin.secret, app.id, { available_app_roles: ['viewer', 'admin'] }), 200);
  assert.equal(await roleExists(editor), false);
  assert.deepEqual((await auditOf(t, editor)).map((r) => r.action), ['role.created', 'role.updated', 'role.deleted']);
});

test('docs/decisions.md "A Role deleted with its name is a role deletion": the service refuses a restrict_destructive key "after 409 app_role_in_use, which holds for every caller", whichever names the PATCH drops: a name whose Role is assigned is 409 for the key, also beside an unassigned one listed before it, and nothing is deleted', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer', 'editor', 'admin'] });
  const user = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_admin`, admin, {}), 201);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['applications.manage'], intendedUse: 'agent' });
  for (const roles of [['viewer', 'editor'], ['viewer']]) {
    const error = assertError(await patch(restricted.secret, app.id, { available_app_roles: roles }), 409, 'app_role_in_use');
    assert.equal(error.details.role_id, `role_${app.slug}_admin`, roles.join());
  }
  for (const name of ['viewer', 'editor', 'admin']) assert.equal(await roleExists(`role_${app.slug}_${name}`), true, name);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).available_app_roles, ['viewer', 'editor', 'admin']);
});

test("rejected → pending_review on the owner's PATCH of any one configuration field (name, description, icon_url, launch_url, redirect_uris, support_url, email_from_name, settings_schema, permissions, available_app_roles, default_app_role), each sent alone", async () => {
  const values = (slug: string): Record<string, unknown> => ({
    name: 'Fixed', description: 'now described', icon_url: 'https://cdn.example.com/i.png', launch_url: 'https://app.example.com/v2',
    redirect_uris: ['https://app.example.com/cb'], support_url: 'https://help.example.com', email_from_name: 'Team',
    settings_schema: { type: 'object', properties: { a: { type: 'string' } } }, permissions: [{ key: `app.${slug}.read`, description: 'read' }],
    available_app_roles: ['viewer', 'editor'], default_app_role: 'viewer',
  });
  for (const field of Object.keys(values('x'))) {
    const app = await newApp(t, admin, { available_app_roles: ['viewer'] });
    await setReview(t, app.id, 'pending_review');
    assertStatus(await patch(admin, app.id, { review_status: 'rejected', review_notes: 'fix it' }), 200);
    const body = assertStatus(await patch(app.owner!.token, app.id, { [field]: values(app.slug)[field] }), 200);
    assert.equal(body.review_status, 'pending_review', field);
    assert.deepEqual(body[field], values(app.slug)[field], field);
    assert.deepEqual(await reviewAudits(app.id), ['rejected', 'pending_review'], field);
  }
});
test('review_notes is a moderation field applications.manage may clear: PATCH review_notes null stores null (not the earlier notes), without a review move', async () => {
  const app = await newApp(t, admin);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'abuse report' }), 200);
  assertStatus(await patch(admin, app.id, { review_status: 'approved' }), 200);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).review_notes, 'abuse report');
  const cleared = assertStatus(await patch(admin, app.id, { review_notes: null }), 200);
  assert.equal(cleared.review_notes, null);
  assert.equal(cleared.review_status, 'approved');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).review_notes, null);
  assert.deepEqual(await reviewAudits(app.id), ['suspended', 'approved']);
});
test("only a rejected Application returns to the queue: the owner's configuration PATCH leaves a suspended one suspended (reinstatement is applications.manage's) and no review row is written", async () => {
  const app = await newApp(t, admin);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'abuse report' }), 200);
  const body = assertStatus(await patch(app.owner!.token, app.id, { name: 'Cleaned up' }), 200);
  assert.equal(body.name, 'Cleaned up');
  assert.equal(body.review_status, 'suspended');
  assert.deepEqual(await reviewAudits(app.id), ['suspended']);
  assert.deepEqual((await reviewEvents(app.id)).map((e) => e.review_status), ['suspended']);
});

test('review_notes are required with the move itself: suspending again after a reinstatement, with the earlier notes still stored, is 422 review_notes_required unless the PATCH sends notes', async () => {
  const app = await newApp(t, admin);
  assertStatus(await patch(admin, app.id, { review_status: 'suspended', review_notes: 'first report' }), 200);
  assertStatus(await patch(admin, app.id, { review_status: 'approved' }), 200);
  assertError(await patch(admin, app.id, { review_status: 'suspended' }), 422, 'review_notes_required');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).review_status, 'approved');
  assert.deepEqual(await reviewAudits(app.id), ['suspended', 'approved']);
});
