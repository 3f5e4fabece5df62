// Part A, Users: the export (GET /v1/users/{id}/export): its bundle, what it leaves out, its rate limit.
// Tests here move the clock forward by days; each signs in again as it needs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { createUser, login, type TestUser } from '../helpers/fixtures.js';
import { totpCode } from '../auth/support.js';
import { assertError, assertStatus, auditFor, call, createApplication, createOrganization, DAY, grant, orgGrant, sql } from './support.js';
import { privacyCalls } from './privacy-support.js';
import { withTransactionStatements } from '../helpers/locks.js';

let t: TestApp;
let adminUser: TestUser;

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { asAdmin, exportOf, richUser } = privacyCalls(() => ({ t, adminUser }));

/** Moves the clock to `secondsInto` seconds after the start of the next UTC day. */
function alignToDay(secondsInto: number): void {
  const ms = t.clock.now().getTime() % (DAY * 1000);
  t.clock.advance((DAY * 1000 - ms + secondsInto * 1000) / 1000);
}

test('GET /v1/users/{id}/export (self) returns every key of the bundle: exported_at, user, profile, settings, identities, sessions, organizations, roles, applications, audit_events', async () => {
  const r = await richUser();
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  assert.deepEqual(Object.keys(bundle).sort(), [
    'applications', 'audit_events', 'exported_at', 'identities', 'organizations', 'profile', 'roles', 'sessions', 'settings', 'user',
  ]);
  assert.ok(!Number.isNaN(Date.parse(bundle.exported_at)), '!Number.isNaN(Date.parse(bundle.exported_at))');
  assert.equal(bundle.user.id, r.user.id);
  assert.equal(bundle.user.email, r.user.email);
  assert.equal(bundle.user.pending_email, r.pendingEmail);
  assert.equal(bundle.profile.user_id, r.user.id);
  for (const k of ['theme', 'timezone', 'notifications', 'locale']) assert.ok(k in bundle.settings, `settings.${k}`);
  assert.deepEqual(Object.keys(bundle.settings.notifications).sort(), ['email', 'sms']);
  assert.equal(bundle.identities.length, 1);
  assert.deepEqual(Object.keys(bundle.identities[0]).sort(), ['last_used_at', 'method', 'mfa_enabled']);
  assert.equal(bundle.identities[0].method, 'password');
  assert.equal(bundle.identities[0].mfa_enabled, true);
  assert.ok(bundle.sessions.length >= 2, 'bundle.sessions.length >= 2');
  assert.ok(bundle.sessions.some((s: { id: string }) => s.id === r.session.session_id), 'bundle.sessions.some((s: { id: string }) => s.id === r.session.session_id)');
  for (const s of bundle.sessions) assert.deepEqual(Object.keys(s).sort(), ['created_at', 'id', 'ip_address', 'user_agent']);
  assert.deepEqual(bundle.organizations.map((o: any) => [o.organization_id, o.role, o.membership_status, typeof o.joined_at]), [[r.org, 'org_admin', 'active', 'string']]);
  assert.ok(bundle.roles.some((x: any) => x.role_id === 'role_platform_member' && x.application_id === null && typeof x.assigned_at === 'string'), 'bundle.roles.some((x: any) => x.role_id === \'role_platform_member\' && x.application_id === null && typeof x.assigned_at === \'string\')');
  const app = bundle.applications.find((a: any) => a.application_id === r.app.id);
  assert.ok(app, JSON.stringify(bundle.applications));
  assert.equal(app.entitlement.status, 'active');
  assert.equal(app.entitlement.source, 'admin_grant');
  assert.ok(app.entitlement.starts_at, 'app.entitlement.starts_at');
  assert.equal(app.app_profile.display_handle, 'handle');
  assert.deepEqual(app.app_profile.custom, { fav: 'blue' });
  assert.deepEqual(app.app_settings, { dark: true });
  const actions = bundle.audit_events.map((e: { action: string }) => e.action);
  assert.ok(actions.includes('user.created') && actions.includes('user.mfa_enabled'), actions.join());
});

test('every timestamp of the export is ISO 8601 UTC with Z and milliseconds, as everywhere in the API (also those built in SQL: entitlement starts_at, app_profile updated_at)', async () => {
  const r = await richUser();
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  const app = bundle.applications.find((a: any) => a.application_id === r.app.id);
  assert.match(app.entitlement.starts_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.equal(app.entitlement.ends_at, null);
  assert.match(app.app_profile.updated_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  const stamps: string[] = [];
  const walk = (v: unknown, key: string) => {
    if (typeof v === 'string' && /(_at|_for)$/.test(key)) stamps.push(`${key}=${v}`);
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, Array.isArray(v) ? key : k);
  };
  walk(bundle, '');
  assert.ok(stamps.length > 10, stamps.join());
  assert.deepEqual(stamps.filter((s) => !/=\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(s)), []);
});

test('the export\'s audit_events are the user\'s own trail in hot storage, shaped as GET /v1/audit-events returns them; organizations include a pending invitation', async () => {
  const { user, token } = await (async () => {
    const u = await createUser(t);
    return { user: u, token: await login(t, u) };
  })();
  const bundle = assertStatus(await exportOf('me', token), 200);
  const listed = assertStatus(await call(t, 'GET', '/v1/audit-events?target_user_id=me&limit=100', token), 200).data;
  assert.ok(bundle.audit_events.length > 0, 'bundle.audit_events.length > 0');
  assert.deepEqual(bundle.audit_events, [...listed].reverse(), 'the same events, oldest first');
  // Outside the 365-day hot window, an event is no longer exported.
  t.clock.advance(366 * DAY);
  const later = await login(t, user);
  const old = assertStatus(await exportOf('me', later), 200).audit_events.map((e: { id: string }) => e.id);
  for (const e of bundle.audit_events) assert.ok(!old.includes(e.id), `${e.action} is older than the hot window`);
  // A pending Organization invitation is data about the user too.
  const orgAdmin = await createUser(t);
  const orgToken = await login(t, orgAdmin);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgToken, { name: 'Export Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgToken, { email: user.email }), 201);
  const withInvite = assertStatus(await exportOf('me', later), 200);
  assert.deepEqual(withInvite.organizations, [{ organization_id: org.id, role: 'member', membership_status: 'pending', joined_at: null }]);
});

test('the export never contains a password hash, MFA secret, token or key secret', async () => {
  const r = await richUser();
  const res = await exportOf(r.user.id, await asAdmin());
  assertStatus(res, 200);
  const text = res.body;
  const identity = (await sql(t, 'SELECT password_hash, totp_secret FROM identities WHERE user_id = $1', [r.user.id]))[0];
  const forbidden: Record<string, string> = {
    argon2: '$argon2',
    password_hash: identity.password_hash,
    totp_secret: r.mfa.secret,
    stored_totp_secret: identity.totp_secret,
    refresh_token: r.session.refresh_token,
    access_token: r.session.access_token,
    enrollment_access_token: r.mfa.token,
    email_change_token: r.changeToken,
    api_key_secret: r.key.secret,
    ...Object.fromEntries(r.mfa.recoveryCodes.map((c, i) => [`recovery_code_${i}`, c])),
  };
  for (const [what, value] of Object.entries(forbidden)) {
    assert.ok(value, what);
    assert.ok(!text.includes(value), `the export contains the ${what}`);
  }
  for (const column of ['password_hash', 'totp_secret', 'token_hash', 'secret_hash', 'code_hash']) assert.ok(!text.includes(column), column);
});

test('the export holds only the user\'s own rows: another user\'s sessions, Entitlement, AppProfile and AppSettings on the same Application are not in it', async () => {
  const r = await richUser();
  const other = r.buddy;
  await login(t, other);
  t.clock.advance(1); // the other user's grant is the newer one on the Application
  await grant(t, other.id, r.app.id);
  await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'someone-else', '{"fav":"red"}', now())`, [other.id, r.app.id]);
  await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"dark":false}', now())`, [other.id, r.app.id]);
  const otherApp = await createApplication(t);
  await grant(t, other.id, otherApp.id);
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  const own = await sql<{ id: string }>(t, 'SELECT id FROM sessions WHERE user_id = $1 ORDER BY created_at', [r.user.id]);
  assert.deepEqual(bundle.sessions.map((s: { id: string }) => s.id), own.map((s) => s.id));
  assert.deepEqual(bundle.applications.map((a: any) => a.application_id), [r.app.id]);
  const [app] = bundle.applications;
  assert.equal(app.entitlement.id, r.entitlementId);
  assert.deepEqual([app.app_profile.display_handle, app.app_profile.custom], ['handle', { fav: 'blue' }]);
  assert.deepEqual(app.app_settings, { dark: true });
});

test('the export\'s identities show mfa_enabled as the User does: a TOTP enrolment begun but never confirmed is not mfa_enabled; once confirmed it is', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const begun = assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp', token), 200);
  assert.ok(begun.secret, 'precondition: an enrolment is under way');
  const pending = assertStatus(await exportOf('me', token), 200);
  assert.deepEqual(pending.identities.map((i: any) => [i.method, i.mfa_enabled]), [['password', false]]);
  assert.equal(pending.user.mfa_enabled, false);
  assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp/confirm', token, { code: await totpCode(t, begun.secret) }), 200);
  const enabled = assertStatus(await exportOf('me', token), 200);
  assert.deepEqual(enabled.identities.map((i: any) => [i.method, i.mfa_enabled]), [['password', true]]);
  assert.equal(enabled.user.mfa_enabled, true);
});

test('export is limited to 5 calls per user per day (self and admin calls count together): the 6th gets 429 rate_limited with Retry-After; the next day it works again', async () => {
  alignToDay(60);
  const user = await createUser(t);
  const token = await login(t, user);
  const admin = await asAdmin();
  for (let i = 0; i < 3; i++) assertStatus(await exportOf('me', token), 200);
  for (let i = 0; i < 2; i++) assertStatus(await exportOf(user.id, admin), 200);
  const limited = await exportOf(user.id, admin);
  assertError(limited, 429, 'rate_limited');
  const retryAfter = Number(limited.headers['retry-after']);
  assert.ok(retryAfter >= 1 && retryAfter <= DAY, String(limited.headers['retry-after']));
  assertError(await exportOf('me', token), 429, 'rate_limited');
  // Another user's allowance is untouched.
  assertStatus(await exportOf('me', await login(t, await createUser(t))), 200);
  t.clock.advance(DAY);
  assertStatus(await exportOf('me', await login(t, user)), 200);
});

test('Export calls "5 per user per day" count exports made: a call that fails while the bundle is read (500) is not counted, so five exports still follow it and the sixth gets 429 rate_limited', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  let fail = true;
  const failOnce = async (run: () => Promise<unknown>, text: string) => {
    if (fail && text.includes('FOR KEY SHARE OF u')) {
      fail = false;
      throw new Error('the bundle read fails');
    }
    return run();
  };
  const failed = await withTransactionStatements(t, failOnce, () => exportOf('me', token));
  assert.equal(fail, false, 'the bundle read was reached');
  assertError(failed, 500, 'internal_error');
  for (let i = 0; i < 5; i++) assertStatus(await exportOf('me', token), 200);
  assertError(await exportOf('me', token), 429, 'rate_limited');
});

test('Export calls "5 per user per day": a call is counted for exactly 24 hours: 5 calls at one instant leave none 1 second before they are 24 hours old (429 rate_limited, Retry-After 1), and at exactly 24 hours the next call is allowed', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const token = await login(t, user);
    for (let i = 0; i < 5; i++) assertStatus(await exportOf('me', token), 200);
    const first = await exportOf('me', token);
    assertError(first, 429, 'rate_limited');
    assert.equal(first.headers['retry-after'], String(DAY));
    t.clock.advance(DAY - 1);
    const late = await exportOf('me', await login(t, user));
    assertError(late, 429, 'rate_limited');
    assert.equal(late.headers['retry-after'], '1');
    t.clock.advance(1);
    assertStatus(await exportOf('me', await login(t, user)), 200);
  });
});

test('Export calls "5 per user per day" count a rolling 24 hours, not the UTC day: 5 calls at 23:59 UTC leave none for 00:01 UTC; 429 rate_limited with Retry-After until the oldest call leaves the window', async () => {
  alignToDay(DAY - 60); // 23:59:00 UTC
  const user = await createUser(t);
  const token = await login(t, user);
  const stamps: number[] = [];
  for (let i = 0; i < 5; i++) {
    if (i > 0) t.clock.advance(10);
    const before = t.clock.now().getTime();
    assertStatus(await exportOf('me', token), 200);
    stamps.push(before, t.clock.now().getTime());
  }
  t.clock.advance(90); // 00:01 UTC of the next day
  assert.equal(new Date(t.clock.now().getTime() - 90_000).getUTCDate(), new Date(stamps[0]).getUTCDate());
  assert.notEqual(t.clock.now().getUTCDate(), new Date(stamps[0]).getUTCDate());

  const sent = t.clock.now().getTime();
  const limited = await exportOf('me', token);
  const received = t.clock.now().getTime();
  assertError(limited, 429, 'rate_limited');
  // Retry-After: seconds until the first call (between stamps[0] and stamps[1]) is 24 hours old.
  const retryAfter = Number(limited.headers['retry-after']);
  assert.ok(retryAfter >= Math.floor((stamps[0] + DAY * 1000 - received) / 1000), `Retry-After ${retryAfter}`);
  assert.ok(retryAfter <= Math.ceil((stamps[1] + DAY * 1000 - sent) / 1000), `Retry-After ${retryAfter}`);
  assert.ok(retryAfter < DAY - 120 && retryAfter > DAY - 200, `Retry-After ${retryAfter}`);

  // Still refused a little before the oldest call leaves the window (refused calls do not count).
  t.clock.advance(retryAfter - 5);
  assertError(await exportOf('me', await login(t, user)), 429, 'rate_limited');
  // Once it has left, exactly one call is free again; the next waits for the second oldest (10 seconds later).
  t.clock.advance(6);
  const fresh = await login(t, user);
  assertStatus(await exportOf('me', fresh), 200);
  const again = await exportOf(user.id, await asAdmin());
  assertError(again, 429, 'rate_limited');
  const wait = Number(again.headers['retry-after']);
  assert.ok(wait >= 1 && wait <= 10, `Retry-After ${wait}`);
  t.clock.advance(wait);
  assertStatus(await exportOf('me', fresh), 200);
});

// ---- the bundle: roles, audit trail, applications ------------------------------------------------

test('the export\'s roles list every Role assignment (role_id, application_id, assigned_at): an Application Role with its application_id as well as the platform member Role', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  const app = await createApplication(t);
  await sql(t, `UPDATE applications SET available_app_roles = '{viewer}' WHERE id = $1`, [app.id]);
  const role = assertStatus(await call(t, 'POST', '/v1/roles', admin, { name: 'viewer', scope: app.id, permissions: [`app.${app.slug}.read`] }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/${role.id}`, admin, {}), 201);
  const bundle = assertStatus(await exportOf('me', await login(t, user)), 200);
  const roles = bundle.roles.map((r: any) => [r.role_id, r.application_id]).sort();
  assert.deepEqual(roles, [[role.id, app.id], ['role_platform_member', null]].sort());
});

test('the export\'s audit_events are only the user\'s own trail: events the user wrote about another user (an admin editing someone\'s Profile) are not in it', async () => {
  const adminToken = await asAdmin();
  const other = await createUser(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${other.id}/profile`, adminToken, { display_name: 'Edited By Admin' }), 200);
  const edit = (await auditFor(t, other.id, 'profile.updated')).at(-1)!;
  assert.equal(edit.actor_id, adminUser.id, 'precondition: the admin is the actor');
  const bundle = assertStatus(await exportOf('me', adminToken), 200);
  assert.ok(!bundle.audit_events.some((e: { id: string }) => e.id === edit.id), 'another user\'s event is in the export');
  for (const e of bundle.audit_events) assert.equal(e.target_user_id, adminUser.id, `${e.action} is about ${e.target_user_id}`);
});

test('the export\'s applications are every Application the user has an Entitlement, an AppProfile or AppSettings overrides on: one known only by its AppProfile, or only by its AppSettings, is listed too (entitlement null)', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const onlyProfile = await createApplication(t);
  const onlySettings = await createApplication(t);
  await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'only-profile', '{}', now())`, [user.id, onlyProfile.id]);
  await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"lang":"fr"}', now())`, [user.id, onlySettings.id]);
  const bundle = assertStatus(await exportOf('me', token), 200);
  const byApp = Object.fromEntries(bundle.applications.map((a: { application_id: string }) => [a.application_id, a]));
  assert.deepEqual(Object.keys(byApp).sort(), [onlyProfile.id, onlySettings.id].sort());
  assert.equal(byApp[onlyProfile.id].entitlement, null);
  assert.equal(byApp[onlyProfile.id].app_profile.display_handle, 'only-profile');
  assert.deepEqual(byApp[onlyProfile.id].app_settings, {});
  assert.equal(byApp[onlySettings.id].entitlement, null);
  assert.equal(byApp[onlySettings.id].app_profile, null);
  assert.deepEqual(byApp[onlySettings.id].app_settings, { lang: 'fr' });
});

test('the export\'s applications include those the user reaches through an Organization: the grant of an Organization they are an active member of is exported as GET /v1/users/{id}/entitlements shows it (granted_via with organization_id and member_decision); a personal row has granted_via null and is the one exported beside an Organization\'s grant; a pending invitation\'s Organization adds nothing', async () => {
  const user = await createUser(t);
  const other = await createUser(t);
  const viaOrg = await createApplication(t);
  const both = await createApplication(t);
  const invitedTo = await createApplication(t);
  const org = await createOrganization(t, [other.id, user.id]);
  const orgRow = await orgGrant(t, org, viaOrg.id);
  await orgGrant(t, org, both.id);
  const personal = await grant(t, user.id, both.id);
  const pending = await createOrganization(t, [other.id]);
  await sql(t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at) VALUES ($1, $2, 'member', 'pending', now())`, [pending, user.id]);
  await orgGrant(t, pending, invitedTo.id);
  const excluded = await createApplication(t);
  await orgGrant(t, org, excluded.id, { memberScope: 'denylist', overrides: [user.id] });
  const bundle = assertStatus(await exportOf('me', await login(t, user)), 200);
  const byApp = Object.fromEntries(bundle.applications.map((a: { application_id: string }) => [a.application_id, a]));
  assert.deepEqual(Object.keys(byApp).sort(), [viaOrg.id, both.id, excluded.id].sort());
  const e = byApp[viaOrg.id].entitlement;
  assert.deepEqual([e.id, e.status, e.source, e.granted_via], [orgRow, 'active', 'org_seat', { organization_id: org, member_decision: 'included' }]);
  assert.match(e.starts_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.deepEqual([byApp[viaOrg.id].app_profile, byApp[viaOrg.id].app_settings], [null, {}]);
  assert.deepEqual([byApp[both.id].entitlement.id, byApp[both.id].entitlement.granted_via], [personal, null]);
  assert.deepEqual(byApp[excluded.id].entitlement.granted_via, { organization_id: org, member_decision: 'excluded' });
});

test('the export\'s entitlement per Application is the latest one: a grant revoked earlier and a new active grant on the same Application export the active one', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  await grant(t, user.id, app.id, { status: 'revoked' });
  t.clock.advance(60);
  const current = await grant(t, user.id, app.id);
  const bundle = assertStatus(await exportOf('me', await login(t, user)), 200);
  assert.deepEqual(bundle.applications.map((a: any) => [a.application_id, a.entitlement.id, a.entitlement.status]), [[app.id, current, 'active']]);
});
