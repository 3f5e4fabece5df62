// Part A, Users: erasure requests, their cancel and the 7-day hard-delete cascade (its races: privacy-erasure-races.test.ts).
// Tests here move the clock forward by days; each signs in again as it needs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { createUser, login, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { createMfaUser } from '../auth/support.js';
import {
  assertError, assertStatus, auditFor, call, createApplication, createOrganization, DAY, grant, liveSessionCount, orgGrant, outboxFor, rand, sql,
  userRow,
} from './support.js';
import { privacyCalls } from './privacy-support.js';

let t: TestApp;
let adminUser: TestUser;

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { asAdmin, exportOf, requestErasure, count, richUser } = privacyCalls(() => ({ t, adminUser }));
const cancelErasure = (id: string, token: string) => call(t, 'DELETE', `/v1/users/${id}/erasure-requests/current`, token);

test('POST /v1/users/{id}/erasure-requests (self): 202 {user_id, status scheduled, requested_at, scheduled_for = requested_at + 7 days}; the user is soft-deleted at once and every session revoked', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  await grant(t, user.id, app.id);
  const token = await login(t, user);
  await login(t, user);
  const res = await requestErasure('me', token, { reason: 'please forget me' });
  const body = assertStatus(res, 202);
  assert.deepEqual(Object.keys(body).sort(), ['requested_at', 'scheduled_for', 'status', 'user_id']);
  assert.equal(body.user_id, user.id);
  assert.equal(body.status, 'scheduled');
  assert.equal(Date.parse(body.scheduled_for) - Date.parse(body.requested_at), 7 * DAY * 1000);
  const row = await userRow(t, user.id);
  assert.equal(row!.status, 'deleted');
  assert.ok(row!.deleted_at, 'row!.deleted_at');
  assert.equal(await liveSessionCount(t, user.id), 0);
  assert.equal((await call(t, 'GET', '/v1/users/me', token)).statusCode, 401);
  const actions = (await auditFor(t, user.id)).map((a) => a.action);
  assert.ok(actions.includes('user.deleted') && actions.includes('user.erasure_requested'), actions.join());
  const events = (await outboxFor(t, user.id)).map((e) => `${e.type}:${e.data.reason ?? ''}`).sort();
  assert.deepEqual(events, ['access.revoked:user_deleted', 'user.deleted:']);
});

test('an erasure request is idempotent: a repeat returns the existing request with the same body and changes nothing', async () => {
  const user = await createUser(t);
  const first = assertStatus(await requestErasure('me', await login(t, user)), 202);
  const admin = await asAdmin();
  const auditCount = (await auditFor(t, user.id)).length;
  const outboxCount = (await outboxFor(t, user.id)).length;
  const stored = async () => ({
    request: await sql(t, 'SELECT status, reason, requested_at, scheduled_for, requested_by_type, requested_by_id FROM erasure_requests WHERE user_id = $1', [user.id]),
    user: await userRow(t, user.id),
  });
  const before = await stored();
  t.clock.advance(5);
  const again = await requestErasure(user.id, admin);
  assert.deepEqual(assertStatus(again, 202), first);
  assert.deepEqual(assertStatus(await requestErasure(user.id, admin, { reason: 'again' }), 202), first);
  assert.equal((await auditFor(t, user.id)).length, auditCount, 'no new audit rows');
  assert.equal((await outboxFor(t, user.id)).length, outboxCount, 'no new webhook or access events');
  assert.deepEqual(await stored(), before, 'the request (its reason and requester too) and the user row are as they were');
});

test('concurrent erasure requests for one user make one request: the same body for all, one user.erasure_requested and one user.deleted (on PostgreSQL they run at once)', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  const answers = await Promise.all(Array.from({ length: 4 }, () => requestErasure(user.id, admin)));
  const bodies = answers.map((a) => assertStatus(a, 202));
  for (const b of bodies) assert.deepEqual(b, bodies[0]);
  assert.equal((await auditFor(t, user.id, 'user.erasure_requested')).length, 1);
  assert.equal((await auditFor(t, user.id, 'user.deleted')).length, 1);
});

test('an erasure request is allowed for an already soft-deleted user when users.manage: the user stays deleted as they were (no second user.deleted, deleted_at unchanged)', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin)).statusCode, 204);
  const deletedAt = (await userRow(t, user.id))!.deleted_at;
  t.clock.advance(60);
  const body = assertStatus(await requestErasure(user.id, admin), 202);
  assert.equal(body.status, 'scheduled');
  assert.equal((await auditFor(t, user.id, 'user.erasure_requested')).length, 1);
  assert.equal((await auditFor(t, user.id, 'user.deleted')).length, 1);
  assert.equal((await outboxFor(t, user.id)).filter((e) => e.type === 'user.deleted').length, 1);
  assert.deepEqual((await userRow(t, user.id))!.deleted_at, deletedAt);
});

test('DELETE /v1/users/{id}/erasure-requests/current (users.manage) cancels inside the window: 204, the user stays soft-deleted; a second cancel gets 404 erasure_not_scheduled; then the user can be restored', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  assertStatus(await requestErasure(user.id, admin), 202);
  const res = await cancelErasure(user.id, admin);
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(res.body, '');
  assert.equal((await userRow(t, user.id))!.status, 'deleted');
  assertError(await cancelErasure(user.id, admin), 404, 'erasure_not_scheduled');
  // The cascade never runs for a cancelled request.
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const fresh = await asAdmin();
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, fresh, { status: 'active' }), 200).status, 'active');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM identities WHERE user_id = $1', [user.id]))[0].n, 1);
});

test('"users.manage may cancel it inside the window": a cancel just before the 7 days end (scheduled_for not yet reached, the cascade job run) is 204 and the user is never erased', async () => {
  const user = await createUser(t);
  const requested = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(Date.parse(requested.scheduled_for) - Date.parse(requested.requested_at), 7 * DAY * 1000);
  t.clock.advance(7 * DAY - 5);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'not erased before the 7 days');
  const res = await cancelErasure(user.id, await asAdmin());
  assert.equal(res.statusCode, 204, res.body);
  t.clock.advance(DAY);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'a cancelled erasure never runs');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 1);
});

test('an erasure can be cancelled only inside the 7-day window: once scheduled_for has passed, before the cascade job ran, cancel is 404 erasure_not_scheduled and the cascade still erases', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  const admin = await asAdmin();
  assertError(await cancelErasure(user.id, admin), 404, 'erasure_not_scheduled');
  assert.equal((await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]))[0].status, 'scheduled');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 0);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'the due cascade ran');
});

test('cancel with nothing scheduled gets 404 erasure_not_scheduled', async () => {
  const user = await createUser(t);
  assertError(await cancelErasure(user.id, await asAdmin()), 404, 'erasure_not_scheduled');
});

test('the hard-delete cascade runs 7 days after the request, not before', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY - 3600);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'not yet');
  assert.equal(await count('profiles', 'user_id = $1', [user.id]), 1);
  t.clock.advance(3601);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased after 7 days');
  assert.equal((await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]))[0].status, 'completed');
});

test('"7 days later", on the clock: at scheduled_for itself the erasure can no longer be cancelled (404 erasure_not_scheduled) and the cascade erases the user', async () => {
  const user = await createUser(t);
  const scheduledFor = await withStoppedClock(t, async () => {
    const requested = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
    t.clock.advance((Date.parse(requested.scheduled_for) - t.clock.now().getTime()) / 1000);
    assert.equal(t.clock.now().toISOString(), requested.scheduled_for);
    assertError(await cancelErasure(user.id, await asAdmin()), 404, 'erasure_not_scheduled');
    await t.deps.jobs.runNow('erasure-cascade');
    return requested.scheduled_for;
  });
  assert.equal(new Date((await userRow(t, user.id))!.erased_at).toISOString(), scheduledFor, 'erased by the run at scheduled_for');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 0);
  assert.equal((await auditFor(t, user.id, 'user.erased')).length, 1);
});

test('"Erasure clears everything exported": a mail recorded against no user but sent to the erased user\'s address before their deletion (a Tenant owner\'s notice, such as webhook_disabled) goes with the cascade; one to another address, or queued after the deletion to the address someone reused, stays', async () => {
  const user = await createUser(t);
  const other = uniqueEmail('notice-other');
  const notice = (id: string, to: string, at: Date) =>
    sql(t, `INSERT INTO emails (id, template, to_address, subject, text_body, test_mode, next_attempt_at, created_at) VALUES ($1, 'webhook_disabled', $2, 'Webhook disabled', 'A subscription was disabled.', false, $3, $3)`, [id, to, at]);
  const before = new Date(t.clock.now().getTime() - 60_000);
  await notice(`eml_${rand()}`, user.email.toUpperCase(), before);
  await notice(`eml_${rand()}`, other, before);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  const reused = `eml_${rand()}`;
  await notice(reused, user.email, new Date(t.clock.now().getTime() + 1_000));
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const left = await sql<{ id: string; to_address: string }>(t, 'SELECT id, to_address FROM emails WHERE lower(to_address) IN (lower($1), lower($2))', [user.email, other]);
  assert.deepEqual(left.map((m) => m.to_address).sort(), [other, user.email].sort(), 'the notice to the erased address before deletion is gone; the others stay');
  assert.ok(left.some((m) => m.id === reused));
});

test('"Erasure clears everything exported": the tombstone user row keeps none of the exported User fields: no address, pending address, signup Application or last sign-in time', async () => {
  const app = await createApplication(t);
  const email = uniqueEmail('tombstone');
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email, password: 'tombstone-Passw0rd-here', application_id: app.id }), 201);
  const [{ id }] = await sql<{ id: string }>(t, 'SELECT id FROM users WHERE email = $1', [email]);
  const user = { id, email, password: 'tombstone-Passw0rd-here', mode: 'live' as const };
  const token = await login(t, user);
  const pendingEmail = uniqueEmail('tombstone-pending');
  assertStatus(await call(t, 'PATCH', '/v1/users/me', token, { email: pendingEmail }), 200);
  const before = await userRow(t, user.id);
  assert.deepEqual([before!.pending_email, before!.signup_application_id, before!.last_login_at !== null], [pendingEmail, app.id, true], 'precondition');
  assertStatus(await requestErasure('me', token), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const row = await userRow(t, user.id);
  assert.deepEqual(
    [row!.email, row!.pending_email, row!.signup_application_id, row!.last_login_at, row!.erased_at !== null],
    [`erased+${user.id.toLowerCase()}@erased.invalid`, null, null, null, true],
  );
});

test('a test-mode user\'s erasure stays in test mode: the cascade\'s user.erased and entitlement.deleted audit rows and its entitlement.deleted webhook are test-mode rows, as the grant was', async () => {
  const user = await createUser(t, { mode: 'test' });
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id, { mode: 'test' });
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  const audit = await sql(t, `SELECT action, test_mode FROM audit_events WHERE target_user_id = $1 AND action IN ('user.erased', 'entitlement.deleted') ORDER BY action`, [user.id]);
  assert.deepEqual(audit, [{ action: 'entitlement.deleted', test_mode: true }, { action: 'user.erased', test_mode: true }]);
  const events = await sql(t, `SELECT type, test_mode FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [entitlementId]);
  assert.deepEqual(events, [{ type: 'entitlement.deleted', test_mode: true }]);
});

test('the erasure cascade clears everything exported except global Settings (also memberships and member_overrides), and audit events persist with snapshot values redacted', async () => {
  const r = await richUser();
  const admin = await asAdmin();
  // An admin edit and an admin email change leave the address in audit snapshots.
  assertStatus(await call(t, 'PATCH', `/v1/users/${r.user.id}/profile`, admin, { display_name: 'Eraseme Person' }), 200);
  const secondEmail = uniqueEmail('second');
  assertStatus(await call(t, 'PATCH', `/v1/users/${r.user.id}`, admin, { email: secondEmail }), 200);
  const grantId = await orgGrant(t, r.org, r.app.id, { memberScope: 'allowlist', overrides: [r.user.id, r.buddy.id] });
  assertStatus(await requestErasure(r.user.id, admin, { reason: 'gdpr' }), 202);
  const auditBefore = (await auditFor(t, r.user.id)).length;
  const snapshotsWithEmail = await count('audit_events', `target_user_id = $1 AND (before::text ILIKE $2 OR after::text ILIKE $2)`, [r.user.id, `%${r.user.email}%`]);
  assert.ok(snapshotsWithEmail > 0, 'precondition: snapshots hold the email');
  // The address is reusable at once: another account signs up with it and gets its own mail.
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email: secondEmail, password: 'another-Passw0rd-here' }), 201);
  const othersMail = await sql<{ id: string }>(t, `SELECT id FROM emails WHERE lower(to_address) = lower($1) AND template = 'email_verification' ORDER BY created_at DESC LIMIT 1`, [secondEmail]);

  assert.ok((await count('access_states', 'user_id = $1', [r.user.id])) > 0, 'precondition: the user\'s announced access states');
  t.clock.advance(7 * DAY + 1);
  const result = await t.deps.jobs.runNow('erasure-cascade');
  assert.ok(Number(result.erased) >= 1, JSON.stringify(result));

  const id = r.user.id;
  for (const table of ['identities', 'sessions', 'role_assignments', 'organization_members', 'app_profiles', 'app_settings', 'entitlements', 'profiles', 'recovery_codes', 'one_time_tokens', 'access_states']) {
    assert.equal(await count(table, 'user_id = $1', [id]), 0, `${table} cleared`);
  }
  assert.equal(await count('settings', 'user_id = $1', [id]), 1, 'global Settings remain');
  const overrides = (await sql(t, 'SELECT member_overrides FROM entitlements WHERE id = $1', [grantId]))[0].member_overrides;
  assert.deepEqual(overrides, [r.buddy.id], 'the user is removed from member_overrides; others stay');
  assert.equal(await count('organization_members', 'user_id = $1', [r.buddy.id]), 1, 'other members stay');
  // "organization.member_removed | an active membership begins or is removed": the cascade's removal too.
  const removed = await sql(t, `SELECT type, data FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [id]);
  assert.deepEqual(removed, [{ type: 'organization.member_removed', data: { organization_id: r.org, user_id: id, role: 'org_admin' } }]);
  assert.equal(await count('audit_events', `action = 'organization.member_removed' AND target_user_id = $1 AND organization_id = $2`, [id, r.org]), 1);
  const row = await userRow(t, id);
  for (const email of [r.user.email, secondEmail, r.pendingEmail]) {
    assert.ok(!JSON.stringify(row).includes(email), `users row still holds ${email}`);
    assert.equal(await count('audit_events', `target_user_id = $1 AND (before::text ILIKE $2 OR after::text ILIKE $2)`, [id, `%${email}%`]), 0, `audit snapshots still hold ${email}`);
  }
  for (const email of [r.user.email, r.pendingEmail]) assert.equal(await count('emails', 'lower(to_address) = lower($1)', [email]), 0, `mails to ${email} cleared`);
  assert.equal(await count('emails', 'lower(to_address) = lower($1)', [secondEmail]), 1, "the erased user's mails to the address are cleared, the new account's stays");
  assert.equal(await count('emails', 'id = $1', [othersMail[0].id]), 1);
  const audit = await auditFor(t, id);
  assert.ok(audit.length >= auditBefore, 'audit events persist');
  assert.ok(audit.some((a) => a.action === 'user.erased'), 'audit.some((a) => a.action === \'user.erased\')');
  assert.ok(!JSON.stringify(audit.map((a) => [a.before, a.after])).includes('Eraseme'), 'profile snapshot values redacted');
  // Nothing remains to read or export.
  const fresh = await asAdmin();
  assertError(await call(t, 'GET', `/v1/users/${id}`, fresh), 404, 'user_not_found');
  assertError(await exportOf(id, fresh), 404, 'user_not_found');
  assertError(await call(t, 'GET', `/v1/users/${id}/profile`, fresh), 404, 'user_not_found');
});

test('"Erasure clears everything exported except global Settings": the erasure request\'s free-text reason (written about the user) is cleared by the cascade; the request row stays completed, and its reason was never in an audit snapshot', async () => {
  const user = await createUser(t);
  const reason = `Leaving; reach me at ${uniqueEmail('reason')} or +1 555 0100`;
  const res = await requestErasure('me', await login(t, user), { reason });
  assert.deepEqual(Object.keys(assertStatus(res, 202)).sort(), ['requested_at', 'scheduled_for', 'status', 'user_id']);
  assert.deepEqual(await sql(t, 'SELECT reason FROM erasure_requests WHERE user_id = $1', [user.id]), [{ reason }], 'kept while the erasure can be cancelled');
  assert.equal(await count('audit_events', `target_user_id = $1 AND (before::text || after::text) LIKE '%555 0100%'`, [user.id]), 0);

  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const rows = await sql(t, 'SELECT status, reason, completed_at IS NOT NULL AS completed FROM erasure_requests WHERE user_id = $1', [user.id]);
  assert.deepEqual(rows, [{ status: 'completed', reason: null, completed: true }]);
  assert.equal((await auditFor(t, user.id, 'user.erased')).length, 1);
  assertError(await call(t, 'GET', `/v1/users/${user.id}`, await asAdmin()), 404, 'user_not_found');
});

test('"entitlement.member_scope_changed | member_scope or member_overrides changed": the erasure cascade\'s removal of the user from an org grant\'s member_overrides writes one, audited, with the row\'s new updated_at', async () => {
  const admin = await asAdmin();
  const [user, buddy] = [await createUser(t), await createUser(t)];
  const app = await createApplication(t);
  const org = await createOrganization(t, [buddy.id, user.id]);
  const grantId = await orgGrant(t, org, app.id, { memberScope: 'allowlist', overrides: [user.id, buddy.id] });
  assertStatus(await requestErasure(user.id, admin, { reason: 'gdpr' }), 202);
  t.clock.advance(7 * DAY + 1);
  const cascadeStart = t.clock.now();
  await t.deps.jobs.runNow('erasure-cascade');

  const row = (await sql(t, 'SELECT member_overrides, updated_at FROM entitlements WHERE id = $1', [grantId]))[0];
  assert.deepEqual(row.member_overrides, [buddy.id]);
  const erasedAt = new Date(row.updated_at).toISOString();
  assert.ok(new Date(row.updated_at) >= cascadeStart, `the grant changed, so its updated_at moves to the cascade's time (${erasedAt})`);
  const events = await sql(t, `SELECT type, application_id, data FROM outbox_events WHERE type = 'entitlement.member_scope_changed' AND data->'entitlement'->>'id' = $1`, [grantId]);
  assert.equal(events.length, 1, JSON.stringify(events));
  assert.equal(events[0].application_id, app.id);
  assert.deepEqual(events[0].data.entitlement.member_overrides, [buddy.id]);
  assert.equal(events[0].data.entitlement.member_scope, 'allowlist');
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
  assert.equal(events[0].data.entitlement.updated_at, erasedAt);
  const audit = await sql(t, `SELECT action, organization_id, application_id, actor_type, before, after FROM audit_events WHERE target_id = $1 AND action = 'entitlement.member_scope_changed'`, [grantId]);
  assert.equal(audit.length, 1);
  assert.equal(audit[0].organization_id, org);
  assert.equal(audit[0].application_id, app.id);
  assert.equal(audit[0].actor_type, 'system');
  assert.deepEqual([audit[0].before.member_overrides, audit[0].after.member_overrides], [[user.id, buddy.id], [buddy.id]]);
});

test('"entitlement.deleted | hard-deleted" and "role.removed | assignment created or deleted": the erasure cascade\'s hard delete of the user\'s personal entitlements and Role assignments is announced (webhook and audit, actor system) as DELETE /v1/entitlements/{id} and DELETE /v1/users/{id}/roles/{roleId} announce theirs', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id);
  const roleId = `role_${app.slug}_editor`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'editor', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/${roleId}`, admin), 201);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const deleted = await sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [entitlementId]);
  assert.equal(deleted.length, 1, JSON.stringify(deleted));
  assert.equal(deleted[0].application_id, app.id);
  assert.equal(deleted[0].test_mode, false);
  assert.equal(deleted[0].data.entitlement.user_id, user.id);
  assert.equal(deleted[0].data.entitlement.status, 'active', 'the last state');
  const removed = await sql(t, `SELECT application_id, data FROM outbox_events WHERE type = 'role.removed' AND data->>'user_id' = $1 ORDER BY data->>'role_id'`, [user.id]);
  // Not the platform member Role: part of the user record (never announced as assigned), it goes with user.erased.
  assert.deepEqual(removed.map((r) => [r.application_id, r.data]), [[app.id, { user_id: user.id, role_id: roleId, application_id: app.id }]]);
  const audit = await auditFor(t, user.id);
  const entAudit = audit.filter((a) => a.action === 'entitlement.deleted');
  assert.deepEqual(entAudit.map((a) => [a.target_id, a.application_id, a.actor_type]), [[entitlementId, app.id, 'system']]);
  assert.deepEqual(audit.filter((a) => a.action === 'role.removed').map((a) => a.target_id), [roleId]);
  // Written with the rest of the cascade, their snapshots are redacted like every row about the user.
  for (const a of [...entAudit, ...audit.filter((x) => x.action === 'role.removed')]) assert.deepEqual(a.before, { redacted: true });
});

test('"Erasure clears everything exported": after the cascade, a retry of an Idempotency-Key write made to the soft-deleted user in the last 24 hours replays no erased data; it runs again and gets 404 user_not_found', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  // Six and a half days in, an admin writes to the soft-deleted user's Profile with an Idempotency-Key.
  t.clock.advance(6.5 * DAY);
  const admin = await asAdmin();
  const write = { display_name: 'Latewrite Person', contact_phone: '+4915112345678', contact_email: 'late-contact@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/profile`, admin, write, { 'idempotency-key': 'erase-late-write' }), 200);
  assert.equal(first.display_name, 'Latewrite Person');
  const otherUser = await createUser(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${otherUser.id}/profile`, admin, { display_name: 'Bystander Kept' }, { 'idempotency-key': 'erase-other-write' }), 200);

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const later = await asAdmin(); // the same credential (the admin user) in a new session
  const retry = await call(t, 'PATCH', `/v1/users/${user.id}/profile`, later, write, { 'idempotency-key': 'erase-late-write' });
  assertError(retry, 404, 'user_not_found');
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  for (const value of ['Latewrite', '4915112345678', 'late-contact@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
  // Another user's stored answer is not about the erased user and still replays.
  const kept = await call(t, 'PATCH', `/v1/users/${otherUser.id}/profile`, later, { display_name: 'Bystander Kept' }, { 'idempotency-key': 'erase-other-write' });
  assert.equal(kept.statusCode, 200);
  assert.equal(kept.headers['idempotent-replayed'], 'true');
});

test('"Erasure clears everything exported": a stored Idempotency-Key answer of an org admin\'s role change of the soft-deleted member (PATCH /v1/organizations/{id}/members/{userId}, holding their email and display name) is dropped by the cascade; a retry runs again and gets 404 member_not_found', async () => {
  const user = await createUser(t);
  const orgAdmin = await createUser(t);
  const org = await createOrganization(t, [orgAdmin.id, user.id]);
  assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/profile`, await asAdmin(), { display_name: 'Roleswap Person' }), 200);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(6.5 * DAY);
  const first = await call(t, 'PATCH', `/v1/organizations/${org}/members/${user.id}`, await login(t, orgAdmin), { role: 'org_admin' }, { 'idempotency-key': 'erase-member-role' });
  const body = assertStatus(first, 200);
  assert.deepEqual([body.email, body.display_name], [user.email, 'Roleswap Person'], 'precondition: the answer holds the member\'s email and name');

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const retry = await call(t, 'PATCH', `/v1/organizations/${org}/members/${user.id}`, await login(t, orgAdmin), { role: 'org_admin' }, { 'idempotency-key': 'erase-member-role' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'member_not_found');
  for (const value of [user.email, 'Roleswap']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('"Erasure clears everything exported": a stored Idempotency-Key answer of an operator\'s PATCH /v1/entitlements/{id} of the soft-deleted user\'s personal Entitlement (the exported entitlement, with its free-text disabled_reason) is dropped by the cascade; a retry runs again and gets 404 entitlement_not_found', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(6.5 * DAY);
  const write = { status: 'revoked', disabled_reason: 'Chargeback filed by Jane Roe, jane.roe@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/entitlements/${entitlementId}`, await asAdmin(), write, { 'idempotency-key': 'erase-late-entitlement' }), 200);
  assert.deepEqual([first.user_id, first.disabled_reason], [user.id, write.disabled_reason], 'precondition: the answer is the user\'s Entitlement');

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const retry = await call(t, 'PATCH', `/v1/entitlements/${entitlementId}`, await asAdmin(), write, { 'idempotency-key': 'erase-late-entitlement' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'entitlement_not_found');
  for (const value of [user.id, 'jane.roe@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('after the erasure cascade the id stays 404 user_not_found on the support MFA reset (DELETE /v1/users/{id}/mfa/totp) too, and no audit row is written', async () => {
  const mfa = await createMfaUser(t);
  const admin = await asAdmin();
  assertStatus(await requestErasure(mfa.user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const fresh = await asAdmin();
  assertError(await call(t, 'DELETE', `/v1/users/${mfa.user.id}/mfa/totp`, fresh), 404, 'user_not_found');
  assert.equal((await auditFor(t, mfa.user.id, 'user.mfa_reset')).length, 0);
});

test('an erasure the cascade cannot complete does not hold back the erasures due after it: they complete in the same run, the run reports failure naming the user, and that user is erased once the cascade can run', async () => {
  const stuck = await createUser(t);
  const next = await createUser(t);
  assertStatus(await requestErasure(stuck.id, await asAdmin()), 202);
  t.clock.advance(60);
  assertStatus(await requestErasure(next.id, await asAdmin()), 202);
  // The user due first cannot be written (a data fault, say).
  await sql(t, `CREATE FUNCTION refuse_stuck_user() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stuck user'; END $$`);
  await sql(t, `CREATE TRIGGER refuse_stuck_user BEFORE UPDATE ON users FOR EACH ROW WHEN (OLD.id = '${stuck.id}') EXECUTE FUNCTION refuse_stuck_user()`);
  try {
    t.clock.advance(7 * DAY + 1);
    await assert.rejects(t.deps.jobs.runNow('erasure-cascade'), (err: Error) => err.message.includes(stuck.id) && err.message.includes('stuck user'));
    assert.notEqual((await userRow(t, next.id))!.erased_at, null, 'the erasure due after it ran');
    assert.equal((await userRow(t, stuck.id))!.erased_at, null);
  } finally {
    await sql(t, 'DROP TRIGGER refuse_stuck_user ON users');
    await sql(t, 'DROP FUNCTION refuse_stuck_user()');
  }
  await t.deps.jobs.runNow('erasure-cascade');
  assert.notEqual((await userRow(t, stuck.id))!.erased_at, null);
});

test('"organization.member_removed | an active membership begins or is removed": the erasure cascade removes a pending invitation of the user too, audited but with no webhook (a pending membership never began)', async () => {
  const user = await createUser(t);
  const orgToken = await login(t, await createUser(t));
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgToken, { name: 'Pending Erasure Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgToken, { email: user.email }), 201);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(await count('organization_members', `user_id = $1 AND membership_status = 'pending'`, [user.id]), 1, 'precondition: the invitation is pending');
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0);
  assert.deepEqual(await sql(t, `SELECT type FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [user.id]), []);
  assert.deepEqual(await sql(t, `SELECT organization_id FROM audit_events WHERE action = 'organization.member_removed' AND target_user_id = $1`, [user.id]), [{ organization_id: org.id }]);
});

test('"Erasure clears everything exported", in the user\'s mode only: a test-mode mail recorded against no user to the erased live user\'s address (another mode\'s account) stays; the live one goes', async () => {
  const user = await createUser(t);
  const notice = (id: string, testMode: boolean, at: Date) =>
    sql(t, `INSERT INTO emails (id, template, to_address, subject, text_body, test_mode, next_attempt_at, created_at) VALUES ($1, 'webhook_disabled', $2, 'Webhook disabled', 'A subscription was disabled.', $3, $4, $4)`, [id, user.email, testMode, at]);
  const earlier = new Date(t.clock.now().getTime() - 60_000);
  const live = `eml_${rand()}`;
  const testMode = `eml_${rand()}`;
  await notice(live, false, earlier);
  await notice(testMode, true, earlier);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  assert.deepEqual((await sql<{ id: string }>(t, 'SELECT id FROM emails WHERE id = ANY($1::text[])', [[live, testMode]])).map((m) => m.id), [testMode]);
});

test('an erasure requested again after a cancel is a new request: 202 scheduled with requested_at the new request\'s time and scheduled_for 7 days after it, audited user.erasure_requested with that request; the cascade runs 7 days after it, not after the first', async () => {
  const user = await createUser(t);
  const first = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(DAY);
  assertStatus(await cancelErasure(user.id, await asAdmin()), 204);
  t.clock.advance(DAY);
  const again = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(again.status, 'scheduled');
  assert.ok(Date.parse(again.requested_at) >= Date.parse(first.requested_at) + 2 * DAY * 1000, `${again.requested_at} is the new request's time (first ${first.requested_at})`);
  assert.equal(Date.parse(again.scheduled_for) - Date.parse(again.requested_at), 7 * DAY * 1000);
  const requested = await auditFor(t, user.id, 'user.erasure_requested');
  assert.deepEqual(requested.map((a) => a.after), [first, again]);
  // 7 days after the first request (the cancelled one) the cascade leaves the user alone.
  t.clock.advance(5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok(!(await userRow(t, user.id))!.erased_at, 'not erased 7 days after the cancelled request');
  t.clock.advance(2 * DAY);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased 7 days after the new request');
});

test('"organization.member_removed" written by the erasure cascade is routed to the Applications the membership reached (an Organization grant), as a DELETE of the member routes it, though the cascade removed that path', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  const org = await createOrganization(t, [(await createUser(t)).id, user.id]);
  await orgGrant(t, org, app.id);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  const removed = await sql(t, `SELECT path_application_ids FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [user.id]);
  assert.deepEqual(removed, [{ path_application_ids: [app.id] }]);
});
