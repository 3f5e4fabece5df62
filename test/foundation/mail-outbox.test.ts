// The mail relay through SMTP (docs/decisions.md "Mail", "Sent mail keeps no live link"; Part B
// email_from_name): what leaves, from whom, which refusals end a mail, and how long a claim holds it.
// More relay tests: foundation/mail-relay.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, withWrappedDatabase, type TestApp } from '../helpers/app.js';
import { createUser, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { sql } from '../helpers/http.js';
import { systemCtx } from '../../src/context.js';
import { deliverQueuedMail, enqueueMail } from '../../src/mail/outbox.js';
import { renderMail } from '../../src/mail/templates.js';
import type { Db } from '../../src/db/types.js';
import { createApplication } from '../auth/support.js';
import { decodeMessage, localSmtp, onMessage, tokenLinks } from './support/ops.js';

interface Refusal {
  code: number;
  message: string;
}
interface Received {
  to: string;
  envelopeFrom: string;
  headers: Record<string, string>;
  text: string;
}

/** Answers per recipient: refused at RCPT TO or after DATA; `sender` refuses every MAIL FROM. */
const refuse = { rcpt: new Map<string, Refusal>(), data: new Map<string, Refusal>(), sender: null as Refusal | null };
const received: Received[] = [];
const tried = new Map<string, number>();
const smtpError = (r: Refusal) => Object.assign(new Error(r.message), { responseCode: r.code });

let smtp: Awaited<ReturnType<typeof localSmtp>>;
let t: TestApp;
before(async () => {
  smtp = await localSmtp({
    onMailFrom(_address, _session, callback) {
      if (refuse.sender) return callback(smtpError(refuse.sender));
      callback();
    },
    onRcptTo(address, _session, callback) {
      tried.set(address.address, (tried.get(address.address) ?? 0) + 1);
      const r = refuse.rcpt.get(address.address);
      if (r) return callback(smtpError(r));
      callback();
    },
    onData(stream, session, callback) {
      onMessage(stream, (raw) => {
        const to = session.envelope.rcptTo[0].address;
        const r = refuse.data.get(to);
        if (r) return callback(smtpError(r));
        const { headers, text } = decodeMessage(raw);
        received.push({ to, envelopeFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', headers, text });
        callback();
      });
    },
  });
  t = await buildTestApp({ smtpUrl: smtp.url });
});
after(async () => {
  await t.close();
  await smtp.close();
});

const receivedBy = (to: string) => received.filter((m) => m.to === to);
const mailOf = async (to: string) =>
  (await sql<{ id: string; status: string; attempts: number; last_error: string | null; next_attempt_at: Date; text_body: string; test_mode: boolean }>(
    t, 'SELECT id, status, attempts, last_error, next_attempt_at, text_body, test_mode FROM emails WHERE to_address = $1 ORDER BY created_at', [to],
  ));
/** Moves the clock to the mail's next attempt and runs the relay once. */
async function attemptAt(to: string): Promise<void> {
  const [mail] = await mailOf(to);
  t.clock.advance(Math.max(0, mail.next_attempt_at.getTime() - t.clock.now().getTime()) / 1000);
  await deliverQueuedMail(t.deps);
}
/** A reset mail whose link (a token no one_time_tokens row names) works as long as the test likes. */
async function queueMail(to: string, mode: 'live' | 'test' = 'live'): Promise<string> {
  const ctx = systemCtx(t.deps, mode);
  return ctx.db.transaction((tx) => enqueueMail(tx, ctx, { template: 'password_reset', to, vars: { token: `tok-${to}` } }));
}
/** Runs `fn` with every statement on the system connection whose text contains `fragment` failing. */
async function failingStatements<T>(fragment: string, fn: () => Promise<T>): Promise<{ result: Promise<T>; failures: () => number }> {
  let failures = 0;
  const wrap = (db: Db): Db => ({
    ...db,
    query: (async (text: string, params?: unknown[]) => {
      if (text.includes(fragment)) {
        failures++;
        throw new Error('Connection terminated unexpectedly');
      }
      return db.query(text, params);
    }) as Db['query'],
  });
  const result = withWrappedDatabase(t, wrap, fn);
  await result.catch(() => undefined);
  return { result, failures: () => failures };
}

test('Part B email_from_name: a branded mail goes out with the Application\'s name as the sender\'s display name and the service\'s MAIL_FROM as its address ("the sending address is always the service\'s"); an unbranded mail from MAIL_FROM alone', async () => {
  const appId = await createApplication(t, { slug: `brand-${Date.now().toString(36)}`, emailFromName: 'Acme Notes' });
  const [branded, plain] = [uniqueEmail('branded'), uniqueEmail('unbranded')];
  for (const body of [{ email: branded, password: PASSWORD, application_id: appId }, { email: plain, password: PASSWORD }]) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/signup', payload: body });
    assert.equal(res.statusCode, 201, res.body);
  }
  await deliverQueuedMail(t.deps);
  const [mail] = receivedBy(branded);
  assert.ok(mail, 'the branded verification mail was sent');
  assert.equal(mail.envelopeFrom, 'no-reply@localhost');
  assert.match(mail.headers.from, /^"?Acme Notes"? <no-reply@localhost>$/, mail.headers.from);
  const [unbranded] = receivedBy(plain);
  assert.equal(unbranded.envelopeFrom, 'no-reply@localhost');
  assert.match(unbranded.headers.from, /^<?no-reply@localhost>?$/, unbranded.headers.from);
});

test('a 5xx answer to the sender (MAIL FROM) is the service\'s own SMTP settings refused, every mail alike: the mail is retried like an outage (queued, retried 2 minutes later), not failed for good, and is sent once the settings are fixed', async () => {
  const to = uniqueEmail('sender-refused');
  await queueMail(to);
  refuse.sender = { code: 550, message: 'Sender address rejected' };
  try {
    await attemptAt(to);
  } finally {
    refuse.sender = null;
  }
  const [refused] = await mailOf(to);
  assert.deepEqual([refused.status, refused.attempts], ['queued', 1]);
  assert.match(refused.last_error!, /550 Sender address rejected/);
  assert.match(refused.text_body, /\?token=tok-/, 'kept whole for its retry');
  await attemptAt(to);
  assert.deepEqual((await mailOf(to)).map((m) => [m.status, m.attempts]), [['sent', 2]]);
  assert.equal(receivedBy(to).length, 1);
});

test('a 503 answer to the recipient is no refusal for good ("a permanent answer (5xx other than 503)"): the mail is retried, and sent at its retry', async () => {
  const to = uniqueEmail('rcpt-503');
  await queueMail(to);
  refuse.rcpt.set(to, { code: 503, message: 'Bad sequence of commands' });
  await attemptAt(to);
  refuse.rcpt.delete(to);
  const [refused] = await mailOf(to);
  assert.deepEqual([refused.status, refused.attempts], ['queued', 1]);
  assert.match(refused.last_error!, /503 Bad sequence of commands/);
  await attemptAt(to);
  assert.deepEqual((await mailOf(to)).map((m) => [m.status, m.attempts]), [['sent', 2]]);
  assert.equal(tried.get(to), 2);
  assert.equal(receivedBy(to).length, 1);
});

test('"a retry that would come after its link expires is not made": a reset mail (link valid 1 hour) failing 451 ends failed at the attempt whose retry would lie past the hour (its fifth, at 30 minutes: the next would be at 62), keeping the SMTP answer, its link redacted', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
    assert.equal(forgot.statusCode, 202, forgot.body);
    refuse.data.set(user.email, { code: 451, message: 'try again later' });
    try {
      for (let attempt = 1; attempt <= 4; attempt++) {
        await attemptAt(user.email);
        const [mail] = await mailOf(user.email);
        assert.deepEqual([mail.status, mail.attempts], ['queued', attempt], `attempt ${attempt}: its retry comes while the link works`);
      }
      await attemptAt(user.email);
    } finally {
      refuse.data.delete(user.email);
    }
    const [mail] = await mailOf(user.email);
    assert.deepEqual([mail.status, mail.attempts], ['failed', 5], 'no retry at 62 minutes, after the link died');
    assert.match(mail.last_error!, /451 try again later/);
    assert.match(mail.text_body, /\/reset-password\?token=\[redacted\]/);
    assert.doesNotMatch(mail.text_body, /token=rst_/);
    assert.equal(tried.get(user.email), 5);
  });
});

test('a reset link is dead at the instant its hour ends (a token works while now < expires_at), so a reset mail first relayed at exactly 1 hour is not sent: it fails, "its link was used, replaced or expired"', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
    assert.equal(forgot.statusCode, 202, forgot.body);
    const [token] = await sql<{ expires_at: Date }>(t, `SELECT expires_at FROM one_time_tokens WHERE user_id = $1 AND kind = 'password_reset'`, [user.id]);
    t.clock.advance((token.expires_at.getTime() - t.clock.now().getTime()) / 1000);
    assert.equal(t.clock.now().getTime(), token.expires_at.getTime(), 'precondition: at the expiry instant');
    await deliverQueuedMail(t.deps);
    const [mail] = await mailOf(user.email);
    assert.deepEqual([mail.status, mail.attempts], ['failed', 0]);
    assert.match(mail.last_error!, /link was used, replaced or expired/);
    assert.match(mail.text_body, /token=\[redacted\]/);
    assert.equal(receivedBy(user.email).length, 0);
  });
});

test('a relay claims a batch for 2 minutes: mails a relay claimed before it died (here: its next statement failed) are not sent by another relay 1 second before the 2 minutes end, and are sent, once, after them', async () => {
  await withStoppedClock(t, async () => {
    const to = uniqueEmail('crashed-batch');
    await queueMail(to);
    // The batch is claimed; the relay's next statement (the sending claim of its first mail) fails.
    const crashed = await failingStatements('SET claimed_until = $3 WHERE id = $1 AND claim_token = $2', () => deliverQueuedMail(t.deps));
    await assert.rejects(crashed.result, /Connection terminated/);
    assert.ok(crashed.failures() >= 1);
    const [claimed] = await sql<{ claimed_until: Date | null }>(t, 'SELECT claimed_until FROM emails WHERE to_address = $1', [to]);
    assert.ok(claimed.claimed_until, 'precondition: the dead relay\'s claim stands');
    t.clock.advance(119);
    await deliverQueuedMail(t.deps);
    assert.deepEqual((await mailOf(to)).map((m) => m.status), ['queued'], 'still held by the dead relay\'s claim');
    assert.equal(receivedBy(to).length, 0);
    t.clock.advance(2);
    await deliverQueuedMail(t.deps);
    assert.deepEqual((await mailOf(to)).map((m) => [m.status, m.attempts]), [['sent', 1]]);
    assert.equal(receivedBy(to).length, 1);
  });
});

test('"a process that dies after the SMTP server accepted a mail and before recording it (or that cannot record it twice) leaves it claimed, and it is sent again, with the same Message-ID, once its 15-minute sending claim lapses": not at 14 minutes, at 16', async () => {
  await withStoppedClock(t, async () => {
    const to = uniqueEmail('unrecorded');
    const id = await queueMail(to);
    const run = await failingStatements('sent_at = $3', () => deliverQueuedMail(t.deps));
    await assert.rejects(run.result, /Connection terminated/);
    assert.equal(run.failures(), 2, 'recorded, and recorded again, both failing');
    assert.equal(receivedBy(to).length, 1, 'the SMTP server has it');
    t.clock.advance(14 * 60);
    await deliverQueuedMail(t.deps);
    assert.equal(receivedBy(to).length, 1, 'not sent again while its sending claim holds');
    assert.deepEqual((await mailOf(to)).map((m) => [m.status, m.attempts]), [['queued', 0]]);
    t.clock.advance(2 * 60);
    await deliverQueuedMail(t.deps);
    const sends = receivedBy(to);
    assert.equal(sends.length, 2, 'sent again once the 15 minutes lapsed (at least once)');
    assert.equal(sends[0].headers['message-id'], `<${id}@localhost>`);
    assert.equal(sends[1].headers['message-id'], sends[0].headers['message-id']);
    assert.deepEqual((await mailOf(to)).map((m) => [m.status, m.attempts]), [['sent', 1]]);
  });
});

test('"every mail is written to the emails table … the mail-delivery job sends it through SMTP_URL": a mail caused in test mode is sent like a live one, and is a test row (test_mode), so the nightly test purge takes it after 30 days while a live mail of the same age stays', async () => {
  const [live, tested] = [uniqueEmail('live-mail'), uniqueEmail('test-mail')];
  await queueMail(live, 'live');
  await queueMail(tested, 'test');
  await deliverQueuedMail(t.deps);
  assert.equal(receivedBy(tested).length, 1, 'the test-mode mail is sent');
  assert.equal(receivedBy(live).length, 1);
  assert.deepEqual((await mailOf(tested)).map((m) => [m.status, m.test_mode]), [['sent', true]]);
  assert.deepEqual((await mailOf(live)).map((m) => [m.status, m.test_mode]), [['sent', false]]);
  t.clock.advance(31 * 86_400);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await mailOf(tested)).length, 0, 'purged with the test data');
  assert.equal((await mailOf(live)).length, 1, 'a live mail is no test row');
});

test('a mailed link says how long it works, as long as its token lives (docs/decisions.md "Token lifetimes of one-time tokens": email verification and email change 24 hours, password reset 1 hour, account invitation 7 days)', () => {
  const links = { publicUrl: 'https://id.example.org' };
  for (const [template, lifetime] of [['email_verification', '24 hours'], ['email_change_verification', '24 hours'], ['password_reset', '1 hour'], ['invitation', '7 days']] as const) {
    const { text } = renderMail(template, { token: 'tok' }, links);
    assert.match(text, new RegExp(`\\(valid for ${lifetime}\\)`), `${template}: ${text}`);
    assert.equal(tokenLinks(text, 'tok').length, 1, `${template}: ${text}`);
  }
});
