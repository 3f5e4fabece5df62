import type { Queryable } from '../../db/types.js';
import type { UserStatus } from './schemas.js';

/**
 * The user's new status: deleted_at set on a delete and cleared otherwise; `ending` (a suspend or a
 * delete) also clears a pending email change, which ends with its link.
 */
export async function updateUserStatus(db: Queryable, id: string, to: UserStatus, now: Date, ending: boolean): Promise<void> {
  await db.query(
    `UPDATE users SET status = $2, updated_at = $3, deleted_at = CASE WHEN $2 = 'deleted' THEN $3::timestamptz ELSE NULL END,
              pending_email = CASE WHEN $4::boolean THEN NULL ELSE pending_email END
        WHERE id = $1`,
    [id, to, now, ending],
  );
}

/** The status of the user's erasure request; null when there is none. */
export async function findErasureStatus(db: Queryable, userId: string): Promise<string | null> {
  const { rows } = await db.query<{ status: string }>('SELECT status FROM erasure_requests WHERE user_id = $1', [userId]);
  return rows[0]?.status ?? null;
}

/** A deleted user's new address before its restore (unverified; no pending change); updated_at moves with the restore. */
export async function setDeletedUserEmail(db: Queryable, id: string, email: string): Promise<void> {
  await db.query('UPDATE users SET email = $2, email_verified = false, pending_email = NULL WHERE id = $1', [id, email]);
}

/** An admin's email change: the new address, unverified; a pending change ends. */
export async function updateUserEmail(db: Queryable, id: string, email: string, now: Date): Promise<void> {
  await db.query('UPDATE users SET email = $2, email_verified = false, pending_email = NULL, updated_at = $3 WHERE id = $1', [id, email, now]);
}

export async function clearPendingEmail(db: Queryable, id: string, now: Date): Promise<void> {
  await db.query('UPDATE users SET pending_email = NULL, updated_at = $2 WHERE id = $1', [id, now]);
}

export async function setPendingEmail(db: Queryable, id: string, email: string, now: Date): Promise<void> {
  await db.query('UPDATE users SET pending_email = $2, updated_at = $3 WHERE id = $1', [id, email, now]);
}

/** Clears each pending_email whose change link is no longer live at `now`; how many. */
export async function clearExpiredPendingEmails(db: Queryable, now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE users u SET pending_email = NULL, updated_at = $1
      WHERE u.pending_email IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM one_time_tokens t WHERE t.user_id = u.id AND t.kind = 'email_change' AND t.used_at IS NULL AND t.expires_at > $1)`,
    [now],
  );
  return rowCount;
}
