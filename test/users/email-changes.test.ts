// Part A, Users: email changes (self-service pending until verified; admin immediate), their notices,
// limits and expiry, and email_taken when a change collides. Admin create is in admin-create.test.ts;
// invitation re-sends in invitations.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, withStoppedClock, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { assertError, assertFields, assertStatus, auditFor, call, latestToken, mailsTo, NEW_PASSWORD, sql, userCalls, userRow } from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { create, patch, writes } = userCalls(() => ({ t, admin }));

test('self email change stays pending until verified: pending_email set, email_change_verification to the new address, email_change_notice to the old one', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('moved');
  const body = assertStatus(await patch('me', { email: newEmail }, token), 200);
  assert.equal(body.email, user.email, 'email keeps the old value meanwhile');
  assert.equal(body.pending_email, newEmail);
  assert.equal(body.email_verified, true);
  const row = await userRow(t, user.id);
  assert.equal(row!.email, user.email);
  assert.equal(row!.pending_email, newEmail);
  assert.deepEqual((await mailsTo(t, newEmail)).map((m) => m.template), ['email_change_verification']);
  assert.ok(await latestToken(t, newEmail, 'email_change_verification'), 'await latestToken(t, newEmail, \'email_change_verification\')');
  assert.deepEqual((await mailsTo(t, user.email)).map((m) => m.template), ['email_change_notice']);
  assert.deepEqual(await auditFor(t, user.id, 'user.email_changed'), [], 'not complete yet');
  // The old address still signs in.
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 200);
});

test('a users.manage holder changing their own email (PATCH /v1/users/me) is a self-service change too: pending until verified, old address notified, email unchanged meanwhile', async () => {
  const self = await userToken(t, { roles: ['superadmin'] });
  const newEmail = uniqueEmail('adminmoved');
  const body = assertStatus(await patch('me', { email: newEmail }, self.token), 200);
  assert.equal(body.email, self.user.email);
  assert.equal(body.pending_email, newEmail);
  assert.equal(body.email_verified, true);
  assert.equal((await userRow(t, self.user.id))!.email, self.user.email);
  assert.deepEqual((await mailsTo(t, newEmail)).map((m) => m.template), ['email_change_verification']);
  assert.deepEqual((await mailsTo(t, self.user.email)).map((m) => m.template), ['email_change_notice']);
  assert.deepEqual(await auditFor(t, self.user.id, 'user.email_changed'), []);
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: self.user.email, password: self.user.password }), 200);
});

test('self email change completes through POST /v1/auth/email/verify with the mailed token: email changes, pending_email clears, audit user.email_changed', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('verified');
  assertStatus(await patch(user.id, { email: newEmail }, token), 200);
  const verify = await call(t, 'POST', '/v1/auth/email/verify', null, { token: await latestToken(t, newEmail, 'email_change_verification') });
  assert.equal(verify.statusCode, 204, verify.body);
  const me = assertStatus(await call(t, 'GET', '/v1/users/me', token), 200);
  assert.equal(me.email, newEmail);
  assert.equal(me.pending_email, null);
  assert.equal(me.email_verified, true);
  const audit = await auditFor(t, user.id, 'user.email_changed');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_id, user.id);
  assert.equal(audit[0].before.email, user.email);
  assert.equal(audit[0].after.email, newEmail);
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: newEmail, password: user.password }), 200);
  assertError(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 401, 'invalid_credentials');
});

test('self email change to an address held by another user gets 409 email_taken and sends nothing', async () => {
  const { user, token } = await userToken(t);
  const holder = await createUser(t);
  assertError(await patch('me', { email: holder.email }, token), 409, 'email_taken');
  assert.equal((await userRow(t, user.id))!.pending_email, null);
  assert.deepEqual(await mailsTo(t, user.email), []);
});

test('a self-service caller may send only email: other fields get 422 validation_failed', async () => {
  const { token } = await userToken(t);
  assertFields(await patch('me', { email: uniqueEmail(), display_name: 'x' }, token), ['display_name']);
  assertFields(await patch('me', { email: 'nope' }, token), ['email']);
});

test('self email change: verification re-send is limited to 3 per email per hour, the first mail counted; the 4th request to the address gets 429 rate_limited with Retry-After, changes nothing and sends nothing', async () => {
  const { user, token } = await userToken(t);
  const target = uniqueEmail('target');
  // Ask for the change and withdraw it, three times: each request mails the target and the old address.
  for (let i = 0; i < 3; i++) {
    assert.equal(assertStatus(await patch('me', { email: target }, token), 200).pending_email, target);
    assert.equal(assertStatus(await patch('me', { email: user.email }, token), 200).pending_email, null);
  }
  const res = await patch('me', { email: target }, token);
  assertError(res, 429, 'rate_limited');
  assert.equal(res.headers['retry-after'], '3600', 'the three mails were all just now');
  assert.equal((await userRow(t, user.id))!.pending_email, null, 'nothing changes');
  assert.deepEqual((await mailsTo(t, target)).map((m) => m.template), Array(3).fill('email_change_verification'));
  assert.deepEqual((await mailsTo(t, user.email)).map((m) => m.template), Array(3).fill('email_change_notice'));
  // Withdrawing sends no mail and still works; an hour later a request mails again.
  assertStatus(await patch('me', { email: user.email }, token), 200);
  t.clock.advance(3600);
  const fresh = await login(t, user);
  admin.token = await login(t, admin.user);
  assert.equal(assertStatus(await patch('me', { email: target }, fresh), 200).pending_email, target);
  assert.equal((await mailsTo(t, target, 'email_change_verification')).length, 4);
});

test('self email change: the notice to the old address is limited the same way, 3 per hour; a 4th request to yet another address gets 429 rate_limited and the pending change and its link stay as they were', async () => {
  const { user, token } = await userToken(t);
  const targets = [uniqueEmail('a'), uniqueEmail('b'), uniqueEmail('c'), uniqueEmail('d')];
  for (const target of targets.slice(0, 3)) assertStatus(await patch('me', { email: target }, token), 200);
  assertError(await patch('me', { email: targets[3] }, token), 429, 'rate_limited');
  assert.equal((await userRow(t, user.id))!.pending_email, targets[2]);
  assert.deepEqual(await mailsTo(t, targets[3]), []);
  assert.equal((await mailsTo(t, user.email, 'email_change_notice')).length, 3);
  // The link of the change still pending completes it.
  const verify = await call(t, 'POST', '/v1/auth/email/verify', null, { token: await latestToken(t, targets[2], 'email_change_verification') });
  assert.equal(verify.statusCode, 204, verify.body);
  assert.equal((await userRow(t, user.id))!.email, targets[2]);
});

test('self email change limits are per mode (convention 10, "Uniqueness (for example of email) is per mode"; Auth Rule 6): a live and a test-mode account of one address are two addresses, so the live account\'s spent notice limit (3 per hour) leaves the test account\'s change request untouched', async () => {
  const email = uniqueEmail('twomodes');
  const live = await userToken(t, { email });
  const testUser = await userToken(t, { email, mode: 'test' });
  for (let i = 0; i < 3; i++) assertStatus(await patch('me', { email: uniqueEmail(`lv${i}`) }, live.token), 200);
  assertError(await patch('me', { email: uniqueEmail('lv3') }, live.token), 429, 'rate_limited');
  const target = uniqueEmail('tm');
  assert.equal(assertStatus(await patch('me', { email: target }, testUser.token), 200).pending_email, target);
  assert.deepEqual((await mailsTo(t, target)).map((m) => m.template), ['email_change_verification']);
});

test('admin email change (users.manage) is immediate and resets email_verified; a verification email goes to the new address', async () => {
  const user = await createUser(t);
  const newEmail = uniqueEmail('admin-set');
  const body = assertStatus(await patch(user.id, { email: newEmail }), 200);
  assert.equal(body.email, newEmail);
  assert.equal(body.email_verified, false);
  assert.equal(body.pending_email, null);
  const verification = await mailsTo(t, newEmail, 'email_verification');
  assert.equal(verification.length, 1);
  const token = await latestToken(t, newEmail, 'email_verification');
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token })).statusCode, 204);
  assert.equal((await userRow(t, user.id))!.email_verified, true);
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: newEmail, password: user.password }), 200);
  // The change completes at once: audit user.email_changed (Part A Events).
  const audit = await auditFor(t, user.id, 'user.email_changed');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.email, user.email);
  assert.equal(audit[0].after.email, newEmail);
});

test('admin email change of a soft-deleted user (users.manage, without a restore) is stored and audited user.email_changed, but mails nothing: a verification link for a deleted user would answer 400 invalid_token; restored later, the user asks for a verification mail and it works', async () => {
  const user = await createUser(t);
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin.token)).statusCode, 204);
  const newEmail = uniqueEmail('deleted-moved');
  const body = assertStatus(await patch(user.id, { email: newEmail }), 200);
  assert.deepEqual([body.status, body.email, body.email_verified], ['deleted', newEmail, false]);
  assert.equal((await mailsTo(t, newEmail)).length, 0, 'no mail to the new address of a deleted user');
  const audit = await auditFor(t, user.id, 'user.email_changed');
  assert.deepEqual([audit.length, audit[0].before.email, audit[0].after.email], [1, user.email, newEmail]);
  // Restored, the account is live again under the new address, and its verification works.
  assertStatus(await patch(user.id, { status: 'active' }), 200);
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: newEmail, password: user.password }), 200);
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify/resend', null, { email: newEmail })).statusCode, 202);
  const token = await latestToken(t, newEmail, 'email_verification');
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token })).statusCode, 204);
  assert.equal((await userRow(t, user.id))!.email_verified, true);
});

test('admin email change of an invited user: the invitation mailed to the old address stops working (400 invalid_token, nothing changes) and a new invitation goes to the new address', async () => {
  const oldEmail = uniqueEmail('inv-old');
  const invited = assertStatus(await create({ email: oldEmail }), 201);
  const oldToken = await latestToken(t, oldEmail, 'invitation');
  const newEmail = uniqueEmail('inv-new');
  assertStatus(await patch(invited.id, { email: newEmail }), 200);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: oldToken, password: NEW_PASSWORD }), 400, 'invalid_token');
  const row = (await userRow(t, invited.id))!;
  assert.equal(row.status, 'invited');
  assert.equal(row.email_verified, false);
  assert.equal((await mailsTo(t, newEmail, 'invitation')).length, 1, 'a new invitation to the new address');
  const accepted = assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: await latestToken(t, newEmail, 'invitation'), password: NEW_PASSWORD }), 200);
  assert.equal(accepted.user_id, invited.id);
});

test('pending_email is set only while the self-service change awaits verification: once the 24-hour link expired (at 24 hours exactly), the email-change-expiry job clears it', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('lapsed');
  const link = await withStoppedClock(t, async () => {
    assert.equal(assertStatus(await patch('me', { email: newEmail }, token), 200).pending_email, newEmail);
    const mailed = await latestToken(t, newEmail, 'email_change_verification');
    t.clock.advance(24 * 3600 - 1);
    await t.deps.jobs.runNow('email-change-expiry');
    assert.equal((await userRow(t, user.id))!.pending_email, newEmail, 'still awaiting within the 24 hours');
    t.clock.advance(1);
    await t.deps.jobs.runNow('email-change-expiry');
    assert.equal((await userRow(t, user.id))!.pending_email, null, 'cleared at the instant the link expires');
    return mailed;
  });
  assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: link }), 400, 'invalid_token');
  admin.token = await login(t, admin.user);
  const read = assertStatus(await call(t, 'GET', `/v1/users/${user.id}`, admin.token), 200);
  assert.equal(read.pending_email, null);
  assert.equal(read.email, user.email);
});

test('pending_email reads null from the instant its 24-hour link expires, before the email-change-expiry job runs: one millisecond before it still shows (the link is live), at 24 hours the link is refused and the field reads null (GET /v1/users/me, the admin read and the list agree)', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('boundary');
  const realNow = t.clock.now;
  const start = t.clock.now().getTime();
  t.clock.now = () => new Date(start);
  try {
    assert.equal(assertStatus(await patch('me', { email: newEmail }, token), 200).pending_email, newEmail);
    const link = await latestToken(t, newEmail, 'email_change_verification');
    const [{ expires_at: linkEnd }] = await sql<{ expires_at: Date }>(t, `SELECT expires_at FROM one_time_tokens WHERE user_id = $1 AND kind = 'email_change' AND used_at IS NULL`, [user.id]);
    assert.equal(linkEnd.getTime(), start + 24 * 3600 * 1000);
    const reads = async () => {
      const self = await login(t, user);
      const adminToken = await login(t, admin.user);
      const listed = assertStatus(await call(t, 'GET', `/v1/users?q=${encodeURIComponent(user.email)}`, adminToken), 200).data.find((u: { id: string }) => u.id === user.id);
      return [
        assertStatus(await call(t, 'GET', '/v1/users/me', self), 200).pending_email,
        assertStatus(await call(t, 'GET', `/v1/users/${user.id}`, adminToken), 200).pending_email,
        listed.pending_email,
      ];
    };
    t.clock.now = () => new Date(linkEnd.getTime() - 1);
    assert.deepEqual(await reads(), [newEmail, newEmail, newEmail]);
    t.clock.now = () => new Date(linkEnd.getTime());
    assert.deepEqual(await reads(), [null, null, null]);
    assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: link }), 400, 'invalid_token');
    assert.equal((await userRow(t, user.id))!.pending_email, newEmail, 'the job has not run: only the read hides it');
  } finally {
    t.clock.now = realNow;
  }
});

test('a self-service PATCH back to the current email withdraws the pending change: pending_email null, the mailed link stops working', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('withdrawn');
  assertStatus(await patch('me', { email: newEmail }, token), 200);
  const link = await latestToken(t, newEmail, 'email_change_verification');
  const back = assertStatus(await patch('me', { email: user.email.toUpperCase() }, token), 200);
  assert.equal(back.pending_email, null);
  assert.equal(back.email, user.email);
  assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: link }), 400, 'invalid_token');
  assert.equal((await userRow(t, user.id))!.email, user.email);
});

/** The read of the user a PATCH /v1/users/{id} starts with, before its transaction. */
const USER_READ = 'FROM users u WHERE u.id = $1';

test('self email change: "a notice goes to the old address" — the address the account has when the change is asked, also when an admin set it while the request was under way; a user suspended meanwhile asks no change (401, no pending_email, no link, no mail)', async () => {
  const { user, token } = await userToken(t);
  const adminSet = uniqueEmail('adminset');
  const wanted = uniqueEmail('wanted');
  const res = await pausedAfter(t, USER_READ, async () => {
    assertStatus(await patch(user.id, { email: adminSet }), 200);
  }, () => patch('me', { email: wanted }, token), 'live');
  const body = assertStatus(res, 200);
  assert.equal(body.email, adminSet);
  assert.equal(body.pending_email, wanted);
  assert.deepEqual((await mailsTo(t, adminSet)).map((m) => m.template).sort(), ['email_change_notice', 'email_verification']);
  assert.deepEqual((await mailsTo(t, user.email)).map((m) => m.template), [], 'the replaced address is told nothing');

  const other = await userToken(t);
  const later = uniqueEmail('later');
  const refused = await pausedAfter(t, USER_READ, async () => {
    assertStatus(await call(t, 'POST', `/v1/users/${other.user.id}/suspend`, admin.token), 200);
  }, () => patch('me', { email: later }, other.token), 'live');
  assertError(refused, 401, 'unauthenticated');
  assert.equal((await userRow(t, other.user.id))!.pending_email, null);
  assert.deepEqual(await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'email_change'`, [other.user.id]), []);
  assert.deepEqual(await mailsTo(t, later), []);
  assert.deepEqual(await mailsTo(t, other.user.email), []);
});

test('admin email change colliding with an active user gets 409 email_taken; with an invited one, details.reason invitation_pending', async () => {
  const user = await createUser(t);
  const active = await createUser(t);
  const invited = await createUser(t, { status: 'invited' });
  assertError(await patch(user.id, { email: active.email }), 409, 'email_taken');
  const error = assertError(await patch(user.id, { email: invited.email }), 409, 'email_taken');
  assert.equal(error.details.reason, 'invitation_pending');
  assert.equal((await userRow(t, user.id))!.email, user.email);
});

test('the 3-per-email-per-hour limit counts an address case-insensitively: change requests to TARGET@…, Target@… and target@… share it, the 4th gets 429 rate_limited and sends nothing', async () => {
  const target = uniqueEmail('casey');
  const spellings = [target.toUpperCase(), `${target[0].toUpperCase()}${target.slice(1)}`, target];
  // Four users each ask once (the notice to each one's own address stays far below its limit).
  for (const spelling of spellings) {
    const { token } = await userToken(t);
    assert.equal(assertStatus(await patch('me', { email: spelling }, token), 200).pending_email, spelling);
  }
  const { user, token } = await userToken(t);
  assertError(await patch('me', { email: `${target.slice(0, 2).toUpperCase()}${target.slice(2)}` }, token), 429, 'rate_limited');
  assert.equal((await userRow(t, user.id))!.pending_email, null);
  const sent = await sql<{ n: number }>(t, `SELECT count(*)::int AS n FROM emails WHERE lower(to_address) = lower($1) AND template = 'email_change_verification'`, [target]);
  assert.equal(sent[0].n, 3);
});

test('Part A Errors, email_taken: "user … update collides with an active, suspended or invited user": an admin email change onto a suspended user\'s address gets 409 email_taken without details.reason; nothing changes', async () => {
  const user = await createUser(t);
  const suspended = await createUser(t, { status: 'suspended' });
  const before = await writes();
  assert.deepEqual(assertError(await patch(user.id, { email: suspended.email }), 409, 'email_taken').details, {});
  const row = (await userRow(t, user.id))!;
  assert.equal(row.email, user.email);
  assert.equal(row.email_verified, true);
  assert.deepEqual(await writes(), before);
});

test('Part A Errors, email_taken: a self email change onto an invited user\'s address gets 409 email_taken with details.reason invitation_pending, onto a suspended user\'s 409 without a reason; no pending_email, nothing sent', async () => {
  const { user, token } = await userToken(t);
  const invited = await createUser(t, { status: 'invited' });
  const suspended = await createUser(t, { status: 'suspended' });
  const before = await writes();
  assert.deepEqual(assertError(await patch('me', { email: invited.email }, token), 409, 'email_taken').details, { reason: 'invitation_pending' });
  assert.deepEqual(assertError(await patch('me', { email: suspended.email }, token), 409, 'email_taken').details, {});
  assert.equal((await userRow(t, user.id))!.pending_email, null);
  assert.deepEqual(await writes(), before);
});

test('Part A Errors, email_taken: a self email change collides at confirmation too — the new address taken by an invited user after the request makes POST /v1/auth/email/verify 409 email_taken with details.reason invitation_pending; the email stays, the change stays pending, no user.email_changed', async () => {
  const { user, token } = await userToken(t);
  const wanted = uniqueEmail('takenlater');
  assertStatus(await patch('me', { email: wanted }, token), 200);
  const link = await latestToken(t, wanted, 'email_change_verification');
  // An API key: the admin's access token has expired by now (earlier tests move the clock hours on).
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  const invited = assertStatus(await create({ email: wanted }, key.secret), 201);
  const error = assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: link }), 409, 'email_taken');
  assert.deepEqual(error.details, { reason: 'invitation_pending' });
  const row = await userRow(t, user.id);
  assert.equal(row!.email, user.email);
  assert.equal(row!.pending_email, wanted);
  assert.equal((await userRow(t, invited.id))!.email, wanted);
  assert.deepEqual(await auditFor(t, user.id, 'user.email_changed'), []);
  assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 200);
});

test('a self-service PATCH sending the current email (in any case) with no change pending is no change (docs/decisions.md: a PATCH that changes nothing writes nothing): 200, updated_at kept, no link, no mail', async () => {
  const { user, token } = await userToken(t);
  const before = assertStatus(await call(t, 'GET', '/v1/users/me', token), 200);
  t.clock.advance(5);
  const body = assertStatus(await patch('me', { email: user.email.toUpperCase() }, token), 200);
  assert.equal(body.email, user.email);
  assert.equal(body.pending_email, null);
  assert.equal(body.updated_at, before.updated_at, 'updated_at kept');
  assert.equal((await userRow(t, user.id))!.updated_at.toISOString(), before.updated_at);
  assert.deepEqual(await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'email_change'`, [user.id]), []);
  assert.deepEqual(await mailsTo(t, user.email), []);
});

test('the email-change-expiry job goes by the change link only: a password reset link still live when the 24-hour change link expires does not keep pending_email', async () => {
  const { user, token } = await userToken(t);
  const newEmail = uniqueEmail('lapsed-reset');
  await withStoppedClock(t, async () => {
    assertStatus(await patch('me', { email: newEmail }, token), 200);
    t.clock.advance(24 * 3600 - 60);
    assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
    t.clock.advance(60);
    const live = await sql<{ n: number }>(t, `SELECT count(*)::int AS n FROM one_time_tokens WHERE user_id = $1 AND kind = 'password_reset' AND used_at IS NULL AND expires_at > $2`, [user.id, t.clock.now()]);
    assert.equal(live[0].n, 1, 'precondition: a live reset link');
    await t.deps.jobs.runNow('email-change-expiry');
    assert.equal((await userRow(t, user.id))!.pending_email, null, 'cleared at the instant the change link expires');
  });
});

test('an admin email change ends a pending self-service change: its link dies and the stored pending_email is cleared with it (users row)', async () => {
  admin.token = await login(t, admin.user);
  const { user, token } = await userToken(t);
  const pending = uniqueEmail('pending-admin');
  assertStatus(await patch('me', { email: pending }, token), 200);
  assert.equal((await userRow(t, user.id))!.pending_email, pending, 'precondition: a pending change');
  const link = await latestToken(t, pending, 'email_change_verification');
  const moved = uniqueEmail('admin-set');
  assert.equal(assertStatus(await patch(user.id, { email: moved }), 200).pending_email, null);
  assert.equal((await userRow(t, user.id))!.pending_email, null);
  assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: link }), 400, 'invalid_token');
});
