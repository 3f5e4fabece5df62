import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { issueOneTimeToken } from '../../auth/one-time-tokens.js';
import { enqueueMail } from '../../mail/outbox.js';
import { takeSlidingQuota } from '../../http/counters.js';
import { findApprovedEmailFromName, lockUser, type UserRow } from './store.js';

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
 * The user an unauthenticated re-send (signup's, email/verify/resend, password/forgot) found by
 * email before its transaction, locked and read again, as a status or email change takes them (the
 * user, then its links); null when their status or address changed meanwhile. A mail decided on the
 * earlier read would carry a live link to an address the account has left (accepting it would open
 * the account at its new address), or a link for a user no longer invited.
 */
export async function lockUnchanged(tx: Tx, found: UserRow): Promise<UserRow | null> {
  const user = await lockUser(tx, found.id);
  return user && user.status === found.status && user.email === found.email ? user : null;
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
  return senderName(await findApprovedEmailFromName(tx, applicationId));
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
