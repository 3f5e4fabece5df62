// Part A, Users: admin create (invited or active), its body and rights, and email_taken when a create
// collides, with its races on PostgreSQL. Invitation re-sends are in invitations.test.ts; email changes
// in email-changes.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { withTransactionStatements } from '../helpers/locks.js';
import { createApiKey, createUser, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import {
  assertError, assertFields, assertStatus, auditFor, call, latestToken, mailsTo, NEW_PASSWORD, sql, userCalls, userRow, type InjectResponse,
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

const { create, patch, writes } = userCalls(() => ({ t, admin }));

const userCount = async (email: string) => (await sql<{ n: number }>(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) = lower($1)', [email]))[0].n;

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

test('Part A Errors, email_taken: "user create … collides with an active, suspended or invited user": POST /v1/users onto a suspended user\'s address gets 409 email_taken without details.reason, and writes nothing', async () => {
  const suspended = await createUser(t, { status: 'suspended' });
  const before = await writes();
  const error = assertError(await create({ email: suspended.email.toUpperCase() }), 409, 'email_taken');
  assert.deepEqual(error.details, {}, 'details.reason invitation_pending is only for an invited holder');
  assert.equal(await userCount(suspended.email), 1);
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
