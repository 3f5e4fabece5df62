// The mail outbox and its relay: links in mail, retries and SMTP outages, relays running at once. The
// development clock and the job scheduler: dev-clock-and-jobs.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, uniqueEmail } from '../helpers/fixtures.js';
import { sql } from '../helpers/http.js';
import { systemCtx } from '../../src/context.js';
import { addSeconds } from '../../src/clock.js';
import { deliverQueuedMail, enqueueMail } from '../../src/mail/outbox.js';
import { decodeMessage, localSmtp, onMessage, secondProcess, sleep, tokenLinks } from './support/ops.js';

let plain: TestApp;
before(async () => {
  plain = await buildTestApp();
});
after(async () => {
  await plain.close();
});

// ---------------------------------------------------------------- mail outbox

async function queueResetMail(t: TestApp, to: string, token: string): Promise<string> {
  const ctx = systemCtx(t.deps, 'live');
  return ctx.db.transaction((tx) => enqueueMail(tx, ctx, { template: 'password_reset', to, vars: { token } }));
}

const mailRow = async (t: TestApp, id: string) =>
  (
    await t.database
      .scoped('system')
      .query<{ status: string; text_body: string; subject: string; sent_at: Date | null; attempts: number }>(
        'SELECT status, text_body, subject, sent_at, attempts FROM emails WHERE id = $1',
        [id],
      )
  ).rows[0];

test('an email that carries a token carries it in its text as a link on PUBLIC_URL whose query has token=<token>', async () => {
  const id = await queueResetMail(plain, uniqueEmail('mail'), 'abc');
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'queued');
  const links = tokenLinks(row.text_body, 'abc');
  assert.equal(links.length, 1, row.text_body);
  assert.equal(links[0].origin, new URL(plain.config.publicUrl).origin);
  assert.ok(links[0].href.startsWith(plain.config.publicUrl), links[0].href);

  // Every template that carries a token (verification, email change, invitations, reset).
  const token = 'tok+/=&x';
  const ctx = systemCtx(plain.deps, 'live');
  for (const [template, vars] of [
    ['email_verification', { token }],
    ['email_change_verification', { token }],
    ['invitation', { token }],
    ['organization_invitation', { token, organizationName: 'Acme' }],
    ['password_reset', { token }],
  ] as const) {
    const mailId = await ctx.db.transaction((tx) => enqueueMail(tx, ctx, { template, to: uniqueEmail('tpl'), vars } as any));
    const text = (await mailRow(plain, mailId)).text_body;
    const found = tokenLinks(text, token);
    assert.equal(found.length, 1, `${template}: ${text}`);
    assert.ok(found[0].href.startsWith(plain.config.publicUrl), `${template}: ${found[0].href}`);
  }
});

test('without SMTP_URL queued mail is kept in the database outbox and marked logged', async () => {
  const id = await queueResetMail(plain, uniqueEmail('mail'), 'abc');
  const result = await deliverQueuedMail(plain.deps);
  assert.ok(result.sent >= 1, 'result.sent >= 1');
  assert.equal(result.failed, 0);
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'logged');
  assert.ok(row.sent_at, 'row.sent_at');
  const again = await deliverQueuedMail(plain.deps);
  assert.equal(again.sent, 0, 'nothing is delivered twice');
});

test('without SMTP_URL the mail kept in the database outbox keeps its token link (it is the only copy)', async () => {
  const id = await queueResetMail(plain, uniqueEmail('kept'), 'kept-token');
  await deliverQueuedMail(plain.deps);
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'logged');
  assert.equal(tokenLinks(row.text_body, 'kept-token').length, 1, row.text_body);
});

test('a mail that has left the outbox (logged, sent or failed) is deleted with its address and body 30 days after it was written, by the idempotency-prune job (GDPR Art. 5(1)(e), as the webhook delivery log); a mail still queued stays', async (tc) => {
  const t = await buildTestApp({}, tc);
  const user = await createUser(t);
  const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
  assert.equal(forgot.statusCode, 202, forgot.body);
  await t.deps.jobs.runNow('mail-delivery');
  const mails = () => sql<{ template: string; status: string }>(t, 'SELECT template, status FROM emails WHERE to_address = $1 ORDER BY created_at', [user.email]);
  assert.deepEqual(await mails(), [{ template: 'password_reset', status: 'logged' }]);
  // Mails an SMTP relay left sent, and failed for good, as it writes them.
  const sent = await queueResetMail(t, user.email, 'sent-token');
  await sql(t, `UPDATE emails SET status = 'sent', sent_at = created_at, attempts = 1 WHERE id = $1`, [sent]);
  const failed = await queueResetMail(t, user.email, 'failed-token');
  await sql(t, `UPDATE emails SET status = 'failed', attempts = 1, last_error = '550 No such user here' WHERE id = $1`, [failed]);
  assert.deepEqual((await mails()).map((m) => m.status).sort(), ['failed', 'logged', 'sent']);
  // A mail the relay has not taken yet (an SMTP outage's retry) is kept whatever its age.
  const held = await queueResetMail(t, user.email, 'held-token');
  await sql(t, `UPDATE emails SET next_attempt_at = $2 WHERE id = $1`, [held, addSeconds(t.clock.now(), 60 * 86400)]);

  t.clock.advance(30 * 86400 - 60);
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal((await mails()).length, 4, 'kept for 30 days');
  t.clock.advance(61);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.equal(result.emails, 3, JSON.stringify(result));
  assert.deepEqual(await mails(), [{ template: 'password_reset', status: 'queued' }]);
});

test('PUBLIC_URL is the origin of the links in emails: a token link is on the configured PUBLIC_URL, not the default', async (tc) => {
  const t = await buildTestApp({ publicUrl: 'https://id.example.org' }, tc);
  const id = await queueResetMail(t, uniqueEmail('origin'), 'origin-token');
  const links = tokenLinks((await mailRow(t, id)).text_body, 'origin-token');
  assert.equal(links.length, 1);
  assert.equal(links[0].origin, 'https://id.example.org');
});

test('a mail queued in a transaction that rolls back never exists', async () => {
  const to = uniqueEmail('rollback');
  const ctx = systemCtx(plain.deps, 'live');
  let id = '';
  await assert.rejects(
    ctx.db.transaction(async (tx) => {
      id = await enqueueMail(tx, ctx, { template: 'password_reset', to, vars: { token: 'abc' } });
      throw new Error('roll back');
    }),
    /roll back/,
  );
  assert.ok(id, 'id');
  const { rows } = await plain.database.scoped('system').query('SELECT id FROM emails WHERE id = $1 OR to_address = $2', [id, to]);
  assert.equal(rows.length, 0);
});

interface Received {
  from: string;
  to: string[];
  subject: string;
  text: string;
}

async function startSmtp(delayMs = 0) {
  const received: Received[] = [];
  const server = await localSmtp({
    onData(stream, session, callback) {
      onMessage(stream, async (raw) => {
        const { headers, text } = decodeMessage(raw);
        received.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          subject: headers.subject ?? '',
          text,
        });
        if (delayMs) await sleep(delayMs);
        callback();
      });
    },
  });
  return { ...server, received };
}

test('with SMTP_URL the relay sends queued mail through that server and marks it sent', async (tc) => {
  const smtp = await startSmtp();
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const to = uniqueEmail('smtp');
  const id = await queueResetMail(t, to, 'abc');

  const result = await deliverQueuedMail(t.deps);
  assert.deepEqual(result, { sent: 1, failed: 0 });
  assert.equal(smtp.received.length, 1);
  const [mail] = smtp.received;
  assert.deepEqual(mail.to, [to]);
  assert.equal(mail.from, 'no-reply@localhost', 'MAIL_FROM defaults to no-reply@<PUBLIC_URL host>');
  assert.equal(mail.subject, 'Reset your password');
  const links = tokenLinks(mail.text, 'abc');
  assert.equal(links.length, 1, mail.text);
  assert.ok(links[0].href.startsWith(t.config.publicUrl), 'links[0].href.startsWith(t.config.publicUrl)');

  const row = await mailRow(t, id);
  assert.equal(row.status, 'sent');
  assert.ok(row.sent_at, 'row.sent_at');
  assert.equal(row.attempts, 1);
  // The stored copy of a sent mail keeps no live link (catalog AU-2).
  assert.equal(tokenLinks(row.text_body, 'abc').length, 0, row.text_body);
  assert.match(row.text_body, /\?token=\[redacted\]/);
});

test('a failed mail is retried 2, 4, 8, 16 and 32 minutes after its attempts, then every hour, and fails for good after 4 days (RFC 5321 4.5.4.1); its stored copy then keeps no live link (the invitation lives 7 days, the row 30 days)', async (tc) => {
  const { t } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('undeliverable');
  const invited = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } });
  assert.equal(invited.statusCode, 201, invited.body);
  const row = async () =>
    (await t.database.scoped('system').query<{ status: string; attempts: number; text_body: string; last_error: string; next_attempt_at: Date; created_at: Date }>(
      'SELECT status, attempts, text_body, last_error, next_attempt_at, created_at FROM emails WHERE to_address = $1', [to],
    )).rows[0];
  const queued = await row();
  assert.match(queued.text_body, /\?token=inv_/, 'a queued mail keeps its link: it is still to be sent');
  const delays: number[] = [];
  let now = queued;
  const attempt = async () => {
    t.clock.advance(Math.max(0, now.next_attempt_at.getTime() - t.clock.now().getTime()) / 1000);
    const attemptedAt = t.clock.now().getTime();
    await deliverQueuedMail(t.deps);
    now = await row();
    if (now.status === 'queued') delays.push(Math.round((now.next_attempt_at.getTime() - attemptedAt) / 60_000));
  };
  for (let i = 1; i <= 8; i++) {
    await attempt();
    assert.deepEqual([now.attempts, now.status], [i, 'queued']);
    assert.match(now.text_body, /\?token=inv_/, `attempt ${i}: kept for the retry`);
  }
  assert.deepEqual(delays, [2, 4, 8, 16, 32, 60, 60, 60]);
  // The hourly retries go on to the fourth day's last hour: the attempt there is the last.
  const lastHour = queued.created_at.getTime() + 4 * 86_400_000 - 30 * 60_000;
  t.clock.advance((lastHour - t.clock.now().getTime()) / 1000);
  now = { ...now, next_attempt_at: t.clock.now() };
  await attempt();
  assert.equal(now.attempts, 9);
  assert.equal(now.status, 'failed');
  assert.match(now.last_error, /451 try again later/);
  assert.match(now.text_body, /\/accept-invitation\?token=\[redacted\]/, now.text_body);
  assert.doesNotMatch(now.text_body, /inv_/);
});

test('a mail whose retry was set before the clock stepped back an hour leaves at the next run of the relay, not an hour later: a retry time further ahead than the longest back-off (1 hour) is due at once', async () => {
  const { t, smtp } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('stepped-back');
  const invited = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } });
  assert.equal(invited.statusCode, 201, invited.body);
  const row = async () =>
    (await t.database.scoped('system').query<{ status: string; attempts: number }>('SELECT status, attempts FROM emails WHERE to_address = $1', [to])).rows[0];
  await deliverQueuedMail(t.deps);
  assert.deepEqual(await row(), { status: 'queued', attempts: 1 }, 'the first attempt failed: retried 2 minutes later');
  t.clock.advance(-3600);
  try {
    smtp.state.down = false;
    await deliverQueuedMail(t.deps);
    assert.equal((await row()).status, 'sent', 'sent at once, not after the step');
    assert.equal(smtp.state.received.filter((m) => m.to === to).length, 1);
  } finally {
    t.clock.advance(3600);
  }
});

test('a mail the SMTP server refuses for good (a 5xx answer to its recipient or to its data: RFC 5321 4.2.1, "the SMTP client SHOULD NOT repeat the exact request") is not retried: it fails at its first attempt, with the answer kept and its link redacted; a 4xx is still retried', async (tc) => {
  const refusals = new Map<string, { at: 'rcpt' | 'data'; code: number; message: string }>();
  const attempts = new Map<string, number>();
  const smtp = await localSmtp({
    onRcptTo(address, _session, callback) {
      attempts.set(address.address, (attempts.get(address.address) ?? 0) + 1);
      const r = refusals.get(address.address);
      if (r?.at === 'rcpt') return callback(Object.assign(new Error(r.message), { responseCode: r.code }));
      callback();
    },
    onData(stream, session, callback) {
      stream.resume();
      stream.on('end', () => {
        const r = refusals.get(session.envelope.rcptTo[0].address);
        if (r?.at === 'data') return callback(Object.assign(new Error(r.message), { responseCode: r.code }));
        callback();
      });
    },
  });
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const [noMailbox, rejected, busy] = [await createUser(t), await createUser(t), await createUser(t)];
  refusals.set(noMailbox.email, { at: 'rcpt', code: 550, message: 'No such user here' });
  refusals.set(rejected.email, { at: 'data', code: 554, message: 'Message rejected' });
  refusals.set(busy.email, { at: 'rcpt', code: 450, message: 'Mailbox busy' });
  for (const u of [noMailbox, rejected, busy]) {
    assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: u.email } })).statusCode, 202);
  }
  const row = async (email: string) => (await sql(t, 'SELECT status, attempts, last_error, text_body FROM emails WHERE to_address = $1', [email]))[0];
  await t.deps.jobs.runNow('mail-delivery');
  t.clock.advance(121); // past the 2-minute retry of a failed first attempt
  await t.deps.jobs.runNow('mail-delivery');
  for (const [u, answer] of [[noMailbox, /550 No such user here/], [rejected, /554 Message rejected/]] as const) {
    const mail = await row(u.email);
    assert.deepEqual([mail.status, mail.attempts], ['failed', 1], `${u.email}: failed for good at its first attempt`);
    assert.match(mail.last_error, answer);
    assert.match(mail.text_body, /\/reset-password\?token=\[redacted\]/, 'its stored copy keeps no live link');
    assert.equal(attempts.get(u.email), 1, 'the refused recipient was tried once');
  }
  const transient = await row(busy.email);
  assert.deepEqual([transient.status, transient.attempts], ['queued', 2], 'a 4xx answer is retried');
  assert.match(transient.last_error, /450 Mailbox busy/);
});

/** An SMTP server that answers 451 (try again later) to every message while `down` is set. */
async function flakySmtp() {
  const state = { down: true, received: [] as { to: string; text: string }[] };
  const server = await localSmtp({
    onData(stream, session, callback) {
      onMessage(stream, (raw) => {
        if (state.down) return callback(Object.assign(new Error('try again later'), { responseCode: 451 }));
        state.received.push({ to: session.envelope.rcptTo[0].address, text: decodeMessage(raw).text });
        callback();
      });
    },
  });
  return { state, ...server };
}

let outage: Promise<{ t: TestApp; smtp: Awaited<ReturnType<typeof flakySmtp>> }> | undefined;
/** One service whose SMTP server is down (451) until a test brings it up; shared by the outage tests. */
async function outageApp() {
  outage ??= (async () => {
    const smtp = await flakySmtp();
    return { t: await buildTestApp({ smtpUrl: smtp.url }), smtp };
  })();
  const shared = await outage;
  shared.smtp.state.down = true;
  shared.smtp.state.received.length = 0;
  return shared;
}
after(async () => {
  if (!outage) return;
  const { t, smtp } = await outage;
  await t.close();
  await smtp.close();
});

/** The token of the one link in a mail's text. */
const linkToken = (text: string) => new URL(text.match(/https?:\/\/\S+token=\S+/)![0]).searchParams.get('token');

/** Runs the relay at each queued mail's next attempt for the next `seconds`. */
async function relayFor(t: TestApp, seconds: number): Promise<void> {
  const end = t.clock.now().getTime() + seconds * 1000;
  for (;;) {
    const [next] = await sql(t, `SELECT min(next_attempt_at) AS at FROM emails WHERE status = 'queued'`);
    const at = next.at ? (next.at as Date).getTime() : Infinity;
    if (at > end) break;
    t.clock.advance(Math.max(0, at - t.clock.now().getTime()) / 1000);
    await deliverQueuedMail(t.deps);
  }
  t.clock.advance(Math.max(0, end - t.clock.now().getTime()) / 1000);
}

test('an SMTP outage of two days does not lose an invitation: it stays queued, retried hourly, and is delivered, with its working link, once the server answers', async (tc) => {
  const { t, smtp } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('outage');
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } })).statusCode, 201);
  await relayFor(t, 3600);
  // Two days later (the relay's hourly attempts in between failed alike), it is still queued.
  t.clock.advance(2 * 86_400);
  await deliverQueuedMail(t.deps);
  const [waiting] = await sql(t, 'SELECT status, attempts, next_attempt_at FROM emails WHERE to_address = $1', [to]);
  assert.deepEqual([waiting.status, waiting.attempts], ['queued', 6]);
  assert.equal((waiting.next_attempt_at as Date).getTime() - t.clock.now().getTime() <= 3600_000, true);
  smtp.state.down = false;
  await relayFor(t, 3600);
  assert.equal((await sql(t, 'SELECT status FROM emails WHERE to_address = $1', [to]))[0].status, 'sent');
  assert.equal(smtp.state.received.length, 1);
  const accepted = await t.app.inject({ method: 'POST', url: '/v1/auth/invitations/accept', payload: { token: linkToken(smtp.state.received[0].text), password: 'a long enough passphrase 1' } });
  assert.equal(accepted.statusCode, 200, accepted.body);
});

test('a mail whose link stopped working during an SMTP outage is not sent: a reset link replaced by a newer request, and one whose hour ran out, fail for good (link redacted) while the newer link is delivered', async (tc) => {
  const { t, smtp } = await outageApp();
  const [replaced, live] = [await createUser(t), await createUser(t)];
  const forgot = async (email: string) => assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email } })).statusCode, 202);
  await forgot(replaced.email);
  await forgot(live.email);
  await relayFor(t, 600);
  await forgot(replaced.email);
  smtp.state.down = false;
  await relayFor(t, 1200);
  assert.deepEqual(smtp.state.received.map((m) => m.to).sort(), [live.email, replaced.email].sort(), 'the newer reset link and the one still live are sent');
  const [first] = await sql(t, 'SELECT status, last_error, text_body FROM emails WHERE to_address = $1 ORDER BY created_at', [replaced.email]);
  assert.equal(first.status, 'failed');
  assert.match(first.last_error, /link was used, replaced or expired/);
  assert.doesNotMatch(first.text_body, /token=rst_|token=(?!\[redacted\])/);
  const delivered = linkToken(smtp.state.received.find((m) => m.to === replaced.email)!.text);
  const reset = await t.app.inject({ method: 'POST', url: '/v1/auth/password/reset', payload: { token: delivered, password: 'a long enough passphrase 2' } });
  assert.equal(reset.statusCode, 204, reset.body);

  // A reset link lives one hour: the server down again past it, the mail is given up at its
  // next attempt after the hour, and never sent dead.
  smtp.state.down = true;
  smtp.state.received.length = 0;
  const later = await createUser(t);
  await forgot(later.email);
  await relayFor(t, 2 * 3600);
  smtp.state.down = false;
  await relayFor(t, 3600);
  assert.deepEqual(smtp.state.received, []);
  const [gone] = await sql(t, 'SELECT status, attempts, text_body FROM emails WHERE to_address = $1', [later.email]);
  assert.equal(gone.status, 'failed');
  assert.ok(gone.attempts <= 6, `no attempt after the link expired (${gone.attempts})`);
  assert.match(gone.text_body, /token=\[redacted\]/);
});

test('several relays running at once never send one mail twice (FOR UPDATE SKIP LOCKED)', async (tc) => {
  const smtp = await startSmtp(50);
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const other = await secondProcess(t);
  tc.after(() => other.close());
  const recipients = Array.from({ length: 6 }, () => uniqueEmail('relay'));
  for (const to of recipients) await queueResetMail(t, to, `tok-${to}`);

  const results = await Promise.all([deliverQueuedMail(t.deps), deliverQueuedMail(other.deps), deliverQueuedMail(t.deps), deliverQueuedMail(other.deps)]);
  assert.equal(
    results.reduce((n, r) => n + r.sent, 0),
    recipients.length,
  );
  assert.equal(results.reduce((n, r) => n + r.failed, 0), 0);
  const delivered = smtp.received.flatMap((m) => m.to).sort();
  assert.deepEqual(delivered, [...recipients].sort(), 'each mail exactly once');
  const { rows } = await t.database.scoped('system').query<{ status: string; attempts: number }>('SELECT status, attempts FROM emails');
  assert.equal(rows.length, recipients.length);
  for (const r of rows) {
    assert.equal(r.status, 'sent');
    assert.equal(r.attempts, 1);
  }
});

test('a mail keeps its Message-ID through its retries: an attempt the SMTP server refused after the data (451) and the retry carry the same Message-ID, another mail another one; every mail says Auto-Submitted: auto-generated (RFC 3834: no vacation replies)', async (tc) => {
  const seen: { to: string; messageId: string; autoSubmitted: string }[] = [];
  const smtp = await localSmtp({
    onData(stream, session, callback) {
      onMessage(stream, (raw) => {
        const { headers } = decodeMessage(raw);
        seen.push({ to: session.envelope.rcptTo[0].address, messageId: headers['message-id'] ?? '', autoSubmitted: headers['auto-submitted'] ?? '' });
        if (seen.length === 1) callback(Object.assign(new Error('try again later'), { responseCode: 451 }));
        else callback();
      });
    },
  });
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const [user, other] = [await createUser(t), await createUser(t)];
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } })).statusCode, 202);
  await t.deps.jobs.runNow('mail-delivery');
  const [row] = await sql(t, 'SELECT id, status, attempts FROM emails WHERE to_address = $1', [user.email]);
  assert.deepEqual([row.status, row.attempts], ['queued', 1], 'the first attempt failed');
  t.clock.advance(120);
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: other.email } })).statusCode, 202);
  await t.deps.jobs.runNow('mail-delivery');
  const ids = (to: string) => seen.filter((m) => m.to === to).map((m) => m.messageId);
  assert.equal(ids(user.email).length, 2);
  assert.equal(ids(user.email)[0], `<${row.id}@localhost>`);
  assert.equal(ids(user.email)[1], ids(user.email)[0], 'the retry is the same message');
  assert.equal(ids(other.email).length, 1);
  assert.notEqual(ids(other.email)[0], ids(user.email)[0]);
  assert.deepEqual(seen.map((m) => m.autoSubmitted), ['auto-generated', 'auto-generated', 'auto-generated']);
});

test('a relay never sends a mail another relay is still sending: when one SMTP exchange outlasts the batch claim (2 minutes), a second relay sends only the batch\'s other mail, and each recipient gets one mail', async (tc) => {
  const received: string[] = [];
  const held: (() => void)[] = [];
  const smtp = await localSmtp({
    onData(stream, session, callback) {
      stream.resume();
      stream.on('end', () => {
        received.push(session.envelope.rcptTo[0].address);
        // The first mail's final answer waits until the test lets it go (a slow relay).
        if (received.length === 1) held.push(() => callback());
        else callback();
      });
    },
  });
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const other = await secondProcess(t);
  tc.after(() => other.close());
  const users = [await createUser(t), await createUser(t)];
  for (const u of users) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: u.email } });
    assert.equal(res.statusCode, 202, res.body);
  }

  const first = deliverQueuedMail(t.deps);
  for (let waited = 0; received.length < 1; waited += 20) {
    assert.ok(waited < 10_000, 'the first relay reached the SMTP server');
    await sleep(20);
  }
  other.clock.advance(121); // the first relay's batch claim has lapsed for the second relay
  const second = await deliverQueuedMail(other.deps);
  held.forEach((release) => release());
  assert.deepEqual(await first, { sent: 1, failed: 0 });
  assert.deepEqual(second, { sent: 1, failed: 0 }, 'the second relay sent only the mail nobody was sending');
  assert.deepEqual([...received].sort(), users.map((u) => u.email).sort(), 'each mail exactly once');
  const rows = await sql(t, 'SELECT status, attempts FROM emails WHERE to_address = ANY($1::text[])', [users.map((u) => u.email)]);
  assert.deepEqual(rows.map((r) => [r.status, r.attempts]), [['sent', 1], ['sent', 1]]);
});

test('a mail the SMTP server accepted is not sent again when recording it fails once (its database connection lost): the relay records it sent, and each recipient gets one mail', async (tc) => {
  const smtp = await startSmtp();
  tc.after(smtp.close);
  const t = await buildTestApp({ smtpUrl: smtp.url }, tc);
  const user = await createUser(t);
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
  assert.equal(res.statusCode, 202, res.body);

  // The statement that records the send fails once, as on a connection the server dropped.
  const database = t.deps.database;
  const original = database.scoped;
  let failed = 0;
  database.scoped = (scope) => {
    const db = original.call(database, scope);
    const query = (async (text: string, params?: unknown[]) => {
      if (failed === 0 && text.includes('sent_at = $3')) {
        failed++;
        throw new Error('Connection terminated unexpectedly');
      }
      return db.query(text, params);
    }) as typeof db.query;
    return { ...db, query };
  };
  tc.after(() => {
    database.scoped = original;
  });
  await t.deps.jobs.runNow('mail-delivery').catch(() => undefined);
  database.scoped = original;
  assert.equal(failed, 1, 'the recording statement was failed once');
  assert.equal(smtp.received.length, 1);

  t.clock.advance(16 * 60); // past the retry (2 minutes) and the sending claim (15 minutes)
  await t.deps.jobs.runNow('mail-delivery');
  assert.deepEqual(smtp.received.map((m) => m.to), [[user.email]], 'one mail');
  const [row] = await sql(t, 'SELECT status, attempts, last_error FROM emails WHERE to_address = $1', [user.email]);
  assert.deepEqual([row.status, row.attempts, row.last_error], ['sent', 1, null]);
});
