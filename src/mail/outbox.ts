import nodemailer, { type Transporter } from 'nodemailer';
import type { Ctx, Deps } from '../context.js';
import type { Db, Tx } from '../db/types.js';
import { hashSecret, newId } from '../ids.js';
import { addSeconds, beyondStep } from '../clock.js';
import { renderMail, type MailTemplate, type MailVars } from './templates.js';

export interface MailRequest<T extends MailTemplate> {
  template: T;
  to: string;
  /** A `token` among them is a one-time token (one_time_tokens): the mail is sent only while it works. */
  vars: MailVars<T>;
  /** Display name of the sender (an application's email_from_name); the address is always MAIL_FROM. */
  fromName?: string | null;
  /** The user the mail is about (erasure removes their mails, whatever the address). */
  userId?: string | null;
}

/** Queues a mail in the caller's transaction; it leaves the process only after commit. */
export async function enqueueMail<T extends MailTemplate>(tx: Tx, ctx: Ctx, mail: MailRequest<T>): Promise<string> {
  const id = newId('eml');
  const rendered = renderMail(mail.template, mail.vars, { publicUrl: ctx.deps.config.publicUrl });
  const token = (mail.vars as { token?: string | null }).token;
  await tx.query(
    `INSERT INTO emails (id, template, to_address, from_name, subject, text_body, test_mode, next_attempt_at, created_at, user_id, link_token_hash)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10)`,
    [id, mail.template, mail.to, mail.fromName ?? null, rendered.subject, rendered.text, ctx.mode === 'test', ctx.now, mail.userId ?? null, token ? hashSecret(token) : null],
  );
  return id;
}

interface EmailRow {
  id: string;
  template: string;
  to_address: string;
  from_name: string | null;
  subject: string;
  text_body: string;
  attempts: number;
}

/**
 * Retries after a failed attempt: 2, 4, 8, 16, 32 minutes, then every hour, for 4 days (RFC 5321
 * 4.5.4.1: a sender's give-up time "needs to be at least 4-5 days"), and a mail with a link only while
 * its link works: an invitation survives an SMTP outage of days, a reset link (1 hour) is not sent
 * dead, and a link replaced by a newer mail, used or voided meanwhile is not sent at all.
 */
const MAX_RETRY_SECONDS = 3600;
const GIVE_UP_SECONDS = 4 * 86_400;
/**
 * Whether an SMTP server refused this one mail for good: a permanent (5xx) answer to its recipient or
 * to its data (a mailbox that does not exist, a message refused), which the same mail would get again
 * (RFC 5321 4.2.1: the client "SHOULD NOT repeat the exact request"); retried hourly for 4 days, an
 * address that does not exist would be tried some hundred times, which receiving servers count against
 * the sender. A 5xx to the connection, the sign-in or the sender (MAIL FROM) is the service's own
 * settings refused, every mail alike: those are retried like an outage, until an operator fixes them.
 */
const refusedForGood = (err: unknown): boolean => {
  const e = err as { responseCode?: unknown; command?: unknown };
  return typeof e.responseCode === 'number' && e.responseCode >= 500 && e.responseCode < 600 && e.responseCode !== 503 &&
    (e.command === 'RCPT TO' || e.command === 'DATA');
};
/**
 * Whether mail `e`'s link still works at parameter `at`: its token is not used, voided or expired by
 * then. (A dead token's row is pruned only once no queued mail carries it: src/modules/system/prune.ts.)
 */
const LINK_WORKS = (at: string) => `NOT EXISTS (SELECT 1 FROM one_time_tokens t
    WHERE t.token_hash = e.link_token_hash AND (t.used_at IS NOT NULL OR t.expires_at <= ${at}))`;
const DEAD_LINK = 'not sent: its link was used, replaced or expired before it could be delivered';
/** The stored body with every token= value (reset, invitation, verification secrets) replaced by `[redacted]`. */
const REDACTED_BODY = `regexp_replace(text_body, '([?&]token=)[^[:space:]&]+', '\\1[redacted]', 'g')`;
/** How long a relay holds the batch it picked: a crashed relay's mails are taken up again after this. */
const CLAIM_SECONDS = 120;
/**
 * How long a relay holds the one mail it is about to send. An SMTP exchange may outlast the batch's
 * claim (nodemailer allows 2 minutes to connect and waits up to 10 minutes for an answer, as RFC 5321
 * asks after the message data), and the batch's later mails wait behind it; each mail's claim is
 * therefore taken again, for longer than an exchange, just before it is sent, and a mail whose claim
 * another relay took meanwhile (or that was erased) is left alone: no mail is sent twice.
 */
const SENDING_CLAIM_SECONDS = 15 * 60;
let transport: { url: string; transporter: Transporter } | null = null;

function transporterFor(url: string): Transporter {
  if (transport?.url !== url) transport = { url, transporter: nodemailer.createTransport(url) };
  return transport.transporter;
}

/**
 * The mail relay: claims queued mails with SKIP LOCKED (several processes never send one twice),
 * sends them through SMTP_URL, or logs them when no SMTP server is configured. A mail due further
 * ahead than the longest back-off (plus the skew bound) was scheduled before the clock stepped back:
 * it is due at once, so a step back delays no mail by more than an hour (docs/decisions.md,
 * "Clocks of several processes"); the bound is an index range, empty unless the clock stepped back.
 */
export async function deliverQueuedMail(deps: Deps, batchSize = 50): Promise<{ sent: number; failed: number }> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const token = newId('eml');
  const rows = await claimMailBatch(db, now, token, batchSize);
  let sent = 0;
  let failed = 0;
  for (const mail of rows) {
    const outcome = await deliverClaimedMail(deps, db, mail, token);
    if (outcome === 'sent') sent++;
    if (outcome === 'failed') failed++;
  }
  return { sent, failed };
}

async function claimMailBatch(db: Db, now: Date, token: string, batchSize: number): Promise<EmailRow[]> {
  const { rows } = await db.query<EmailRow>(
    `UPDATE emails SET claimed_until = $2, claim_token = $3
      WHERE id IN (SELECT id FROM emails
                    WHERE status = 'queued' AND (next_attempt_at <= $1 OR next_attempt_at > $5) AND (claimed_until IS NULL OR claimed_until < $1)
                    ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING id, template, to_address, from_name, subject, text_body, attempts`,
    [now, addSeconds(now, CLAIM_SECONDS), token, batchSize, beyondStep(now, MAX_RETRY_SECONDS)],
  );
  return rows;
}

/** Sends one mail of the batch, unless another relay took its claim meanwhile ('skipped') or its link is dead. */
async function deliverClaimedMail(deps: Deps, db: Db, mail: EmailRow, token: string): Promise<'sent' | 'failed' | 'skipped'> {
  const held = await db.query<{ link_works: boolean }>(
    `UPDATE emails e SET claimed_until = $3 WHERE id = $1 AND claim_token = $2 AND status = 'queued'
       RETURNING ${LINK_WORKS('$4')} AS link_works`,
    [mail.id, token, addSeconds(deps.clock.now(), SENDING_CLAIM_SECONDS), deps.clock.now()],
  );
  if (held.rowCount !== 1) return 'skipped';
  if (!held.rows[0].link_works) {
    await db.query(
      `UPDATE emails SET status = 'failed', last_error = $3, claimed_until = NULL, text_body = ${REDACTED_BODY} WHERE id = $1 AND claim_token = $2`,
      [mail.id, token, DEAD_LINK],
    );
    return 'failed';
  }
  return sendClaimedMail(deps, db, mail, token);
}

async function sendClaimedMail(deps: Deps, db: Db, mail: EmailRow, token: string): Promise<'sent' | 'failed'> {
  // Once the SMTP server has the mail, a failure to record it (a connection lost, a statement
  // timeout) is no failed attempt: requeued as one, the mail would be sent again.
  let handedOver = false;
  try {
    await handOverMail(deps, mail);
    handedOver = true;
    await recordSentMail(deps, db, mail, token);
    return 'sent';
  } catch (err) {
    if (handedOver) {
      // Recorded once more; should that fail too, the mail stays claimed
      // and the job fails: it is sent again only once its sending claim lapses, as after a crash.
      deps.log.warn({ err, mail_id: mail.id }, 'recording a sent mail failed; recording it again');
      await recordSentMail(deps, db, mail, token);
      return 'sent';
    }
    await recordFailedAttempt(deps, db, mail, token, err);
    return 'failed';
  }
}

/** Sends the mail through SMTP_URL, or logs it when no SMTP server is configured. */
async function handOverMail(deps: Deps, mail: EmailRow): Promise<void> {
  if (deps.config.smtpUrl) {
    await transporterFor(deps.config.smtpUrl).sendMail({
      from: mail.from_name ? { name: mail.from_name, address: deps.config.mailFrom } : deps.config.mailFrom,
      // One Message-ID per outbox row, kept by every attempt: a retry after an attempt the server
      // did accept (its answer lost) is the same message, which receivers can recognise.
      messageId: `<${mail.id}@${deps.config.mailFrom.slice(deps.config.mailFrom.lastIndexOf('@') + 1)}>`,
      // RFC 3834: a machine's mail, which vacation responders and other robots do not answer.
      headers: { 'Auto-Submitted': 'auto-generated' },
      to: mail.to_address,
      subject: mail.subject,
      text: mail.text_body,
    });
  } else {
    deps.log.info({ mail_id: mail.id, template: mail.template, to: mail.to_address, subject: mail.subject }, 'mail kept in the database outbox (no SMTP_URL)');
  }
}

/**
 * Once the SMTP server has it, the stored copy keeps no live link: its token= values (reset,
 * invitation, verification secrets) are redacted (catalog AU-2). Without SMTP_URL the outbox row
 * is the only copy an operator can read, so it stays whole.
 */
async function recordSentMail(deps: Deps, db: Db, mail: EmailRow, token: string): Promise<void> {
  await db.query(
    `UPDATE emails SET status = $2, sent_at = $3, attempts = attempts + 1, claimed_until = NULL,
            text_body = CASE WHEN $2 = 'sent' THEN ${REDACTED_BODY} ELSE text_body END
      WHERE id = $1 AND claim_token = $4`,
    [mail.id, deps.config.smtpUrl ? 'sent' : 'logged', deps.clock.now(), token],
  );
}

async function recordFailedAttempt(deps: Deps, db: Db, mail: EmailRow, token: string, err: unknown): Promise<void> {
  const attempts = mail.attempts + 1;
  const retryAt = addSeconds(deps.clock.now(), Math.min(60 * 2 ** attempts, MAX_RETRY_SECONDS));
  deps.log.warn({ err, mail_id: mail.id, attempts }, 'mail delivery failed');
  // Given up when the server refused it for good, when the next attempt would come after 4 days, or
  // after its link stops working. A mail that failed for good is never sent: its stored copy keeps
  // no live link either.
  const givenUp = `($7::boolean OR $3 > e.created_at + make_interval(secs => $6) OR NOT ${LINK_WORKS('$3')})`;
  await db.query(
    `UPDATE emails e SET attempts = $2, next_attempt_at = $3, last_error = $4, claimed_until = NULL,
            status = CASE WHEN ${givenUp} THEN 'failed' ELSE 'queued' END,
            text_body = CASE WHEN ${givenUp} THEN ${REDACTED_BODY} ELSE text_body END
      WHERE id = $1 AND claim_token = $5`,
    [mail.id, attempts, retryAt, String((err as Error).message).slice(0, 1024), token, GIVE_UP_SECONDS, refusedForGood(err)],
  );
}
