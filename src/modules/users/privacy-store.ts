import type { Queryable } from '../../db/types.js';
import { USER_COLUMNS, type UserRow } from './store.js';
import { AUDIT_COLUMNS, type AuditRow } from '../audit/store.js';
import { MEMBER_DECISION_SQL } from '../../access/resolve.js';
import { USER_ENTITLEMENTS_SQL } from '../entitlements/list-store.js';

/** The user's own trail from `since`, oldest first: what GET /v1/audit-events?target_user_id=me returns. */
export async function listUserAuditTrail(db: Queryable, userId: string, since: Date): Promise<AuditRow[]> {
  const { rows } = await db.query<AuditRow>(
    `SELECT ${AUDIT_COLUMNS} FROM audit_events e WHERE e.target_user_id = $1 AND e.created_at >= $2 ORDER BY e.created_at, e.id`,
    [userId, since],
  );
  return rows;
}

/** The user's row, held FOR KEY SHARE (the erasure cascade locks it FOR UPDATE first); undefined when there is none. */
export async function holdUserForExport(db: Queryable, id: string): Promise<UserRow | undefined> {
  const { rows: [user] } = await db.query<UserRow>(`SELECT ${USER_COLUMNS} FROM users u WHERE u.id = $1 FOR KEY SHARE OF u`, [id]);
  return user;
}

/** The user's own rows: profile, settings, identities, sessions, memberships and role assignments. */
export async function listAccountRows(db: Queryable, userId: string) {
  const one = async (sql: string) => (await db.query(sql, [userId])).rows;
  const [profile] = await one('SELECT p.user_id, p.display_name, p.avatar_url, p.contact_email, p.contact_phone, s.locale, p.updated_at FROM profiles p JOIN settings s ON s.user_id = p.user_id WHERE p.user_id = $1');
  const [settings] = await one('SELECT theme, timezone, locale, notifications FROM settings WHERE user_id = $1');
  const identities = await one('SELECT method, totp_confirmed_at IS NOT NULL AS mfa_enabled, last_used_at FROM identities WHERE user_id = $1 ORDER BY created_at');
  const sessions = await one('SELECT id, created_at, ip_address, user_agent FROM sessions WHERE user_id = $1 ORDER BY created_at');
  // Pending invitations are data about the user too (joined_at null until accepted).
  const organizations = await one(`SELECT organization_id, role, membership_status, joined_at FROM organization_members WHERE user_id = $1 ORDER BY joined_at NULLS LAST, invited_at`);
  const roles = await one('SELECT role_id, application_id, assigned_at FROM role_assignments WHERE user_id = $1 ORDER BY assigned_at');
  return { profile, settings, identities, sessions, organizations, roles };
}

/**
 * Each Application the user has an entitlement, an app profile or app settings in, with the three. The
 * entitlements are the user's as GET /v1/users/{id}/entitlements lists them: their own rows and the
 * grants of the Organizations they are an active member of (granted_via with the member decision); per
 * Application the latest own row, else the latest Organization grant.
 */
export async function listApplicationRows(db: Queryable, userId: string) {
  const { rows } = await db.query(
    `WITH entitled AS (
       SELECT DISTINCT ON (e.application_id) e.application_id,
              json_build_object('id', e.id, 'status', e.status, 'source', e.source, 'starts_at', e.starts_at, 'ends_at', e.ends_at,
                                'granted_via', CASE WHEN e.organization_id IS NULL THEN NULL
                                                    ELSE json_build_object('organization_id', e.organization_id, 'member_decision', ${MEMBER_DECISION_SQL}) END) AS entitlement
         FROM entitlements e LEFT JOIN organization_members m ON m.organization_id = e.organization_id AND m.user_id = $1
        WHERE ${USER_ENTITLEMENTS_SQL(1)}
        ORDER BY e.application_id, e.user_id IS NULL, e.created_at DESC, e.id DESC)
     SELECT a.application_id, n.entitlement,
            (SELECT json_build_object('display_handle', ap.display_handle, 'custom', ap.custom, 'updated_at', ap.updated_at)
               FROM app_profiles ap WHERE ap.user_id = $1 AND ap.application_id = a.application_id) AS app_profile,
            COALESCE((SELECT s.overrides FROM app_settings s WHERE s.user_id = $1 AND s.application_id = a.application_id), '{}'::jsonb) AS app_settings
       FROM (SELECT application_id FROM entitled
             UNION SELECT application_id FROM app_profiles WHERE user_id = $1
             UNION SELECT application_id FROM app_settings WHERE user_id = $1) a
       LEFT JOIN entitled n ON n.application_id = a.application_id
      ORDER BY a.application_id`,
    [userId],
  );
  return rows;
}

export interface ErasureRow {
  user_id: string;
  status: 'scheduled' | 'cancelled' | 'completed';
  requested_at: Date;
  scheduled_for: Date;
}

/** The user's erasure request, locked until the transaction ends; null when there is none. */
export async function lockErasureRequest(db: Queryable, userId: string): Promise<ErasureRow | null> {
  const { rows } = await db.query<ErasureRow>('SELECT user_id, status, requested_at, scheduled_for FROM erasure_requests WHERE user_id = $1 FOR UPDATE', [userId]);
  return rows[0] ?? null;
}

export interface NewErasureRequest {
  userId: string;
  reason: string | null;
  now: Date;
  scheduledFor: Date;
  byType: string;
  byId: string | null;
}

/** A scheduled erasure request: a new row, or the user's cancelled one scheduled again. */
export async function upsertErasureRequest(db: Queryable, r: NewErasureRequest): Promise<ErasureRow> {
  const { rows: saved } = await db.query<ErasureRow>(
    `INSERT INTO erasure_requests (user_id, status, reason, requested_at, scheduled_for, requested_by_type, requested_by_id)
       VALUES ($1, 'scheduled', $2, $3, $4, $5, $6)
       ON CONFLICT (user_id) DO UPDATE SET status = 'scheduled', reason = EXCLUDED.reason, requested_at = EXCLUDED.requested_at,
         scheduled_for = EXCLUDED.scheduled_for, requested_by_type = EXCLUDED.requested_by_type, requested_by_id = EXCLUDED.requested_by_id,
         cancelled_at = NULL
       RETURNING user_id, status, requested_at, scheduled_for`,
    [r.userId, r.reason, r.now, r.scheduledFor, r.byType, r.byId],
  );
  return saved[0];
}

/** Cancels the user's request if it is scheduled for after `now`; its row count (1: cancelled). */
export async function cancelScheduledErasure(db: Queryable, userId: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE erasure_requests SET status = 'cancelled', cancelled_at = $2 WHERE user_id = $1 AND status = 'scheduled' AND scheduled_for > $2`,
    [userId, now],
  );
  return rowCount;
}

/** The scheduled request due first at `now`, skipping the users in `skip`; null when none is due. */
export async function findDueErasure(db: Queryable, now: Date, skip: string[]): Promise<{ user_id: string; test_mode: boolean } | null> {
  const { rows } = await db.query<{ user_id: string; test_mode: boolean }>(
    `SELECT r.user_id, u.test_mode FROM erasure_requests r JOIN users u ON u.id = r.user_id
          WHERE r.status = 'scheduled' AND r.scheduled_for <= $1 AND r.user_id <> ALL($2::text[]) ORDER BY r.scheduled_for, r.user_id LIMIT 1`,
    [now, skip],
  );
  return rows[0] ?? null;
}

/** Locks the user's request if it is still scheduled and due at `now`; its row count (1: still due). */
export async function lockDueErasure(db: Queryable, userId: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(`SELECT 1 FROM erasure_requests WHERE user_id = $1 AND status = 'scheduled' AND scheduled_for <= $2 FOR UPDATE`, [userId, now]);
  return rowCount;
}

/** The Organizations the user is a member of (in any status), in lock order. */
export async function listMemberOrganizationIds(db: Queryable, userId: string): Promise<{ organization_id: string }[]> {
  const { rows: orgs } = await db.query<{ organization_id: string }>('SELECT organization_id FROM organization_members WHERE user_id = $1 ORDER BY organization_id', [userId]);
  return orgs;
}

/** Locks the user's personal grants and the org grants whose member_overrides name them, in id order. */
export async function lockUserEntitlements(db: Queryable, userId: string): Promise<void> {
  await db.query('SELECT 1 FROM entitlements WHERE user_id = $1 OR $1 = ANY(member_overrides) ORDER BY id FOR UPDATE', [userId]);
}
