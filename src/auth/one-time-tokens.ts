import type { Ctx } from '../context.js';
import type { Queryable, Tx } from '../db/types.js';
import { addSeconds } from '../clock.js';
import { hashSecret, newId, newSecret } from '../ids.js';

export type OneTimeTokenKind = 'email_verification' | 'email_change' | 'password_reset' | 'invitation' | 'mfa_challenge';

export const TOKEN_LIFETIME_SECONDS: Record<OneTimeTokenKind, number> = {
  email_verification: 24 * 3600,
  email_change: 24 * 3600,
  password_reset: 3600,
  invitation: 7 * 24 * 3600,
  mfa_challenge: 300,
};

const PREFIX: Record<OneTimeTokenKind, string> = {
  email_verification: 'vrf_',
  email_change: 'vrf_',
  password_reset: 'pwr_',
  invitation: 'inv_',
  mfa_challenge: 'mfa_',
};

export interface OneTimeTokenRow {
  id: string;
  kind: OneTimeTokenKind;
  user_id: string;
  test_mode: boolean;
  data: Record<string, unknown>;
  attempts: number;
  expires_at: Date;
  used_at: Date | null;
}

/**
 * Tokens mailed to a user's address: whoever follows one proves control of that address (verify,
 * email change) or gets it marked verified (reset, invitation: which also sets the password). When
 * the address changes they must die with it, or a link mailed to the old address would verify, or
 * undo, the new one.
 */
const ADDRESS_BOUND: OneTimeTokenKind[] = ['email_verification', 'email_change', 'password_reset', 'invitation'];

/** Voids the user's outstanding tokens of `kinds`; with `organizationId` (null: none) only those issued for it. */
async function voidTokens(tx: Tx, userId: string, kinds: OneTimeTokenKind[], now: Date, organizationId?: string | null): Promise<void> {
  const forOrganization = organizationId === undefined ? '' : `AND (data->>'organization_id') IS NOT DISTINCT FROM $4::text`;
  await tx.query(
    `UPDATE one_time_tokens SET used_at = $3 WHERE user_id = $1 AND kind = ANY($2::text[]) AND used_at IS NULL ${forOrganization}`,
    organizationId === undefined ? [userId, kinds, now] : [userId, kinds, now, organizationId],
  );
}

/** Voids the user's outstanding address-bound tokens; call in the transaction that changes the email. */
export const voidAddressTokens = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ADDRESS_BOUND, now);

/** Voids the user's pending email change links (the change was withdrawn). */
export const voidEmailChangeTokens = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ['email_change'], now);

/**
 * Voids the user's pending MFA challenges and password reset links; call in the transaction that sets
 * a new password, so a challenge won with the old password cannot start a session after the sessions
 * were ended, and a reset link mailed before the change cannot undo it.
 */
export const voidPasswordTokens = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ['mfa_challenge', 'password_reset'], now);

/**
 * Voids the user's password reset and email change links; call when the account is suspended or
 * deleted, so a link mailed before does not work while it is, nor again after a reactivation or
 * restore. (A pending MFA challenge stays: it still answers 403 account_suspended while the user is
 * suspended; voidMfaChallenges ends it at the reactivation.)
 */
export const voidAccountLinks = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ['password_reset', 'email_change'], now);

/**
 * Voids every invitation link of the user, the account's and each Organization's; call in the
 * transaction that ends the user's `invited` status (accepted, set active, deleted), so no link of an
 * ended invitation is mailed (the relay sends a mail only while its link works) or opens anything.
 */
export const voidInvitations = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ['invitation'], now);

/**
 * Voids the user's pending MFA challenges; call when a suspended or deleted user becomes active, so
 * a sign-in whose password step came before the suspension or delete (which ended every session)
 * does not start a session after it; and when TOTP is turned off (disable, support reset), so a
 * challenge that can no longer be met does not come back to life with a TOTP turned on again.
 */
export const voidMfaChallenges = (tx: Tx, userId: string, now: Date): Promise<void> => voidTokens(tx, userId, ['mfa_challenge'], now);

/**
 * Voids the link an Organization's invitation mailed to an invited user; call when the pending
 * membership is withdrawn, so the withdrawn invitation no longer opens an account (nor is its
 * unsent mail delivered). Other Organizations' links and an account invitation stay.
 */
export const voidOrganizationInvitation = (tx: Tx, userId: string, organizationId: string, now: Date): Promise<void> =>
  voidTokens(tx, userId, ['invitation'], now, organizationId);

/**
 * An Organization's invitation "never expires" (Part B): its link lives as long as the user stays
 * invited (accepting any invitation makes every other one invalid), 100 years in the table.
 */
export const ORG_INVITATION_LIFETIME_SECONDS = 100 * 365 * 24 * 3600;

/**
 * Issues a single-use token (stored as a hash) and returns the secret to mail or return once.
 * `replacePrevious` voids the user's outstanding tokens of the kind issued for the same
 * Organization (data.organization_id), or for none: an account invitation never voids an
 * Organization's link, nor one Organization's link another's.
 */
export async function issueOneTimeToken(
  tx: Tx,
  ctx: Ctx,
  t: { kind: OneTimeTokenKind; userId: string; data?: Record<string, unknown>; replacePrevious?: boolean; lifetimeSeconds?: number },
): Promise<string> {
  const organizationId = typeof t.data?.organization_id === 'string' ? t.data.organization_id : null;
  if (t.replacePrevious) await voidTokens(tx, t.userId, [t.kind], ctx.now, organizationId);
  const token = newSecret(PREFIX[t.kind]);
  await tx.query(
    `INSERT INTO one_time_tokens (id, kind, token_hash, user_id, test_mode, data, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [newId('idn'), t.kind, hashSecret(token), t.userId, ctx.mode === 'test', JSON.stringify(t.data ?? {}), ctx.now, addSeconds(ctx.now, t.lifetimeSeconds ?? TOKEN_LIFETIME_SECONDS[t.kind])],
  );
  return token;
}

/** Reads a live token without using it up (to learn its mode and user). */
export async function peekOneTimeToken(db: Queryable, kinds: OneTimeTokenKind[], token: string, now: Date): Promise<OneTimeTokenRow | null> {
  const { rows } = await db.query<OneTimeTokenRow>(
    `SELECT id, kind, user_id, test_mode, data, attempts, expires_at, used_at FROM one_time_tokens
      WHERE token_hash = $1 AND kind = ANY($2::text[]) AND used_at IS NULL AND expires_at > $3`,
    [hashSecret(token), kinds, now],
  );
  return rows[0] ?? null;
}

/** Uses a token up atomically: of two concurrent consumers exactly one gets the row. */
export async function consumeOneTimeToken(tx: Tx, id: string, now: Date): Promise<boolean> {
  const { rowCount } = await tx.query('UPDATE one_time_tokens SET used_at = $2 WHERE id = $1 AND used_at IS NULL AND expires_at > $2', [id, now]);
  return rowCount === 1;
}
