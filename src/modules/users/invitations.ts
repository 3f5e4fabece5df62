import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { issueOneTimeToken } from '../../auth/one-time-tokens.js';
import { enqueueMail } from '../../mail/outbox.js';
import { takeSlidingQuota } from '../../http/counters.js';
import { lockUser, type UserRow } from './store.js';

/** Verification and invitation re-sends share this limit: 3 per email per hour (Part A Limits). */
export const RESEND_LIMIT_PER_HOUR = 3;

/**
 * Counts one re-send of a verification or invitation mail for this address; not allowed once 3 were
 * sent in the last hour (retryAt: when one frees). The first mail (signup, invitation) is no re-send.
 */
export function takeResendQuota(tx: Tx, ctx: Ctx, email: string): Promise<{ allowed: boolean; retryAt: Date | null }> {
  return takeSlidingQuota(tx, `mail:resend:${ctx.mode}:${email.toLowerCase()}`, RESEND_LIMIT_PER_HOUR, 3600, ctx.now);
}

/**
 * The user locked as it is now, or null when its status or address is no longer the one `read` before
 * the transaction began. A mail decided on an earlier read would otherwise go to an address the
 * account no longer has (an admin changed it meanwhile), with a link that works for the account at its
 * new address and replaces the one mailed there ("Links die with their address"), or to an account no
 * longer in the status the mail is for. Call first in the transaction, as a status or email change
 * takes the user before its links and quotas.
 */
export async function lockedAsRead(tx: Tx, read: Pick<UserRow, 'id' | 'status' | 'email'>): Promise<UserRow | null> {
  const user = await lockUser(tx, read.id);
  return user && user.status === read.status && user.email === read.email ? user : null;
}

/** A new invitation token (the previous ones stop working) and the invitation mail. */
export async function sendInvitation(tx: Tx, ctx: Ctx, user: { id: string; email: string }): Promise<void> {
  const token = await issueOneTimeToken(tx, ctx, { kind: 'invitation', userId: user.id, replacePrevious: true });
  await enqueueMail(tx, ctx, { template: 'invitation', to: user.email, vars: { token }, userId: user.id });
}

/**
 * A new email verification token and mail, branded with the email_from_name of the Application the
 * user signed up through (Part A Rule 2), for the first mail and every later one alike.
 */
export async function sendVerification(tx: Tx, ctx: Ctx, user: { id: string; email: string; signup_application_id: string | null }): Promise<void> {
  const fromName = user.signup_application_id ? await emailFromName(tx, user.signup_application_id) : null;
  const token = await issueOneTimeToken(tx, ctx, { kind: 'email_verification', userId: user.id, replacePrevious: true });
  await enqueueMail(tx, ctx, { template: 'email_verification', to: user.email, vars: { token, fromName }, fromName, userId: user.id });
}

async function emailFromName(tx: Tx, applicationId: string): Promise<string | null> {
  // Only an approved Application brands a mail: one pending review, rejected or suspended has no
  // standing to send in its name (signup through it still succeeds; application_id is informational).
  const { rows } = await tx.query<{ email_from_name: string | null }>(`SELECT email_from_name FROM applications WHERE id = $1 AND review_status = 'approved'`, [applicationId]);
  return senderName(rows[0]?.email_from_name ?? null);
}

/**
 * The sending address is always the service's (Part B, email_from_name): a name that reads as an
 * address ("Acme <billing@evil.example>") would show another sender in mail clients that show only
 * the display name, so `<`, `>`, `@`, quotes, backslashes and control characters become spaces, and
 * so does `=?`, which opens an RFC 2047 encoded word: mail clients decode `=?utf-8?b?…?=` in a From
 * name into any text (nodemailer sends an ASCII name as is), those characters included. The name is
 * NFKC-normalized first, so fullwidth and small forms (`＜`, `＠`, `﹤`) count as the characters they
 * stand for, and format characters (right-to-left overrides) go too.
 */
function senderName(name: string | null): string | null {
  if (name === null) return null;
  const plain = name.normalize('NFKC').replace(/=\?|[<>@"\\\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, ' ').replace(/\s+/g, ' ').trim();
  return plain === '' ? null : plain;
}
