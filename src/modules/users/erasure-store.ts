import type { Queryable } from '../../db/types.js';
import { ENT_COLUMNS, nextUpdatedAt, type EntitlementRow } from '../entitlements/store.js';
import type { UserRow } from './store.js';

// The erasure cascade's statements (eraseUser, erase-user.ts), run under the locks of lockForErasure.

/** The snapshots of the user's audit events become `redacted` (where there was one). */
export async function redactAuditSnapshots(db: Queryable, id: string, redacted: string): Promise<void> {
  await db.query(`UPDATE audit_events SET before = CASE WHEN before IS NULL THEN NULL ELSE $2::jsonb END, after = CASE WHEN after IS NULL THEN NULL ELSE $2::jsonb END WHERE target_user_id = $1`, [id, redacted]);
}

export interface ErasedMembership {
  organization_id: string;
  role: string;
  membership_status: string;
}

export async function listMemberships(db: Queryable, id: string): Promise<ErasedMembership[]> {
  const { rows: memberships } = await db.query<ErasedMembership>(
    'SELECT organization_id, role, membership_status FROM organization_members WHERE user_id = $1 ORDER BY organization_id',
    [id],
  );
  return memberships;
}

export async function listPersonalGrants(db: Queryable, id: string): Promise<EntitlementRow[]> {
  const { rows: grants } = await db.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.user_id = $1 ORDER BY e.id`, [id]);
  return grants;
}

/** The user's Role assignments but one (`exceptRoleId`, the platform member Role). */
export async function listRoleAssignments(db: Queryable, id: string, exceptRoleId: string): Promise<{ role_id: string; application_id: string | null }[]> {
  const { rows: assignments } = await db.query<{ role_id: string; application_id: string | null }>(
    'SELECT role_id, application_id FROM role_assignments WHERE user_id = $1 AND role_id <> $2 ORDER BY role_id',
    [id, exceptRoleId],
  );
  return assignments;
}

/** Everything the export holds about the user but global Settings, the user row and their mails. */
export async function deleteUserData(db: Queryable, id: string): Promise<void> {
  for (const sql of [
    'DELETE FROM recovery_codes WHERE user_id = $1',
    'DELETE FROM one_time_tokens WHERE user_id = $1',
    'DELETE FROM identities WHERE user_id = $1',
    'DELETE FROM sessions WHERE user_id = $1',
    'DELETE FROM role_assignments WHERE user_id = $1',
    'DELETE FROM organization_members WHERE user_id = $1',
    'DELETE FROM org_seat_limits WHERE user_id = $1',
    'DELETE FROM app_profiles WHERE user_id = $1',
    'DELETE FROM app_settings WHERE user_id = $1',
    'DELETE FROM entitlements WHERE user_id = $1',
    'DELETE FROM access_states WHERE user_id = $1',
    'DELETE FROM profiles WHERE user_id = $1',
  ]) {
    await db.query(sql, [id]);
  }
}

/** The org grants whose member_overrides name the user, locked, in id order. */
export async function lockGrantsNamingMember(db: Queryable, id: string): Promise<EntitlementRow[]> {
  const { rows: scopedBefore } = await db.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE $1 = ANY(e.member_overrides) ORDER BY e.id FOR UPDATE`,
    [id],
  );
  return scopedBefore;
}

/** Those grants without the user in member_overrides: the rows as they are now. */
export async function removeMemberFromOverrides(db: Queryable, id: string, now: Date): Promise<EntitlementRow[]> {
  const { rows: scopedAfter } = await db.query<EntitlementRow>(
    `UPDATE entitlements e SET member_overrides = array_remove(member_overrides, $1), updated_at = ${nextUpdatedAt('$2')} WHERE $1 = ANY(e.member_overrides) RETURNING ${ENT_COLUMNS}`,
    [id, now],
  );
  return scopedAfter;
}

/**
 * The user's own mails, to every address they had; not those of another account that reused the
 * address (mails queued before user_id was recorded: by address, in the user's mode, up to deletion).
 */
export async function deleteUserMails(db: Queryable, user: Pick<UserRow, 'id' | 'email' | 'test_mode' | 'deleted_at'>): Promise<void> {
  await db.query(
    `DELETE FROM emails WHERE user_id = $1
        OR (user_id IS NULL AND lower(to_address) = lower($2) AND test_mode = $3 AND created_at <= COALESCE($4, created_at))`,
    [user.id, user.email, user.test_mode, user.deleted_at],
  );
}

/** The user row becomes a tombstone at address `email`. */
export async function scrubUserRow(db: Queryable, id: string, email: string, now: Date): Promise<void> {
  await db.query(
    `UPDATE users SET email = $2, pending_email = NULL, signup_application_id = NULL, last_login_at = NULL, erased_at = $3, updated_at = $3 WHERE id = $1`,
    [id, email, now],
  );
}

/** The erasure request becomes the record that the erasure was done, without its free-text reason. */
export async function completeErasureRequest(db: Queryable, id: string, now: Date): Promise<void> {
  await db.query(`UPDATE erasure_requests SET status = 'completed', completed_at = $2, reason = NULL WHERE user_id = $1`, [id, now]);
}
