// Part A, Users: admin create (invited or active), invitation re-send and its limit, and email
// changes (self-service pending until verified; admin immediate).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting, withTransactionStatements } from '../helpers/locks.js';
import { createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import {
  assertError, assertFields, assertStatus, auditFor, call, latestToken, linkToken, mailsTo, NEW_PASSWORD, sql, userRow, type InjectResponse,
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

const create = (payload: object, token = admin.token) => call(t, 'POST', '/v1/users', token, payload);
const resend = (id: string, token = admin.token) => call(t, 'POST', `/v1/users/${id}/invitation`, token);
const patch = (id: string, payload: object, token = admin.token) => call(t, 'PATCH', `/v1/users/${id}`, token, payload);
const userCount = async (email: string) => (await sql<{ n: number }>(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) = lower($1)', [email]))[0].n;

/**
 * Moves the clock to `secondsInto` seconds after the start of the next window of `windowSeconds`
 * (so a fixed-window counter cannot roll over mid-test), then signs the admin in again.
 */
async function alignToWindow(windowSeconds: number, secondsInto: number): Promise<void> {
  const windowMs = windowSeconds * 1000;
  const ms = t.clock.now().getTime() % windowMs;
  t.clock.advance((windowMs - ms + secondsInto * 1000) / 1000);
  admin.token = await login(t, admin.user);
}

test('POST /v1/users (users.manage) creates an invited user by default with an invitation email; accepting it activates the account', async () => {
  const email = uniqueEmail('invitee');
  const body = assertStatus(await create({ email, display_name: 'Ines Invitee' }), 201);
  assert.match(body.id, /^usr_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.equal(body.email, email);
  assert.equal(body.status, 'invited');
  assert.equal(body.email_verified, false);
  assert.equal(body.test_mode, false);
  assert.equal(body.pending_email, null);
  const mails = await mailsTo(t, email);
  assert.deepEqual(mails.map((m) => m.template), ['invitation']);
  const audit = await auditFor(t, body.id, 'user.created');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_type, 'user');
  assert.equal(audit[0].actor_id, admin.user.id);
  // Default Profile, Settings and the member Role come with the User.
  assert.equal((await sql(t, 'SELECT display_name FROM profiles WHERE user_id = $1', [body.id]))[0].display_name, 'Ines Invitee');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM settings WHERE user_id = $1', [body.id]))[0].n, 1);
  assert.deepEqual((await sql(t, 'SELECT role_id FROM role_assignments WHERE user_id = $1', [body.id])).map((r) => r.role_id), ['role_platform_member']);
  // No password yet: sign-in fails until the invitation is accepted.
  assertError(await call(t, 'POST', '/v1/auth/login', null, { email, password: NEW_PASSWORD }), 401, 'invalid_credentials');
  const accepted = await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: await latestToken(t, email, 'invitation'), password: NEW_PASSWORD });
  assert.equal(assertStatus(accepted, 200).user_id, body.id);
  assert.equal((await userRow(t, body.id))!.status, 'active');
});

test('invitations/accept through the mailed link counts the address as verified, as a reset through the mailed link does (docs/decisions.md "Payloads not shown"): the AuthSession, its access token, GET /v1/users/me and the next sign-in all say email_verified true', async () => {
  const email = uniqueEmail('verified-invitee');
  const body = assertStatus(await create({ email }), 201);
  assert.equal(body.email_verified, false);
  const accepted = assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: await latestToken(t, email, 'invitation'), password: NEW_PASSWORD }), 200);
  assert.equal(accepted.email_verified, true);
  const claims = JSON.parse(Buffer.from(accepted.access_token.split('.')[1], 'base64url').toString());
  assert.equal(claims.email_verified, true);
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me', accepted.access_token), 200).email_verified, true);
  assert.equal((await userRow(t, body.id))!.email_verified, true);
  const next = assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email, password: NEW_PASSWORD }), 200);
  assert.equal(next.email_verified, true);
  assert.equal(JSON.parse(Buffer.from(next.access_token.split('.')[1], 'base64url').toString()).email_verified, true);
});

test('POST /v1/users with send_invitation false creates an invited user and sends no mail', async () => {
  const email = uniqueEmail('quiet');
  const body = assertStatus(await create({ email, send_invitation: false }), 201);
  assert.equal(body.status, 'invited');
  assert.deepEqual(await mailsTo(t, email), []);
});

test('POST /v1/users with status active creates an active user with no password, who signs in after password/forgot and reset', async () => {
  const email = uniqueEmail('direct');
  const body = assertStatus(await create({ email, status: 'active' }), 201);
  assert.equal(body.status, 'active');
  assert.deepEqual(await mailsTo(t, email, 'invitation'), [], 'no invitation for an active user');
  const identities = await sql(t, 'SELECT password_hash FROM identities WHERE user_id = $1', [body.id]);
  assert.ok(identities.every((i) => i.password_hash === null), 'no password');
  assertError(await call(t, 'POST', '/v1/auth/login', null, { email, password: NEW_PASSWORD }), 401, 'invalid_credentials');
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email })).statusCode, 202);
  const token = await latestToken(t, email, 'password_reset');
  assert.equal((await call(t, 'POST', '/v1/auth/password/reset', null, { token, password: NEW_PASSWORD })).statusCode, 204);
  const session = assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email, password: NEW_PASSWORD }), 200);
  assert.equal(session.user_id, body.id);
});

test('admins can never set a password: POST /v1/users with a password field gets 422 validation_failed naming password, and no user is created', async () => {
  const email = uniqueEmail('pw');
  assertFields(await create({ email, password: NEW_PASSWORD }), ['password']);
  assertFields(await create({ email, status: 'active', password: NEW_PASSWORD }), ['password']);
  assert.equal(await userCount(email), 0);
  assert.deepEqual(await mailsTo(t, email), []);
});

test('POST /v1/users validates its body: malformed email and unknown status get 422 validation_failed naming the field', async () => {
  assertFields(await create({ email: 'not-an-email' }), ['email']);
  assertFields(await create({ email: uniqueEmail(), status: 'suspended' }), ['status']);
  assertFields(await create({}), ['email']);
});

test('POST /v1/users colliding with an active user gets 409 email_taken; with an invited one, details.reason invitation_pending', async () => {
  const active = await createUser(t);
  assertError(await create({ email: active.email.toUpperCase() }), 409, 'email_taken');
  const invitedEmail = uniqueEmail('pending');
  assertStatus(await create({ email: invitedEmail, send_invitation: false }), 201);
  const error = assertError(await create({ email: invitedEmail }), 409, 'email_taken');
  assert.equal(error.details.reason, 'invitation_pending');
  assert.equal(await userCount(invitedEmail), 1);
});

test('Part A Errors, email_taken: concurrent POST /v1/users of one address (any letter case) create one invited user; every other answer is 409 email_taken with details.reason invitation_pending', async () => {
  const email = uniqueEmail('concurrent');
  const variants = [email, email.toUpperCase(), email.replace(/^c/, 'C'), email];
  const rs = await Promise.all(variants.map((e) => create({ email: e, send_invitation: false })));
  assert.equal(rs.filter((r) => r.statusCode === 201).length, 1, rs.map((r) => r.statusCode).join(','));
  for (const r of rs) if (r.statusCode !== 201) assert.deepEqual(assertError(r, 409, 'email_taken').details, { reason: 'invitation_pending' });
  assert.equal(await userCount(email), 1);
  const winner = rs.find((r) => r.statusCode === 201)!.json();
  assert.equal(winner.status, 'invited');
  assert.equal((await auditFor(t, winner.id, 'user.created')).length, 1);
});

/** The existence check of an address (findLiveUserByEmail), inside the request's transaction. */
const EMAIL_CHECK = "u.email_lower = lower($1) AND u.status <> 'deleted'";

/**
 * `first` paused right after its existence check of an address, its transaction open, while `second`
 * runs to its end: both past their check before either inserts. `second` is started from a promise made
 * here, not from inside the paused transaction. PostgreSQL only (the embedded database runs one at a time).
 */
async function bothPastTheCheck(first: () => Promise<InjectResponse>, second: () => Promise<InjectResponse>): Promise<[InjectResponse, InjectResponse]> {
  let go!: () => void;
  const released = new Promise<void>((resolve) => { go = resolve; });
  const other = released.then(second);
  let paused = false;
  const res = await withTransactionStatements(t, async (run, text) => {
    const result = await run();
    if (!paused && text.includes(EMAIL_CHECK)) {
      paused = true;
      go();
      await other;
    }
    return result;
  }, first);
  assert.ok(paused, 'the first request checked the address in its transaction');
  return [res, await other];
}

if (storageName === 'postgres') test('Part A Errors, email_taken: two POST /v1/users of one address both past their existence check before either inserts (PostgreSQL): the one that inserts first is 201 (invited), the other 409 email_taken with details.reason invitation_pending, never a 500; one user', async () => {
  const email = uniqueEmail('pastcheck');
  const [late, early] = await bothPastTheCheck(() => create({ email, send_invitation: false }), () => create({ email: email.toUpperCase(), send_invitation: false }));
  assert.equal(assertStatus(early, 201).status, 'invited');
  assert.deepEqual(assertError(late, 409, 'email_taken').details, { reason: 'invitation_pending' });
  assert.equal(await userCount(email), 1);
});

if (storageName === 'postgres') test('Part A Errors, email_taken ("user create or update collides with … an invited user; details.reason invitation_pending"): an admin email change and a POST /v1/users of that address, both past their existence check before either writes (PostgreSQL): the create is 201 (invited), the change 409 email_taken with details.reason invitation_pending and the email unchanged', async () => {
  const user = await createUser(t);
  const email = uniqueEmail('changerace');
  const [change, created] = await bothPastTheCheck(() => patch(user.id, { email }), () => create({ email, send_invitation: false }));
  assert.equal(assertStatus(created, 201).status, 'invited');
  assert.deepEqual(assertError(change, 409, 'email_taken').details, { reason: 'invitation_pending' });
  assert.equal((await userRow(t, user.id))!.email, user.email);
});

if (storageName === 'postgres') test('Part A Errors, email_taken ("user create or update collides with … an invited user; details.reason invitation_pending"): a self-service email change confirmed (POST /v1/auth/email/verify) while a POST /v1/users creates that address, both past their existence check before either writes (PostgreSQL): the create is 201 (invited), the confirmation 409 email_taken with details.reason invitation_pending; the email stays, the change stays pending, no user.email_changed', async () => {
  const { user, token } = await userToken(t);
  const wanted = uniqueEmail('confirmrace');
  assertStatus(await patch('me', { email: wanted }, token), 200);
  const link = await latestToken(t, wanted, 'email_change_verification');
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  const [confirm, created] = await bothPastTheCheck(
    () => call(t, 'POST', '/v1/auth/email/verify', null, { token: link }),
    () => create({ email: wanted.toUpperCase(), send_invitation: false }, key.secret),
  );
  assert.equal(assertStatus(created, 201).status, 'invited');
  assert.deepEqual(assertError(confirm, 409, 'email_taken').details, { reason: 'invitation_pending' });
  const row = (await userRow(t, user.id))!;
  assert.equal(row.email, user.email);
  assert.equal(row.pending_email, wanted);
  assert.deepEqual(await auditFor(t, user.id, 'user.email_changed'), []);
});

if (storageName === 'postgres') test('Part A Errors, email_taken ("user create or update collides with … an invited user; details.reason invitation_pending"): a restore (PATCH status active, with a new email and without) while a POST /v1/users creates the address it restores to, both past their existence check before either writes (PostgreSQL): the create is 201 (invited), the restore 409 email_taken with details.reason invitation_pending; the user stays deleted with its email', async () => {
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  for (const withEmail of [true, false]) {
    const user = await createUser(t);
    assertStatus(await call(t, 'DELETE', `/v1/users/${user.id}`, key.secret), 204);
    const address = withEmail ? uniqueEmail('restorerace') : user.email;
    const [restore, created] = await bothPastTheCheck(
      () => patch(user.id, withEmail ? { status: 'active', email: address } : { status: 'active' }, key.secret),
      () => create({ email: address.toUpperCase(), send_invitation: false }, key.secret),
    );
    assert.equal(assertStatus(created, 201).status, 'invited', `with email ${withEmail}`);
    assert.deepEqual(assertError(restore, 409, 'email_taken').details, { reason: 'invitation_pending' }, `with email ${withEmail}`);
    const row = (await userRow(t, user.id))!;
    assert.deepEqual([row.status, row.email], ['deleted', user.email], `with email ${withEmail}`);
  }
});

test('POST /v1/users needs users.manage: a users.list holder gets 403 forbidden and nothing is created', async () => {
  const email = uniqueEmail('nope');
  assertError(await create({ email }, support.token), 403, 'forbidden');
  assert.equal(await userCount(email), 0);
});

test('POST /v1/users/{id}/invitation (users.manage): 202, a new invitation token and mail; the previous token stops working', async () => {
  await alignToWindow(3600, 60);
  const email = uniqueEmail('again');
  const user = assertStatus(await create({ email }), 201);
  const first = await latestToken(t, email, 'invitation');
  const res = await resend(user.id);
  assert.equal(res.statusCode, 202, res.body);
  const mails = await mailsTo(t, email, 'invitation');
  assert.equal(mails.length, 2);
  const second = await latestToken(t, email, 'invitation');
  assert.notEqual(second, first);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: first, password: NEW_PASSWORD }), 400, 'invalid_token');
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: second, password: NEW_PASSWORD }), 200);
});

test('Idempotency-Key: "A retry with the same key returns the original result" on POST /v1/users/{id}/invitation: an API key retrying a re-send after a lost answer gets the first 202 replayed, one mail is sent, its link stays the live one and the hourly limit counts one re-send', async () => {
  await alignToWindow(3600, 60);
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  const email = uniqueEmail('retried');
  const user = assertStatus(await create({ email }), 201);
  const headers = { 'idempotency-key': `resend-${user.id}` };
  const first = await call(t, 'POST', `/v1/users/${user.id}/invitation`, key.secret, undefined, headers);
  assert.equal(first.statusCode, 202, first.body);
  const link = await latestToken(t, email, 'invitation');
  const retry = await call(t, 'POST', `/v1/users/${user.id}/invitation`, key.secret, undefined, headers);
  assert.equal(retry.statusCode, 202);
  assert.equal(retry.headers['idempotent-replayed'], 'true');
  assert.equal(retry.body, first.body);
  assert.equal((await mailsTo(t, email, 'invitation')).length, 2, 'the first invitation and one re-send');
  assert.equal(await latestToken(t, email, 'invitation'), link, 'no second link replaced the first');
  // The limit counted one re-send: two more go out, the fourth is 429.
  for (let i = 0; i < 2; i++) assert.equal((await resend(user.id)).statusCode, 202);
  assertError(await resend(user.id), 429, 'rate_limited');
  const last = await latestToken(t, email, 'invitation');
  assert.notEqual(last, link);
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: last, password: NEW_PASSWORD }), 200);
});

test('POST /v1/users/{id}/invitation for a user who is not invited gets 409 invalid_status_transition and sends nothing', async () => {
  const active = await createUser(t);
  const suspended = await createUser(t, { status: 'suspended' });
  for (const u of [active, suspended]) {
    assertError(await resend(u.id), 409, 'invalid_status_transition');
    assert.deepEqual(await mailsTo(t, u.email, 'invitation'), []);
  }
});

test('invalid_status_transition on an invitation re-send has the details of every status change: {from: the user\'s status, to: invited}', async () => {
  const active = await createUser(t);
  const suspended = await createUser(t, { status: 'suspended' });
  for (const [u, from] of [[active, 'active'], [suspended, 'suspended']] as const) {
    const err = assertError(await resend(u.id), 409, 'invalid_status_transition');
    assert.deepEqual(err.details, { from, to: 'invited' });
  }
  // The same shape as a status PATCH refused by the transition table.
  const patch = assertError(await call(t, 'PATCH', `/v1/users/${suspended.id}`, admin.token, { status: 'invited' }), 409, 'invalid_status_transition');
  assert.deepEqual(Object.keys(patch.details).sort(), ['from', 'to']);
});

test('POST /v1/users/{id}/invitation beyond 3 re-sends per email per hour gets 429 rate_limited and sends nothing; the next hour it works again', async () => {
  await alignToWindow(3600, 60);
  const email = uniqueEmail('limit');
  const user = assertStatus(await create({ email }), 201); // the invitation, no re-send
  for (let i = 0; i < 3; i++) assert.equal((await resend(user.id)).statusCode, 202); // re-sends 1-3
  const res = await resend(user.id);
  assertError(res, 429, 'rate_limited');
  assert.equal(res.headers['retry-after'], '3600', 'the re-sends were all just now');
  assert.equal((await mailsTo(t, email, 'invitation')).length, 4);
  t.clock.advance(3600);
  admin.token = await login(t, admin.user);
  assert.equal((await resend(user.id)).statusCode, 202);
  assert.equal((await mailsTo(t, email, 'invitation')).length, 5);
});

test('the invitation re-send limit is 3 per email within any hour: 3 re-sends at 00:55 and another at 01:05 gets 429 rate_limited', async () => {
  await alignToWindow(3600, 55 * 60);
  const token = admin.token;
  const email = uniqueEmail('window');
  const user = assertStatus(await create({ email }, token), 201);
  for (let i = 0; i < 3; i++) assert.equal((await resend(user.id, token)).statusCode, 202);
  t.clock.advance(10 * 60);
  admin.token = await login(t, admin.user);
  assertError(await resend(user.id), 429, 'rate_limited');
  assert.equal((await mailsTo(t, email, 'invitation')).length, 4, 'a 4th re-send within one hour');
});

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

/** Counts of users, audit rows, outbox rows and mails, to show a refused call wrote nothing. */
async function writes() {
  const count = async (table: string) => (await sql<{ n: number }>(t, `SELECT count(*)::int AS n FROM ${table}`))[0].n;
  return { users: await count('users'), audit: await count('audit_events'), outbox: await count('outbox_events'), mails: await count('emails') };
}

test('Part A Errors, email_taken: "user create … collides with an active, suspended or invited user": POST /v1/users onto a suspended user\'s address gets 409 email_taken without details.reason, and writes nothing', async () => {
  const suspended = await createUser(t, { status: 'suspended' });
  const before = await writes();
  const error = assertError(await create({ email: suspended.email.toUpperCase() }), 409, 'email_taken');
  assert.deepEqual(error.details, {}, 'details.reason invitation_pending is only for an invited holder');
  assert.equal(await userCount(suspended.email), 1);
  assert.deepEqual(await writes(), before);
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

test('Part A Errors, email_taken is "in the same mode": a test key creates a user at an address a live user holds (201, test_mode true); a second one in test mode collides (409 email_taken)', async () => {
  const live = await createUser(t);
  const key = await createApiKey(t, { mode: 'test', permissions: ['users.list', 'users.manage'] });
  const created = assertStatus(await call(t, 'POST', '/v1/users', key.secret, { email: live.email }), 201);
  assert.equal(created.test_mode, true);
  assert.notEqual(created.id, live.id);
  const before = await writes();
  assertError(await call(t, 'POST', '/v1/users', key.secret, { email: live.email }), 409, 'email_taken');
  assert.deepEqual(await writes(), before);
});

test('Part A Errors, invalid_status_transition: "invitation re-send for a non-invited user" holds for a deleted user too (409, nothing sent or written)', async () => {
  const invited = await createUser(t, { status: 'invited' });
  assertStatus(await call(t, 'DELETE', `/v1/users/${invited.id}`, admin.token), 204);
  const before = await writes();
  assertError(await resend(invited.id), 409, 'invalid_status_transition');
  assert.deepEqual(await writes(), before);
});

/** Runs the mail relay until it has nothing left, then the status and error of each invitation mail to `email`, oldest first. */
async function deliveredInvitations(email: string): Promise<{ status: string; last_error: string | null }[]> {
  while ((await t.deps.jobs.runNow('mail-delivery')).sent);
  return sql(t, `SELECT status, last_error FROM emails WHERE lower(to_address) = lower($1) AND template IN ('invitation', 'organization_invitation') ORDER BY created_at, id`, [email]);
}

test('an invitation ends when the invited user stops being invited (deleted, set active by an admin, or accepted through another link): its link is dead and its unsent mail is not delivered (docs/decisions.md: a mail with a link is sent only while its link works)', async () => {
  // Deleted: the platform's way to withdraw an invitation.
  const deletedEmail = uniqueEmail('withdrawn-invitee');
  const deleted = assertStatus(await create({ email: deletedEmail }), 201);
  const deletedLink = await latestToken(t, deletedEmail, 'invitation');
  assertStatus(await call(t, 'DELETE', `/v1/users/${deleted.id}`, admin.token), 204);
  // Set active by an admin: "No password"; the user signs in through password/forgot.
  const activatedEmail = uniqueEmail('activated-invitee');
  const activated = assertStatus(await create({ email: activatedEmail }), 201);
  const activatedLink = await latestToken(t, activatedEmail, 'invitation');
  assertStatus(await patch(activated.id, { status: 'active' }), 200);
  // Accepted through an Organization's invitation: the account invitation mailed before is spent too.
  const acceptedEmail = uniqueEmail('accepted-invitee');
  assertStatus(await create({ email: acceptedEmail }), 201);
  const accountLink = await latestToken(t, acceptedEmail, 'invitation');
  const owner = await userToken(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: 'Invite Ends' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, owner.token, { email: acceptedEmail }), 201);
  const orgLink = await latestToken(t, acceptedEmail, 'organization_invitation');
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: orgLink, password: NEW_PASSWORD }), 200);

  for (const link of [deletedLink, activatedLink, accountLink]) {
    assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: link, password: NEW_PASSWORD }), 400, 'invalid_token');
  }
  for (const email of [deletedEmail, activatedEmail]) {
    const [mail] = await deliveredInvitations(email);
    assert.equal(mail.status, 'failed', `the invitation to ${email} was delivered after the invitation ended`);
    assert.match(mail.last_error!, /link was used, replaced or expired/);
  }
  const [accountMail, orgMail] = await deliveredInvitations(acceptedEmail);
  assert.equal(accountMail.status, 'failed', 'the account invitation was delivered after another link was accepted');
  assert.equal(orgMail.status, 'failed', 'its link was used');
});

/**
 * What an admin email change of an invited user commits (docs/decisions.md, "Links die with their
 * address"), taken by a transaction of the test together with the re-send limit's lock of the old
 * address, so a re-send that read the user before waits for one of them either way.
 */
const emailChangedMeanwhile = (userId: string, oldEmail: string, newEmail: string): [string, unknown[]][] => [
  ['SELECT pg_advisory_xact_lock(hashtext($1))', [`mail:resend:live:${oldEmail.toLowerCase()}`]],
  ['UPDATE users SET email = $2 WHERE id = $1', [userId, newEmail]],
  [`UPDATE one_time_tokens SET used_at = now() WHERE user_id = $1 AND used_at IS NULL`, [userId]],
];

if (storageName === 'postgres') test('an invitation re-send decides on the user as they are when it sends (PostgreSQL): an admin email change committed while POST /v1/users/{id}/invitation waits sends the new invitation to the new address, never a live link to the old one', async () => {
  const [oldEmail, newEmail] = [uniqueEmail('resend-old'), uniqueEmail('resend-new')];
  const user = assertStatus(await create({ email: oldEmail }), 201);
  const res = await commitWhileWaiting(t, emailChangedMeanwhile(user.id, oldEmail, newEmail), () => resend(user.id));
  assert.equal(res.statusCode, 202, res.body);
  for (const mail of await mailsTo(t, oldEmail, 'invitation')) {
    assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: linkToken(mail), password: NEW_PASSWORD }), 400, 'invalid_token');
  }
  assert.equal((await mailsTo(t, oldEmail, 'invitation')).length, 1, 'only the first invitation, sent before the change');
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: await latestToken(t, newEmail, 'invitation'), password: NEW_PASSWORD }), 200);
});

if (storageName === 'postgres') test('the unauthenticated invitation re-sends (signup with the address, email/verify/resend, password/forgot) mail nothing to an address the invited user left while they waited (PostgreSQL): Part A Rule 3\'s 409 email_taken still answers the signup, the others 202', async () => {
  const sends = [
    ['signup', (email: string) => call(t, 'POST', '/v1/auth/signup', null, { email, password: NEW_PASSWORD }), 409],
    ['resend', (email: string) => call(t, 'POST', '/v1/auth/email/verify/resend', null, { email }), 202],
    ['forgot', (email: string) => call(t, 'POST', '/v1/auth/password/forgot', null, { email }), 202],
  ] as const;
  for (const [label, send, status] of sends) {
    const [oldEmail, newEmail] = [uniqueEmail(`${label}-old`), uniqueEmail(`${label}-new`)];
    const user = assertStatus(await create({ email: oldEmail }), 201);
    const res = await commitWhileWaiting(t, emailChangedMeanwhile(user.id, oldEmail, newEmail), () => send(oldEmail));
    assert.equal(res.statusCode, status, `${label}: ${res.body}`);
    if (status === 409) assert.equal(res.json().error.details.reason, 'invitation_pending');
    assert.equal((await mailsTo(t, oldEmail)).length, 1, `${label}: only the first invitation, sent before the change`);
    assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [user.id]))[0].status, 'invited');
  }
});

/** An invited user whose invitation was re-sent 3 times, now (the hour's quota spent at this instant). */
async function resentThreeTimes(prefix: string) {
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  const user = assertStatus(await create({ email: uniqueEmail(prefix) }, key.secret), 201);
  for (let i = 0; i < 3; i++) assert.equal((await resend(user.id, key.secret)).statusCode, 202);
  return { key, user };
}

test('"3 per email per hour" is a rolling hour to the second (docs/decisions.md "Invitation re-send": Retry-After "until the oldest of the three leaves the hour"): 3 re-sends at one instant, a 4th 3,599 s later is 429 rate_limited with Retry-After 1 and mails nothing; at exactly 3,600 s it is 202 with its mail', async () => {
  await withStoppedClock(t, async () => {
    const { key, user } = await resentThreeTimes('edge');
    t.clock.advance(3599);
    const refused = await resend(user.id, key.secret);
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], '1');
    assert.equal((await mailsTo(t, user.email, 'invitation')).length, 1 + 3);
    t.clock.advance(1);
    assert.equal((await resend(user.id, key.secret)).statusCode, 202);
    assert.equal((await mailsTo(t, user.email, 'invitation')).length, 1 + 4);
  });
});

test('the idempotency-prune job deletes only counter rows whose hour is over: run 1 s before the oldest of 3 re-sends leaves the hour, it frees no slot (the 4th re-send is still 429 rate_limited with Retry-After 1)', async () => {
  await withStoppedClock(t, async () => {
    const { key, user } = await resentThreeTimes('prune');
    t.clock.advance(3599);
    await t.deps.jobs.runNow('idempotency-prune');
    const refused = await resend(user.id, key.secret);
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], '1');
    assert.equal((await mailsTo(t, user.email, 'invitation')).length, 1 + 3);
  });
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
