import type { Queryable } from '../../db/types.js';
import { latestAcceptedStep, USED_STEPS_KEPT } from '../../auth/totp.js';

/*
 * The TOTP replay guard (docs/decisions.md, "MFA enrollment"). totp_last_step is the latest step used;
 * totp_used_steps holds every step used from totp_steps_from on (a day below the latest). A code is
 * taken when its step is later than the latest; or, when the latest lies beyond the last step any
 * process within the skew bound accepts now (only a clock that stepped back leaves it there), when its
 * step is later than every step used up to that bound and not below the record: no step used, before
 * the clock stepped back or since, passes twice. Within normal operation the latest is within the
 * bound and the rule is the first alone. A record some process did not keep (one running an earlier
 * version: the latest step is missing from it) counts from the step after the latest: that one was
 * used and is not in it.
 */
const RECORD_KEPT = 'totp_last_step = ANY (totp_used_steps)';
const steppedFloor = (bound: string) =>
  `CASE WHEN ${RECORD_KEPT} THEN GREATEST(totp_steps_from - 1, (SELECT max(u) FROM unnest(totp_used_steps) AS u WHERE u <= ${bound})) END`;
/** Whether `step` may be taken, `bound` being latestAcceptedStep(now) (a WHERE condition on identities). */
export const totpStepFree = (step: string, bound: string): string =>
  `(totp_last_step IS NULL OR totp_last_step < ${step} OR (totp_last_step > ${bound} AND ${step} > ${steppedFloor(bound)}))`;
/** The SET list that takes `step`: the latest, the record and where it starts. */
export const totpStepTaken = (step: string): string =>
  `totp_last_step = GREATEST(totp_last_step, ${step}),
   totp_steps_from = GREATEST(totp_steps_from, GREATEST(totp_last_step, ${step}) - ${USED_STEPS_KEPT}, CASE WHEN NOT ${RECORD_KEPT} THEN totp_last_step + 1 END),
   totp_used_steps = ARRAY(SELECT u FROM unnest(array_append(totp_used_steps, ${step})) AS u WHERE u >= GREATEST(totp_last_step, ${step}) - ${USED_STEPS_KEPT} ORDER BY u)`;
/** Forgets the record (a new secret, or TOTP off). */
export const TOTP_STEPS_CLEARED = "totp_last_step = NULL, totp_used_steps = '{}', totp_steps_from = NULL";

/** The identity's floor below `bound` (latestAcceptedStep(now)) when its latest step lies beyond it (see above); no row: no identity. */
export async function findSteppedFloor(db: Queryable, identityId: string, bound: number): Promise<number | null | undefined> {
  const { rows } = await db.query<{ floor: number | null }>(
    `SELECT (${steppedFloor('$2::bigint')})::float8 AS floor FROM identities WHERE id = $1`,
    [identityId, bound],
  );
  return rows[0]?.floor;
}

/** Takes a TOTP step for the identity, once: of two uses of one code, exactly one succeeds. */
export async function takeTotpStep(db: Queryable, identityId: string, step: number, now: Date): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE identities SET ${totpStepTaken('$2::bigint')} WHERE id = $1 AND ${totpStepFree('$2::bigint', '$3::bigint')}`,
    [identityId, step, latestAcceptedStep(now)],
  );
  return rowCount === 1;
}

/** Uses up the user's unused recovery code with one of these hashes; false when there is none. */
export async function takeRecoveryCode(db: Queryable, userId: string, hashes: string[], now: Date): Promise<boolean> {
  const { rowCount } = await db.query(
    'UPDATE recovery_codes SET used_at = $3 WHERE id = (SELECT id FROM recovery_codes WHERE user_id = $1 AND code_hash = ANY($2::text[]) AND used_at IS NULL LIMIT 1 FOR UPDATE) AND used_at IS NULL',
    [userId, hashes, now],
  );
  return rowCount === 1;
}

export async function hasUnusedRecoveryCode(db: Queryable, userId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL LIMIT 1', [userId]);
  return rows.length > 0;
}

/** Locks the identity row as a write to it does (FOR NO KEY UPDATE). */
export async function lockIdentity(db: Queryable, identityId: string): Promise<void> {
  await db.query('SELECT 1 FROM identities WHERE id = $1 FOR NO KEY UPDATE', [identityId]);
}

/** Counts an attempt on a pending MFA challenge below `maxAttempts`: the attempts now, or null (spent, expired or void). */
export async function claimChallengeAttempt(db: Queryable, tokenId: string, now: Date, maxAttempts: number): Promise<number | null> {
  const { rows } = await db.query<{ attempts: number }>(
    'UPDATE one_time_tokens SET attempts = attempts + 1 WHERE id = $1 AND used_at IS NULL AND expires_at > $2 AND attempts < $3 RETURNING attempts',
    [tokenId, now, maxAttempts],
  );
  return rows.length === 0 ? null : rows[0]!.attempts;
}

/** Gives back an attempt counted on a challenge. */
export async function releaseChallengeAttempt(db: Queryable, tokenId: string): Promise<void> {
  await db.query('UPDATE one_time_tokens SET attempts = attempts - 1 WHERE id = $1 AND attempts > 0', [tokenId]);
}

/** Voids a challenge not used yet. */
export async function updateChallengeUsed(db: Queryable, tokenId: string, now: Date): Promise<void> {
  await db.query('UPDATE one_time_tokens SET used_at = $2 WHERE id = $1 AND used_at IS NULL', [tokenId, now]);
}
