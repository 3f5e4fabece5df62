import nodemailer, { type Transporter } from 'nodemailer';
import type { Ctx, Deps } from '../context.js';
import type { Tx } from '../db/types.js';
import { newId } from '../ids.js';
import { addSeconds } from '../clock.js';
import { renderMail, type MailTemplate, type MailVars } from './templates.js';

export interface MailRequest<T extends MailTemplate> {
  template: T;
  to: string;
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
  await tx.query(
    `INSERT INTO emails (id, template, to_address, from_name, subject, text_body, test_mode, next_attempt_at, created_at, user_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)`,
    [id, mail.template, mail.to, mail.fromName ?? null, rendered.subject, rendered.text, ctx.mode === 'test', ctx.now, mail.userId ?? null],
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

const MAX_ATTEMPTS = 6;
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
 * sends them through SMTP_URL, or logs them when no SMTP server is configured.
 */
export async function deliverQueuedMail(deps: Deps, batchSize = 50): Promise<{ sent: number; failed: number }> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const token = newId('eml');
  const { rows } = await db.query<EmailRow>(
    `UPDATE emails SET claimed_until = $2, claim_token = $3
      WHERE id IN (SELECT id FROM emails
                    WHERE status = 'queued' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
                    ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING id, template, to_address, from_name, subject, text_body, attempts`,
    [now, addSeconds(now, CLAIM_SECONDS), token, batchSize],
  );
  let sent = 0;
  let failed = 0;
  for (const mail of rows) {
    const held = await db.query(
      `UPDATE emails SET claimed_until = $3 WHERE id = $1 AND claim_token = $2 AND status = 'queued'`,
      [mail.id, token, addSeconds(deps.clock.now(), SENDING_CLAIM_SECONDS)],
    );
    if (held.rowCount !== 1) continue;
    try {
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
      // Once the SMTP server has it, the stored copy keeps no live link: its token= values (reset,
      // invitation, verification secrets) are redacted (catalog AU-2). Without SMTP_URL the outbox
      // row is the only copy an operator can read, so it stays whole.
      await db.query(
        `UPDATE emails SET status = $2, sent_at = $3, attempts = attempts + 1, claimed_until = NULL,
                text_body = CASE WHEN $2 = 'sent' THEN ${REDACTED_BODY} ELSE text_body END
          WHERE id = $1 AND claim_token = $4`,
        [mail.id, deps.config.smtpUrl ? 'sent' : 'logged', deps.clock.now(), token],
      );
      sent++;
    } catch (err) {
      failed++;
      const attempts = mail.attempts + 1;
      const retryAt = addSeconds(deps.clock.now(), 60 * 2 ** attempts);
      deps.log.warn({ err, mail_id: mail.id, attempts }, 'mail delivery failed');
      // A mail that failed for good is never sent: its stored copy keeps no live link either.
      await db.query(
        `UPDATE emails SET attempts = $2, status = $3, next_attempt_at = $4, last_error = $5, claimed_until = NULL,
                text_body = CASE WHEN $3 = 'failed' THEN ${REDACTED_BODY} ELSE text_body END
          WHERE id = $1 AND claim_token = $6`,
        [mail.id, attempts, attempts >= MAX_ATTEMPTS ? 'failed' : 'queued', retryAt, String((err as Error).message).slice(0, 1024), token],
      );
    }
  }
  return { sent, failed };
}
