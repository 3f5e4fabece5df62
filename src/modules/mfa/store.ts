import type { Queryable } from '../../db/types.js';
import { TOTP_STEPS_CLEARED, totpStepFree, totpStepTaken } from '../auth/login.js';

/** The TOTP enrollment state of an identity, as a support reset or a disable decides on it. */
export interface TotpState {
  totp_confirmed_at: Date | null;
  totp_pending_secret: string | null;
}

/**
 * Sets a new pending secret (sealed) only while TOTP is still off, forgetting the steps the previous
 * one took; the number of identities changed (0 or 1).
 */
export async function updatePendingTotpSecret(db: Queryable, identityId: string, sealedSecret: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE identities SET totp_pending_secret = $2, ${TOTP_STEPS_CLEARED}, updated_at = $3 WHERE id = $1 AND totp_confirmed_at IS NULL`,
    [identityId, sealedSecret, now],
  );
  return rowCount;
}

/**
 * Takes `step` of the pending secret, once, while that secret is still the pending one and TOTP is
 * off; `bound` is latestAcceptedStep(now). The number of identities changed (0 or 1).
 */
export async function takePendingTotpStep(db: Queryable, identityId: string, step: number, pendingSecret: string, bound: number): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE identities SET ${totpStepTaken('$2::bigint')}
      WHERE id = $1 AND totp_pending_secret = $3 AND totp_confirmed_at IS NULL AND ${totpStepFree('$2::bigint', '$4::bigint')}`,
    [identityId, step, pendingSecret, bound],
  );
  return rowCount;
}

/** Turns TOTP on with the pending secret while it is still the pending one; the number of identities changed (0 or 1). */
export async function updateTotpConfirmed(db: Queryable, identityId: string, now: Date, step: number, pendingSecret: string): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE identities SET totp_secret = totp_pending_secret, totp_pending_secret = NULL, totp_confirmed_at = $2,
              totp_last_step = GREATEST(totp_last_step, $3), updated_at = $2
        WHERE id = $1 AND totp_pending_secret = $4 AND totp_confirmed_at IS NULL`,
    [identityId, now, step, pendingSecret],
  );
  return rowCount;
}

export async function lockTotpState(db: Queryable, identityId: string): Promise<TotpState | undefined> {
  const { rows } = await db.query<TotpState>(
    'SELECT totp_confirmed_at, totp_pending_secret FROM identities WHERE id = $1 FOR UPDATE',
    [identityId],
  );
  return rows[0];
}

/** TOTP off: no secret, pending or confirmed, and no record of the steps used. */
export async function updateTotpOff(db: Queryable, identityId: string, now: Date): Promise<void> {
  await db.query(
    `UPDATE identities SET totp_secret = NULL, totp_pending_secret = NULL, totp_confirmed_at = NULL, ${TOTP_STEPS_CLEARED}, updated_at = $2
      WHERE id = $1`,
    [identityId, now],
  );
}

export async function deleteRecoveryCodes(db: Queryable, userId: string): Promise<void> {
  await db.query('DELETE FROM recovery_codes WHERE user_id = $1', [userId]);
}

export async function insertRecoveryCode(db: Queryable, id: string, userId: string, codeHash: string, now: Date): Promise<void> {
  await db.query('INSERT INTO recovery_codes (id, user_id, code_hash, created_at) VALUES ($1, $2, $3, $4)', [id, userId, codeHash, now]);
}
