// Part A, Users: invitation re-send and its limit (3 per email per rolling hour), and when an invitation
// ends, with their races on PostgreSQL. Admin create is in admin-create.test.ts; email changes in
// email-changes.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { assertError, assertStatus, call, latestToken, linkToken, mailsTo, NEW_PASSWORD, sql, userCalls } from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { create, resend, patch, writes } = userCalls(() => ({ t, admin }));

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
