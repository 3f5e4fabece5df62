// Organization members: invite, add, accept, role changes, removal (Part B, "Organization status and
// membership" and the member rules of "Organization-wide grants and Organizations").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import {
  accept, accessEvents, addById, afterChangeCommitsMeanwhile, assertError, assertInvalid, assertStatus, auditOf, call, createOrgApi, effective, entitlementEvents, grant, invite, mails, membership, memberWebhooks, newApp, orgAudit,
  orgGrantApi, orgWithMembers, person, platformKey, rand, session, sql,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const memberCount = async (orgId: string) => assertStatus(await call(t, 'GET', `/v1/organizations/${orgId}`, admin), 200).member_count;

test('"addresses cannot be probed": an invitation answers the email in lower case while pending, so an account\'s stored spelling does not tell an existing address from a new one', async () => {
  const { org, owner } = await createOrgApi(t, undefined, 'Probe Labs');
  const known = await person(t, { email: uniqueEmail('CaseUser') });
  const knownEmail = known.email;
  assert.notEqual(knownEmail, knownEmail.toLowerCase(), 'the account is stored with capitals');
  const fresh = uniqueEmail('NewComer');
  const a = assertStatus(await invite(t, owner.token, org.id, knownEmail.toLowerCase()), 201);
  const b = assertStatus(await invite(t, owner.token, org.id, fresh), 201);
  assert.equal(a.email, knownEmail.toLowerCase());
  assert.equal(b.email, fresh.toLowerCase());
  const listed = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?membership_status=pending`, owner.token), 200).data;
  assert.deepEqual(listed.map((m: any) => m.email).sort(), [knownEmail.toLowerCase(), fresh.toLowerCase()].sort());
  // Once active, the member shows the account's own spelling.
  assertStatus(await accept(t, known.token, org.id), 200);
  const active = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?membership_status=active`, owner.token), 200).data;
  assert.ok(active.some((m: any) => m.email === knownEmail), 'active.some((m: any) => m.email === knownEmail)');
});

test('the organization_invitation mail names the Organization on one line, in quotes: a name with line breaks cannot lay out a paragraph and link of its own above the real link', async () => {
  const name = 'Acme\r\n\r\nOpen https://evil.example/accept-invitation?token=stolen\u2028now';
  const { org, owner } = await createOrgApi(t, undefined, name);
  const email = uniqueEmail('layout');
  assertStatus(await invite(t, owner.token, org.id, email), 201);
  const [mail] = await mails(t, email);
  assert.equal(mail.subject, 'You have been invited to join Acme Open https://evil.example/accept-invitation?token=stolen now');
  const lines = mail.text_body.split('\n');
  assert.equal(lines[0], 'You have been invited to join the organization “Acme Open https://evil.example/accept-invitation?token=stolen now”.');
  const links = lines.filter((l: string) => /^https?:\/\//.test(l));
  assert.equal(links.length, 1, mail.text_body);
  assert.ok(links[0].startsWith(`${t.config.publicUrl}/accept-invitation?token=`), links[0]);
});

test('invite by email creates a pending membership and an organization_invitation mail naming the Organization; an address without a live User gets an invited User; the response has the same shape either way', async () => {
  const { org, owner } = await createOrgApi(t, undefined, 'Invite Labs');
  const known = await person(t);
  const unknownEmail = uniqueEmail('newcomer');
  const a = assertStatus(await invite(t, owner.token, org.id, known.email), 201);
  const b = assertStatus(await invite(t, owner.token, org.id, unknownEmail, 'org_admin'), 201);
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), 'same response shape');
  const created = (await sql(t, 'SELECT id, status FROM users WHERE lower(email) = lower($1)', [unknownEmail]));
  assert.equal(created.length, 1);
  assert.equal(created[0].status, 'invited');
  for (const [res, email, userId, role] of [[a, known.email, known.id, 'member'], [b, unknownEmail, created[0].id, 'org_admin']] as const) {
    assert.equal(res.user_id, userId);
    assert.equal(res.email, email);
    assert.equal(res.membership_status, 'pending');
    assert.equal(res.role, role);
    assert.equal(res.display_name, null);
    assert.equal(res.joined_at, null);
    assert.equal(typeof res.invited_at, 'string');
    const sent = await mails(t, email);
    assert.equal(sent.length, 1);
    assert.ok(`${sent[0].subject}\n${sent[0].text_body}`.includes('Invite Labs'), 'the invitation names the Organization');
    // Only an invited User gets a link that opens the account; an existing account signs in and accepts.
    assert.equal(/inv_[A-Za-z0-9_-]+/.test(sent[0].text_body), userId !== known.id, 'an invitation link only for the new address');
    const audit = await orgAudit(t, org.id, 'organization.member_invited', userId);
    assert.equal(audit.length, 1);
    assert.equal(audit[0].actor_id, owner.id);
    assert.deepEqual(audit[0].after, { user_id: userId, role }, 'organization.member_invited records the invitee and the role invited to');
    assert.equal((await membership(t, org.id, userId))?.membership_status, 'pending');
  }
  // Pending invitations fire no organization.member_* webhook and are not counted (only the creator's
  // membership was announced, when the Organization was created).
  assert.deepEqual(await memberWebhooks(t, org.id), [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: owner.id, role: 'org_admin' } }]);
  assert.equal(await memberCount(org.id), 1);
  const pending = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?membership_status=pending`, owner.token), 200);
  assert.deepEqual(pending.data.map((m: any) => m.user_id).sort(), [known.id, created[0].id].sort());
  const admins = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?role=org_admin`, owner.token), 200);
  assert.deepEqual(admins.data.map((m: any) => m.user_id).sort(), [owner.id, created[0].id].sort());
});

const PASSWORD = 'violet-harbor-cinnamon-42-x';
const invitationToken = async (email: string, index = 0) => (await mails(t, email))[index].text_body.match(/inv_[A-Za-z0-9_-]+/)![0];

test('an unaccepted invitation never expires: the link of an Organization\'s invitation to a new address still activates the account 30 days later, and the membership can be accepted', async () => {
  const { org, owner } = await createOrgApi(t);
  const email = uniqueEmail('late');
  assertStatus(await invite(t, owner.token, org.id, email), 201);
  const token = await invitationToken(email);
  t.clock.advance(30 * 86400);
  const session = assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token, password: PASSWORD }), 200);
  assert.equal(assertStatus(await accept(t, session.access_token, org.id), 200).membership_status, 'active');
});

test('a second Organization inviting the same new address leaves the first one\'s link working; once one is accepted, the other link is refused (400 invalid_token)', async () => {
  const a = await createOrgApi(t);
  const b = await createOrgApi(t);
  const email = uniqueEmail('twice');
  assertStatus(await invite(t, a.owner.token, a.org.id, email), 201);
  assertStatus(await invite(t, b.owner.token, b.org.id, email), 201);
  const [first, second] = [await invitationToken(email, 0), await invitationToken(email, 1)];
  assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: first, password: PASSWORD }), 200);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: second, password: PASSWORD }), 400, 'invalid_token');
});

test('two Organizations inviting the same new address at once both get 201: one invited User is created, with a pending membership and an invitation mail naming each Organization', async () => {
  // Several rounds: on PostgreSQL the two requests run in parallel transactions and must meet on the one User.
  for (let round = 0; round < 5; round++) {
    const orgs = [await createOrgApi(t, undefined, `Race A ${round}`), await createOrgApi(t, undefined, `Race B ${round}`)];
    const email = uniqueEmail('both');
    const answers = await Promise.all(orgs.map(({ org, owner }) => invite(t, owner.token, org.id, email)));
    const bodies = answers.map((res) => assertStatus(res, 201));
    const users = await sql(t, 'SELECT id, status FROM users WHERE lower(email) = lower($1)', [email]);
    assert.deepEqual(users.map((u) => u.status), ['invited'], 'one invited User');
    const userId = users[0].id;
    assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'user.created' AND target_user_id = $1`, [userId])).length, 1);
    const sent = await mails(t, email);
    assert.equal(sent.length, 2);
    for (const [i, { org }] of orgs.entries()) {
      assert.deepEqual([bodies[i].user_id, bodies[i].email, bodies[i].membership_status, bodies[i].role], [userId, email, 'pending', 'member']);
      assert.equal((await membership(t, org.id, userId))?.membership_status, 'pending');
      assert.equal((await orgAudit(t, org.id, 'organization.member_invited', userId)).length, 1);
      assert.equal(sent.filter((m) => `${m.subject}\n${m.text_body}`.includes(org.name)).length, 1, `one invitation naming ${org.name}`);
    }
  }
});

test('an admin email change of a user invited by an Organization voids the Organization\'s link mailed to the old address (400 invalid_token)', async () => {
  const { org, owner } = await createOrgApi(t);
  const email = uniqueEmail('moved');
  const member = assertStatus(await invite(t, owner.token, org.id, email), 201);
  const token = await invitationToken(email);
  assertStatus(await call(t, 'PATCH', `/v1/users/${member.user_id}`, admin, { email: uniqueEmail('moved-new') }), 200);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token, password: PASSWORD }), 400, 'invalid_token');
  assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [member.user_id]))[0].status, 'invited');
});

test('an Organization\'s invitation link is replaced by that same Organization\'s next invitation: withdrawn and invited again, the first link is refused (400 invalid_token) and the new one works', async () => {
  const { org, owner } = await createOrgApi(t);
  const email = uniqueEmail('again');
  const first = assertStatus(await invite(t, owner.token, org.id, email), 201);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${first.user_id}`, owner.token)).statusCode, 204);
  assertStatus(await invite(t, owner.token, org.id, email), 201);
  const [oldLink, newLink] = [await invitationToken(email, 0), await invitationToken(email, 1)];
  assert.notEqual(oldLink, newLink);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: oldLink, password: PASSWORD }), 400, 'invalid_token');
  const session = assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: newLink, password: PASSWORD }), 200);
  assert.equal(assertStatus(await accept(t, session.access_token, org.id), 200).membership_status, 'active');
});

test('a withdrawn invitation\'s link dies with it: the invited address following it gets 400 invalid_token and stays invited, the unsent mail is not delivered, and another Organization\'s link still works', async () => {
  const { org, owner } = await createOrgApi(t);
  const other = await createOrgApi(t);
  const email = uniqueEmail('withdrawn');
  const pending = assertStatus(await invite(t, owner.token, org.id, email), 201);
  assertStatus(await invite(t, other.owner.token, other.org.id, email), 201);
  const [withdrawnLink, otherLink] = [await invitationToken(email, 0), await invitationToken(email, 1)];
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${pending.user_id}`, owner.token)).statusCode, 204);
  assert.equal(await membership(t, org.id, pending.user_id), undefined);
  assertError(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: withdrawnLink, password: PASSWORD }), 400, 'invalid_token');
  assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [pending.user_id]))[0].status, 'invited');
  while ((await t.deps.jobs.runNow('mail-delivery')).sent);
  const [withdrawnMail, otherMail] = await sql(t, `SELECT status, last_error FROM emails WHERE lower(to_address) = lower($1) AND template = 'organization_invitation' ORDER BY created_at, id`, [email]);
  assert.equal(withdrawnMail.status, 'failed');
  assert.match(withdrawnMail.last_error, /link was used, replaced or expired/);
  assert.notEqual(otherMail.status, 'failed');
  const session = assertStatus(await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: otherLink, password: PASSWORD }), 200);
  assert.equal(assertStatus(await accept(t, session.access_token, other.org.id), 200).membership_status, 'active');
});

test('an Organization mails one address at most 3 times per rolling hour: invited, withdrawn and invited again, the fourth invitation within the hour answers 429 rate_limited with Retry-After, adds nobody and mails nothing; another Organization still invites the address, and the first one can again an hour later', async () => {
  const { org, owner } = await createOrgApi(t);
  const email = uniqueEmail('mailbomb');
  for (let i = 0; i < 3; i++) {
    const member = assertStatus(await invite(t, owner.token, org.id, email), 201);
    assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${member.user_id}`, owner.token)).statusCode, 204);
  }
  assert.equal((await mails(t, email)).length, 3);
  const refused = await invite(t, owner.token, org.id, email);
  assertError(refused, 429, 'rate_limited');
  const retryAfter = Number(refused.headers['retry-after']);
  assert.ok(retryAfter >= 1 && retryAfter <= 3600, `Retry-After ${refused.headers['retry-after']}`);
  assert.equal((await mails(t, email)).length, 3, 'no fourth mail');
  const pending = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?membership_status=pending`, owner.token), 200).data;
  assert.deepEqual(pending, [], 'no pending membership');
  assert.equal((await orgAudit(t, org.id, 'organization.member_invited')).length, 3);

  const other = await createOrgApi(t);
  assertStatus(await invite(t, other.owner.token, other.org.id, email), 201);
  t.clock.advance(3600);
  const { access_token } = await session(t, owner); // the access token of an hour ago has expired
  assertStatus(await invite(t, access_token, org.id, email.toUpperCase()), 201);
  assert.equal((await mails(t, email)).length, 5);
});

test('an org admin mails at most 100 invitations by email in any rolling 24 hours, across their Organizations (API4:2023 Unrestricted Resource Consumption: one address each, any number of addresses, each an `invited` User and a mail naming the Organization): the 101st answers 429 rate_limited with Retry-After, adds, creates and mails nothing; another org admin and organizations.manage still invite; 24 hours later the admin can again', async () => {
  const first = await createOrgApi(t, undefined, 'Claim your prize at evil.example');
  const second = await createOrgApi(t, first.owner);
  const tag = Math.random().toString(36).slice(2, 8);
  for (let i = 0; i < 100; i++) {
    const orgId = i % 2 === 0 ? first.org.id : second.org.id;
    assertStatus(await invite(t, first.owner.token, orgId, `flood-${tag}-${i}@example.net`), 201);
  }
  const invitedUsers = async () => (await sql(t, `SELECT count(*)::int AS n FROM users WHERE email LIKE $1`, [`flood-${tag}-%`]))[0].n;
  assert.equal(await invitedUsers(), 100);
  const extra = `flood-${tag}-extra@example.net`;
  const refused = await invite(t, first.owner.token, second.org.id, extra);
  const error = assertError(refused, 429, 'rate_limited');
  assert.match(error.message, /100 invitations/);
  const retryAfter = Number(refused.headers['retry-after']);
  assert.ok(retryAfter > 23 * 3600 && retryAfter <= 86400, `Retry-After ${refused.headers['retry-after']}`);
  assert.equal(await invitedUsers(), 100, 'no invited User created');
  assert.deepEqual(await mails(t, extra), [], 'nothing mailed');
  assert.equal(await membership(t, second.org.id, (await sql(t, 'SELECT id FROM users WHERE email = $1', [extra]))[0]?.id ?? 'usr_none'), undefined);

  // Another org admin of the same Organization is counted on their own; organizations.manage is not counted.
  const coAdmin = await person(t);
  assertStatus(await addById(t, admin, first.org.id, coAdmin.id, 'org_admin'), 201);
  assertStatus(await invite(t, coAdmin.token, first.org.id, extra), 201);
  assertStatus(await invite(t, admin, second.org.id, `flood-${tag}-by-platform@example.net`), 201);

  t.clock.advance(86400);
  const { access_token } = await session(t, first.owner);
  assertStatus(await invite(t, access_token, second.org.id, `flood-${tag}-next-day@example.net`), 201);
});

test('organizations.manage is not counted against the 100 invitations by email per day (docs/decisions.md): a signed-in user holding it sends a 101st within 24 hours and gets 201 with its mail', async () => {
  const operator = await person(t, { roles: ['superadmin'] });
  const { org } = await createOrgApi(t);
  const tag = Math.random().toString(36).slice(2, 8);
  for (let i = 0; i < 100; i++) assertStatus(await invite(t, operator.token, org.id, `onboard-${tag}-${i}@example.net`), 201);
  const extra = `onboard-${tag}-extra@example.net`;
  assert.equal(assertStatus(await invite(t, operator.token, org.id, extra), 201).membership_status, 'pending');
  assert.equal((await mails(t, extra)).length, 1);
});

test('members ?q= matches a pending member by email only, never by the display_name the list hides until they are active', async () => {
  const { org, owner } = await createOrgApi(t);
  const u = await person(t);
  const name = `Zq${Math.random().toString(36).slice(2, 8)}`;
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', u.token, { display_name: name }), 200);
  assertStatus(await invite(t, owner.token, org.id, u.email), 201);
  const byName = async () => assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?q=${name.toLowerCase()}`, admin), 200).data.map((m: any) => m.user_id);
  assert.deepEqual(await byName(), []);
  const byEmail = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?q=${encodeURIComponent(u.email)}`, admin), 200).data;
  assert.deepEqual(byEmail.map((m: any) => [m.user_id, m.display_name]), [[u.id, null]]);
  assertStatus(await accept(t, u.token, org.id), 200);
  assert.deepEqual(await byName(), [u.id], 'once active, the shown name matches');
});

test('members ?q= finds an active member by a display_name searched exactly as it is stored, also where JavaScript and PostgreSQL lower it differently (`İ`, a word-final `Σ`)', async () => {
  const { org, owner } = await createOrgApi(t);
  for (const name of ['İlker Yılmaz', 'ΟΔΟΣ Ένα']) {
    const u = await person(t);
    assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', u.token, { display_name: name }), 200);
    assertStatus(await invite(t, owner.token, org.id, u.email), 201);
    assertStatus(await accept(t, u.token, org.id), 200);
    for (const q of [name, name.split(' ')[0], name.split(' ')[0].toUpperCase()]) {
      const found = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?q=${encodeURIComponent(q)}`, admin), 200).data.map((m: any) => m.user_id);
      assert.deepEqual(found, [u.id], `q=${q} finds ${name}`);
    }
  }
});

test('adding by user_id (organizations.manage) is active at once: organization.member_added and access.granted (org_member_added) where a grant exists', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  const user = await person(t);
  const res = assertStatus(await addById(t, admin, org.id, user.id), 201);
  assert.equal(res.user_id, user.id);
  assert.equal(res.membership_status, 'active');
  assert.equal(res.role, 'member');
  assert.notEqual(res.joined_at, null);
  const hooks = await memberWebhooks(t, org.id, user.id);
  assert.deepEqual(hooks, [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: user.id, role: 'member' } }]);
  assert.equal((await orgAudit(t, org.id, 'organization.member_added', user.id)).length, 1);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'org_member_added', 'active']]);
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, true);
  assert.equal(await memberCount(org.id), 2);
  assert.deepEqual(await mails(t, user.email), [], 'no invitation mail for a direct add');
});

test('adding by user_id an invited User (created by an admin, never signed in) makes the membership active at once, as for any user (Part B: "adding by user_id (organizations.manage only) creates active directly"): 201 active with joined_at, organization.member_added', async () => {
  const org = await orgWithMembers(t, admin);
  const invited = assertStatus(await call(t, 'POST', '/v1/users', admin, { email: uniqueEmail('org-direct-invited') }), 201);
  assert.equal(invited.status, 'invited');
  const res = assertStatus(await addById(t, admin, org.id, invited.id), 201);
  assert.equal(res.user_id, invited.id);
  assert.equal(res.membership_status, 'active');
  assert.notEqual(res.joined_at, null);
  assert.equal((await membership(t, org.id, invited.id))?.membership_status, 'active');
  assert.deepEqual(await memberWebhooks(t, org.id, invited.id), [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: invited.id, role: 'member' } }]);
  assert.equal((await orgAudit(t, org.id, 'organization.member_added', invited.id)).length, 1);
  assert.equal(await memberCount(org.id), 2);
});

test('an org admin adding by user_id gets 403 forbidden', async () => {
  const org = await orgWithMembers(t, admin);
  const user = await person(t);
  assertError(await addById(t, org.owner.token, org.id, user.id), 403, 'forbidden');
  assert.equal(await membership(t, org.id, user.id), undefined);
});

test('POST members takes exactly one of user_id or email: both, or neither, is 422 validation_failed and adds nobody', async () => {
  const org = await orgWithMembers(t, admin);
  const u = await person(t);
  assertInvalid(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: u.id, email: u.email }), 'email');
  assertInvalid(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { role: 'member' }), 'email');
  assert.equal(await membership(t, org.id, u.id), undefined);
  assert.deepEqual(await mails(t, u.email), [], 'no invitation sent');
  assert.equal(await memberCount(org.id), 1);
});

test('adding by user_id a user who does not exist or is deleted: 404 user_not_found and no membership', async () => {
  const org = await orgWithMembers(t, admin);
  assertError(await addById(t, admin, org.id, 'usr_doesnotexist'), 404, 'user_not_found');
  const gone = await person(t);
  assertStatus(await call(t, 'DELETE', `/v1/users/${gone.id}`, admin), 204);
  assertError(await addById(t, admin, org.id, gone.id), 404, 'user_not_found');
  assert.equal(await membership(t, org.id, gone.id), undefined);
  assert.deepEqual((await memberWebhooks(t, org.id)).map((h) => h.data.user_id), [org.owner.id], 'only the creator was ever added');
});

test('a plain member may not invite (403 forbidden)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  assertError(await invite(t, org.members[0].token, org.id, uniqueEmail()), 403, 'forbidden');
});

test('accept (POST members/me/accept) moves pending to active (200) with organization.member_added and access.granted; accepting an active one returns 200 unchanged; without a pending membership 404 member_not_found', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  const user = await person(t);
  const invited = assertStatus(await invite(t, org.owner.token, org.id, user.email), 201);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [], 'a pending membership grants nothing');
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, false);
  t.clock.advance(60);
  const joined = assertStatus(await accept(t, user.token, org.id), 200);
  assert.equal(joined.membership_status, 'active');
  assert.equal(joined.role, 'member');
  assert.equal(joined.invited_at, invited.invited_at);
  assert.ok(Date.parse(joined.joined_at) - Date.parse(invited.invited_at) >= 60_000, 'joined_at is when the invitation was accepted, not when it was sent');
  assert.equal(typeof joined.display_name, 'string');
  assert.deepEqual(await memberWebhooks(t, org.id, user.id), [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: user.id, role: 'member' } }]);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'org_member_added', 'active']]);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, user.token), 200).id, org.id, 'an active member sees it');
  const again = assertStatus(await accept(t, user.token, org.id), 200);
  assert.deepEqual(again, joined);
  assert.equal((await memberWebhooks(t, org.id, user.id)).length, 1);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 1);
  const stranger = await person(t);
  assertError(await accept(t, stranger.token, org.id), 404, 'member_not_found');
  assertError(await accept(t, stranger.token, 'org_doesnotexist'), 404, 'member_not_found');
});

test('accepting an invitation as org_admin: organization.member_added carries role org_admin, and the new member acts as org admin', async () => {
  const org = await orgWithMembers(t, admin);
  const u = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, u.email, 'org_admin'), 201);
  const joined = assertStatus(await accept(t, u.token, org.id), 200);
  assert.deepEqual([joined.role, joined.membership_status], ['org_admin', 'active']);
  assert.deepEqual(await memberWebhooks(t, org.id, u.id), [{ type: 'organization.member_added', data: { organization_id: org.id, user_id: u.id, role: 'org_admin' } }]);
  const added = await orgAudit(t, org.id, 'organization.member_added', u.id);
  assert.deepEqual(added.map((a) => a.after.role), ['org_admin']);
  // Two active org_admins now: the creator is no longer the last one.
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.owner.id}`, u.token, { role: 'member' }), 200).role, 'member');
});

test('PATCH members/{userId} changes the role (organization.member_role_changed), pending members too; a plain member gets 403; unknown user 404 member_not_found', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [a, b] = org.members;
  const invitee = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, invitee.email), 201);
  const promoted = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${a.id}`, org.owner.token, { role: 'org_admin' }), 200);
  assert.equal(promoted.role, 'org_admin');
  assert.equal(promoted.membership_status, 'active');
  const audit = await orgAudit(t, org.id, 'organization.member_role_changed', a.id);
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.role, 'member');
  assert.equal(audit[0].after.role, 'org_admin');
  const pending = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${invitee.id}`, admin, { role: 'org_admin' }), 200);
  assert.equal(pending.role, 'org_admin');
  assert.equal(pending.membership_status, 'pending');
  const pendingAudit = await orgAudit(t, org.id, 'organization.member_role_changed', invitee.id);
  assert.deepEqual(pendingAudit.map((a) => [a.before.role, a.after.role]), [['member', 'org_admin']], 'a pending member\'s role change is audited too');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${a.id}`, b.token, { role: 'member' }), 403, 'forbidden');
  assert.equal((await membership(t, org.id, a.id))?.role, 'org_admin');
  const nobody = await person(t);
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${nobody.id}`, org.owner.token, { role: 'org_admin' }), 404, 'member_not_found');
});

test('a soft-deleted org_admin is not the last org_admin: while a live one remains they can be demoted (200) and removed (204)', async () => {
  const { org, owner } = await createOrgApi(t);
  const [b, c] = [await person(t), await person(t)];
  for (const u of [b, c]) assertStatus(await addById(t, admin, org.id, u.id, 'org_admin'), 201);
  for (const u of [b, c]) assertStatus(await call(t, 'DELETE', `/v1/users/${u.id}`, admin), 204);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${b.id}`, admin, { role: 'member' }), 200).role, 'member');
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${c.id}`, owner.token), 204);
  // The live one is still the last.
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${owner.id}`, owner.token), 409, 'last_org_admin');
});

test('409 last_org_admin when demoting or removing the last active org_admin (a pending org_admin does not count)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const invitee = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, invitee.email, 'org_admin'), 201);
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.owner.id}`, org.owner.token, { role: 'member' }), 409, 'last_org_admin');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/me`, org.owner.token, { role: 'member' }), 409, 'last_org_admin');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${org.owner.id}`, admin), 409, 'last_org_admin');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, org.owner.token), 409, 'last_org_admin');
  assert.equal((await membership(t, org.id, org.owner.id))?.role, 'org_admin');
  // With a second active org_admin, the first may be demoted.
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.members[0].id}`, org.owner.token, { role: 'org_admin' }), 200);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.owner.id}`, org.owner.token, { role: 'member' }), 200).role, 'member');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${org.members[0].id}`, admin), 409, 'last_org_admin');
});

test('a soft-deleted member is not counted or listed (unless include_inactive) and is no org_admin: the last live org_admin still gets 409 last_org_admin', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const gone = org.members[0];
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${gone.id}`, org.owner.token, { role: 'org_admin' }), 200);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, org.owner.token), 200).member_count, 2);
  assertStatus(await call(t, 'DELETE', '/v1/users/me', gone.token), 204);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, org.owner.token), 200).member_count, 1, 'active members only');
  const listed = (q: string) => call(t, 'GET', `/v1/organizations/${org.id}/members${q}`, org.owner.token);
  assert.deepEqual(assertStatus(await listed(''), 200).data.map((m: any) => m.user_id), [org.owner.id]);
  assert.deepEqual(assertStatus(await listed('?include_inactive=true'), 200).data.map((m: any) => m.user_id).sort(), [org.owner.id, gone.id].sort());
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, org.owner.token), 409, 'last_org_admin');
  assertError(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/me`, org.owner.token, { role: 'member' }), 409, 'last_org_admin');
});

test('a PATCH naming the member\'s current role changes nothing: the last org_admin "demoted" to org_admin answers 200 (no 409 last_org_admin) and no organization.member_role_changed is written', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const same = assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.owner.id}`, org.owner.token, { role: 'org_admin' }), 200);
  assert.deepEqual([same.role, same.membership_status], ['org_admin', 'active']);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${org.members[0].id}`, admin, { role: 'member' }), 200).role, 'member');
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_role_changed'), []);
});

test('409 already_member for an active or pending member (by email and by user_id); 404 member_not_found for DELETE of a non-member', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const active = org.members[0];
  const pending = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, pending.email), 201);
  assertError(await invite(t, org.owner.token, org.id, active.email), 409, 'already_member');
  assertError(await invite(t, org.owner.token, org.id, pending.email), 409, 'already_member');
  assertError(await addById(t, admin, org.id, active.id), 409, 'already_member');
  assertError(await addById(t, admin, org.id, pending.id), 409, 'already_member');
  assertError(await addById(t, admin, org.id, org.owner.id), 409, 'already_member');
  assert.equal((await mails(t, pending.email)).length, 1, 'no second invitation');
  const nobody = await person(t);
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${nobody.id}`, org.owner.token), 404, 'member_not_found');
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, nobody.token), 404, 'member_not_found');
});

test('removal strips org_seat paths: access.revoked (org_member_removed) only where it was the last path; the id leaves member_overrides; app Role assignments stay; organization.member_removed webhook', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [u, v] = org.members;
  const appA = await newApp(t, admin);
  const appB = await newApp(t, admin, { available_app_roles: ['editor'] });
  await orgGrantApi(t, admin, org.id, appA.id);
  const scoped = await orgGrantApi(t, admin, org.id, appB.id, { member_scope: 'allowlist', member_overrides: [u.id, v.id] });
  await grant(t, admin, u.id, appA.id); // a personal path to appA
  const roleId = `role_${appB.slug}_editor`;
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${roleId}`, admin, {}), 201);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${u.id}`, org.owner.token)).statusCode, 204);
  assert.equal(await membership(t, org.id, u.id), undefined);
  assert.deepEqual(await accessEvents(t, u.id, appA.id), [['access.granted', 'entitlement_granted', 'active']], 'the personal path remains: no access.revoked');
  assert.equal((await effective(t, admin, u.id, appA.id)).allowed, true);
  assert.deepEqual(await accessEvents(t, u.id, appB.id), [['access.granted', 'entitlement_granted', 'active'], ['access.revoked', 'org_member_removed', 'none']]);
  assert.equal((await effective(t, admin, u.id, appB.id)).allowed, false);
  // v is untouched.
  for (const app of [appA, appB]) assert.deepEqual(await accessEvents(t, v.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  assert.deepEqual((await sql(t, 'SELECT member_overrides FROM entitlements WHERE id = $1', [scoped.id]))[0].member_overrides, [v.id]);
  assert.deepEqual(await entitlementEvents(t, scoped.id), ['entitlement.granted', 'entitlement.member_scope_changed'], 'leaving member_overrides is a member_overrides change');
  assert.equal((await auditOf(t, scoped.id, 'entitlement.member_scope_changed')).length, 1);
  assert.equal((await sql(t, 'SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = $2', [u.id, roleId])).length, 1, 'app Role assignment stays');
  const hooks = await memberWebhooks(t, org.id, u.id);
  assert.deepEqual(hooks.map((h) => h.type), ['organization.member_added', 'organization.member_removed']);
  assert.deepEqual(hooks[1].data, { organization_id: org.id, user_id: u.id, role: 'member' });
  // The audit row holds the membership as it was before the removal, and nothing after.
  const audit = await orgAudit(t, org.id, 'organization.member_removed', u.id);
  assert.deepEqual(audit.map((a) => [a.before, a.after]), [[{ organization_id: org.id, user_id: u.id, role: 'member', membership_status: 'active' }, null]]);
  assert.equal(await memberCount(org.id), 2);
});

test('a member may leave (DELETE members/me): 204, organization.member_removed and access.revoked (org_member_removed)', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const leaver = org.members[0];
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, leaver.token)).statusCode, 204);
  assert.equal(await membership(t, org.id, leaver.id), undefined);
  assert.deepEqual(await accessEvents(t, leaver.id, app.id), [['access.granted', 'entitlement_granted', 'active'], ['access.revoked', 'org_member_removed', 'none']]);
  assert.deepEqual((await memberWebhooks(t, org.id, leaver.id)).map((h) => h.type), ['organization.member_added', 'organization.member_removed']);
  assertError(await call(t, 'GET', `/v1/organizations/${org.id}`, leaver.token), 404, 'organization_not_found');
  // The org admin kept access.
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
});

test('a plain member may not remove another member (403 forbidden): the membership stays and their access does not flip', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [actor, target] = org.members;
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  for (const victim of [target, org.owner]) {
    assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${victim.id}`, actor.token), 403, 'forbidden');
    assert.equal((await membership(t, org.id, victim.id))?.membership_status, 'active');
    assert.deepEqual(await accessEvents(t, victim.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  }
  assert.deepEqual((await memberWebhooks(t, org.id)).map((h) => h.type), ['organization.member_added', 'organization.member_added', 'organization.member_added']);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_removed'), []);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('an org admin demoted while their request waits for the Organization acts as a plain member (PostgreSQL): their invitation and role change get 403 forbidden, and nothing is added, mailed or changed', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [demoted, other] = org.members;
  for (const u of [demoted, other]) assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${u.id}`, org.owner.token, { role: 'org_admin' }), 200);
  const demote: [string, unknown[]] = [`UPDATE organization_members SET role = 'member' WHERE organization_id = $1 AND user_id = $2`, [org.id, demoted.id]];
  const late = uniqueEmail('late');
  assertError(await afterChangeCommitsMeanwhile(t, org.id, demote, () => invite(t, demoted.token, org.id, late)), 403, 'forbidden');
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${org.id}/members/${demoted.id}`, org.owner.token, { role: 'org_admin' }), 200);
  assertError(await afterChangeCommitsMeanwhile(t, org.id, demote, () => call(t, 'PATCH', `/v1/organizations/${org.id}/members/${other.id}`, demoted.token, { role: 'member' })), 403, 'forbidden');
  assert.deepEqual(await sql(t, 'SELECT id FROM users WHERE lower(email) = lower($1)', [late]), [], 'no invited User');
  assert.deepEqual(await mails(t, late), []);
  assert.equal((await membership(t, org.id, other.id))?.role, 'org_admin');
  const changes = await orgAudit(t, org.id, 'organization.member_role_changed');
  assert.deepEqual(changes.map((a) => [a.target_user_id, a.after.role]), [[demoted.id, 'org_admin'], [other.id, 'org_admin'], [demoted.id, 'org_admin']]);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_invited'), []);
});

if (storageName === 'postgres') test('an invitation by email to the address of a user deleted while it waits invites a new User (PostgreSQL): "if no live User has the email an invited User is created"; the deleted user gets no pending membership and no invitation mail', async () => {
  const org = await orgWithMembers(t, admin);
  const doomed = await person(t);
  const deletion: [string, unknown[]] = [`UPDATE users SET status = 'deleted' WHERE id = $1`, [doomed.id]];
  const member = assertStatus(await commitWhileWaiting(t, [deletion], () => invite(t, org.owner.token, org.id, doomed.email)), 201);
  assert.notEqual(member.user_id, doomed.id);
  assert.equal(await membership(t, org.id, doomed.id), undefined, 'no membership of the deleted user');
  const live = await sql(t, `SELECT id, status FROM users WHERE lower(email) = lower($1) AND status <> 'deleted'`, [doomed.email]);
  assert.deepEqual(live.map((u) => [u.id, u.status]), [[member.user_id, 'invited']]);
  assert.equal((await membership(t, org.id, member.user_id))?.membership_status, 'pending');
  const sent = await sql(t, `SELECT user_id FROM emails WHERE lower(to_address) = lower($1) AND template = 'organization_invitation'`, [doomed.email]);
  assert.deepEqual(sent.map((m) => m.user_id), [member.user_id], 'the invitation mail is the new User\'s');
});

test('withdrawing or declining a pending invitation writes the organization.member_removed audit only (no webhook, no access event)', async () => {
  const org = await orgWithMembers(t, admin);
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  const withdrawn = await person(t);
  const decliner = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, withdrawn.email), 201);
  assertStatus(await invite(t, org.owner.token, org.id, decliner.email), 201);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${withdrawn.id}`, org.owner.token)).statusCode, 204);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, decliner.token)).statusCode, 204);
  for (const u of [withdrawn, decliner]) {
    assert.equal(await membership(t, org.id, u.id), undefined);
    const audit = await orgAudit(t, org.id, 'organization.member_removed', u.id);
    assert.deepEqual(audit.map((a) => [a.before, a.after]), [[{ organization_id: org.id, user_id: u.id, role: 'member', membership_status: 'pending' }, null]], 'the removed membership was a pending invitation');
    assert.deepEqual(await memberWebhooks(t, org.id, u.id), []);
    assert.deepEqual(await accessEvents(t, u.id, app.id), []);
  }
  assertError(await accept(t, decliner.token, org.id), 404, 'member_not_found');
});

test('leaving (DELETE members/me) an Organization one is not a member of is 404 member_not_found; accepting with an API key is 400 user_token_required; nothing is written', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const stranger = await person(t);
  assertError(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/me`, stranger.token), 404, 'member_not_found');
  assertError(await accept(t, admin, org.id), 400, 'user_token_required');
  assert.equal(await membership(t, org.id, stranger.id), undefined);
  assert.equal(await memberCount(org.id), 2);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_removed'), []);
  assert.deepEqual(await orgAudit(t, org.id, 'organization.member_added', stranger.id), []);
});

test('"A pending membership grants nothing, is not a seat": an invitee of an Organization holding a grant gets no access and leaves seats.current (subscription and usage) as it was; accepting makes them a seat', async () => {
  const org = await orgWithMembers(t, admin, 1);
  const app = await newApp(t, admin);
  await orgGrantApi(t, admin, org.id, app.id);
  const seats = async () => [
    assertStatus(await call(t, 'GET', `/v1/tenants/${app.tenant_id}/subscription`, app.owner!.token), 200).seats.current,
    assertStatus(await call(t, 'GET', `/v1/tenants/${app.tenant_id}/usage`, app.owner!.token), 200).limits.seats.current,
  ];
  assert.deepEqual(await seats(), [2, 2]);
  const invitee = await person(t);
  assertStatus(await invite(t, org.owner.token, org.id, invitee.email), 201);
  assert.deepEqual(await seats(), [2, 2], 'a pending membership is not a seat');
  assert.deepEqual(await accessEvents(t, invitee.id, app.id), []);
  assert.equal((await effective(t, admin, invitee.id, app.id)).allowed, false);
  assertStatus(await accept(t, invitee.token, org.id), 200);
  assert.deepEqual(await seats(), [3, 3]);
  assert.deepEqual(await accessEvents(t, invitee.id, app.id), [['access.granted', 'org_member_added', 'active']]);
});

test('an Organization\'s 3 mails per address are per rolling hour to the second (docs/decisions.md: 429 "with Retry-After"): 3 invitations at one instant, a 4th 3,599 s later is 429 rate_limited with Retry-After 1 and mails nothing; at exactly 3,600 s it is 201 with its mail', async () => {
  const { org } = await createOrgApi(t);
  const email = uniqueEmail('hour-edge');
  await withStoppedClock(t, async () => {
    for (let i = 0; i < 3; i++) {
      const member = assertStatus(await invite(t, admin, org.id, email), 201);
      assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${member.user_id}`, admin)).statusCode, 204);
    }
    t.clock.advance(3599);
    const refused = await invite(t, admin, org.id, email);
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], '1');
    assert.equal((await mails(t, email)).length, 3);
    t.clock.advance(1);
    assertStatus(await invite(t, admin, org.id, email), 201);
    assert.equal((await mails(t, email)).length, 4);
  });
});

test('GET members pages with page.next_cursor (list responses, Part A conventions): members invited at one instant, followed one at a time under the `q`, role and membership_status filters, each come exactly once, newest first, and the last page says has_more false', async () => {
  const { org, owner } = await createOrgApi(t);
  const tag = `pg${rand(4)}`;
  const ids = await atOneInstant(t, async () => {
    const out: string[] = [];
    for (const i of [0, 1, 2]) out.push(assertStatus(await invite(t, owner.token, org.id, `${tag}-${i}@example.net`), 201).user_id);
    // Another pending member at that instant outside the filters: an org_admin invitation.
    assertStatus(await invite(t, owner.token, org.id, `${tag}-admin@example.net`, 'org_admin'), 201);
    return out;
  });
  const follow = async (query: string) => {
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let round = 0; round < 10; round++) {
      const page: any = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?${query}&limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, owner.token), 200);
      assert.ok(page.data.length <= 1, `limit=1 gave ${page.data.length}`);
      seen.push(...page.data.map((m: any) => m.user_id));
      if (!page.page.has_more) return seen;
      cursor = page.page.next_cursor;
    }
    assert.fail(`paging ${query} did not end`);
  };
  const expected = [...ids].sort().reverse();
  assert.deepEqual(await follow(`q=${tag}&role=member`), expected);
  assert.deepEqual(await follow(`q=${tag}&role=member&membership_status=pending`), expected);
  assert.deepEqual(await follow(`role=member&membership_status=pending`), expected);
});

test('an org admin\'s 100 invitations by email are per rolling 24 hours to the second (docs/decisions.md: "in any rolling 24 hours", 429 with Retry-After): 100 at one instant, the 101st 86,399 s later is 429 rate_limited with Retry-After 1 and mails nothing; at exactly 86,400 s it is 201 with its mail', async () => {
  const { org, owner } = await createOrgApi(t);
  const tag = `day${rand(4)}`;
  await withStoppedClock(t, async () => {
    for (let i = 0; i < 100; i++) assertStatus(await invite(t, owner.token, org.id, `${tag}-${i}@example.net`), 201);
    t.clock.advance(86399);
    const early = await session(t, owner); // the access token of a day ago has expired
    const refused = await invite(t, early.access_token, org.id, `${tag}-early@example.net`);
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], '1');
    assert.deepEqual(await mails(t, `${tag}-early@example.net`), []);
    t.clock.advance(1);
    assertStatus(await invite(t, early.access_token, org.id, `${tag}-on-time@example.net`), 201);
    assert.equal((await mails(t, `${tag}-on-time@example.net`)).length, 1);
  });
});

test('members ?q= is a case-insensitive prefix of the email (as the users search, Part A): an active member whose address is stored with capitals is found by its lower-cased and by its upper-cased beginning', async () => {
  const { org } = await createOrgApi(t);
  const member = await person(t, { email: uniqueEmail('CaseQ') });
  assert.notEqual(member.email, member.email.toLowerCase(), 'the account is stored with capitals');
  // A display_name unlike the address, so only the email can match.
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', member.token, { display_name: `Zq${rand(4)}` }), 200);
  assertStatus(await addById(t, admin, org.id, member.id), 201);
  const prefix = member.email.slice(0, member.email.indexOf('@'));
  for (const q of [prefix.toLowerCase(), prefix.toUpperCase()]) {
    const found = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members?q=${encodeURIComponent(q)}`, admin), 200).data;
    assert.deepEqual(found.map((m: any) => [m.user_id, m.email]), [[member.id, member.email]], `q=${q}`);
  }
});

test('a removed member leaving an org grant\'s member_overrides changes that grant like any member_overrides change (docs/decisions.md, "as a DELETE of the member gives"): its updated_at becomes the removal\'s instant and member_overrides no longer names them', async () => {
  const org = await orgWithMembers(t, admin, 2);
  const [u, v] = org.members;
  const app = await newApp(t, admin);
  const scoped = await orgGrantApi(t, admin, org.id, app.id, { member_scope: 'allowlist', member_overrides: [u.id, v.id] });
  t.clock.advance(5);
  const removedAt = t.clock.now();
  await atOneInstant(t, async () => {
    assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${u.id}`, admin)).statusCode, 204);
  }, removedAt);
  const after = assertStatus(await call(t, 'GET', `/v1/entitlements/${scoped.id}`, admin), 200);
  assert.deepEqual(after.member_overrides, [v.id]);
  assert.equal(after.updated_at, removedAt.toISOString());
  assert.notEqual(after.updated_at, scoped.updated_at);
});
