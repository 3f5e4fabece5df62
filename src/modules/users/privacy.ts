import type { Ctx, Deps } from '../../context.js';
import { eachSkippingFailures } from '../../jobs/each.js';
import { inTx, systemCtx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { addSeconds } from '../../clock.js';
import { recordAudit } from '../../audit/record.js';
import { retryAfterSeconds, takeSlidingQuota } from '../../http/counters.js';
import { findUserById, toUser, USER_COLUMNS, type UserRow } from './store.js';
import { eraseUser } from './erase-user.js';
import { lockOrganization, lockUsersForAccess } from '../../access/locks.js';
import { actorRef } from './service.js';
import { lockTargetUser, targetUser } from './access.js';
import { softDeleteUserRow } from './status.js';
import type { ErasureRequest } from './schemas.js';
import { AUDIT_COLUMNS, toAuditEvent, type AuditRow } from '../audit/store.js';
import { PLATFORM_HOT_WINDOW_DAYS, windowStart } from '../audit/service.js';

export const EXPORT_LIMIT_PER_DAY = 5;
export const ERASURE_DELAY_SECONDS = 7 * 24 * 3600;
const iso = (d: Date | null) => d?.toISOString() ?? null;
const isoText = (v: string | null) => (v === null ? null : new Date(v).toISOString());

/** GET /v1/users/{id}/export: the whole bundle; never a hash, secret or token. 5 per user in any rolling 24 hours. */
export async function exportUser(ctx: Ctx, idParam: string) {
  const { user } = await targetUser(ctx, idParam, 'write');
  // A rolling 24 hours (not the calendar day: 5 before midnight and 5 after would pass); Retry-After
  // is when the oldest export of the window leaves it. Refused calls are not counted.
  const quota = await ctx.deps.database
    .scoped('system')
    .transaction((tx) => takeSlidingQuota(tx, `export:${user.id}`, EXPORT_LIMIT_PER_DAY, 86400, ctx.now));
  if (!quota.allowed) {
    throw new ApiError('rate_limited', { message: 'At most 5 exports per user per day.', headers: { 'retry-after': String(retryAfterSeconds(quota.retryAt!, ctx.now)) } });
  }
  return ctx.db.transaction((db) => exportBundle(ctx, db, user.id));
}

async function exportBundle(ctx: Ctx, db: Tx, id: string) {
  const user = await lockExportedUser(db, id);
  const account = await readAccountRows(db, user.id);
  const applications = await readApplicationRows(db, user.id);
  // The user's own trail in hot storage: what GET /v1/audit-events?target_user_id=me returns, oldest first.
  const { rows: audit } = await db.query<AuditRow>(
    `SELECT ${AUDIT_COLUMNS} FROM audit_events e WHERE e.target_user_id = $1 AND e.created_at >= $2 ORDER BY e.created_at, e.id`,
    [user.id, windowStart(ctx, PLATFORM_HOT_WINDOW_DAYS)],
  );
  return {
    exported_at: ctx.now.toISOString(),
    user: toUser(user, ctx.now),
    ...shapeAccount(account),
    applications: shapeApplications(applications),
    audit_events: audit.map(toAuditEvent),
  };
}

/**
 * Read holding the user row FOR KEY SHARE, which the erasure cascade locks FOR UPDATE before it
 * deletes anything: an export that found the soft-deleted user before the cascade and reads after it
 * is 404, as it would be had it begun after it (not a bundle of the old address and half the rest).
 * A sign-in's statement on the user (FOR NO KEY UPDATE) does not wait for it.
 */
async function lockExportedUser(db: Tx, id: string): Promise<UserRow> {
  const { rows: [user] } = await db.query<UserRow>(`SELECT ${USER_COLUMNS} FROM users u WHERE u.id = $1 FOR KEY SHARE OF u`, [id]);
  if (!user || user.erased_at) throw new ApiError('user_not_found');
  return user;
}

/** The user's own rows: profile, settings, identities, sessions, memberships and role assignments. */
async function readAccountRows(db: Tx, userId: string) {
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

/** Each Application the user has an entitlement, an app profile or app settings in, with the three. */
async function readApplicationRows(db: Tx, userId: string) {
  const { rows } = await db.query(
    `SELECT a.application_id,
            (SELECT json_build_object('id', e.id, 'status', e.status, 'source', e.source, 'starts_at', e.starts_at, 'ends_at', e.ends_at)
               FROM entitlements e WHERE e.user_id = $1 AND e.application_id = a.application_id ORDER BY e.created_at DESC LIMIT 1) AS entitlement,
            (SELECT json_build_object('display_handle', ap.display_handle, 'custom', ap.custom, 'updated_at', ap.updated_at)
               FROM app_profiles ap WHERE ap.user_id = $1 AND ap.application_id = a.application_id) AS app_profile,
            COALESCE((SELECT s.overrides FROM app_settings s WHERE s.user_id = $1 AND s.application_id = a.application_id), '{}'::jsonb) AS app_settings
       FROM (SELECT application_id FROM entitlements WHERE user_id = $1
             UNION SELECT application_id FROM app_profiles WHERE user_id = $1
             UNION SELECT application_id FROM app_settings WHERE user_id = $1) a
      ORDER BY a.application_id`,
    [userId],
  );
  return rows;
}

function shapeAccount({ profile, settings, identities, sessions, organizations, roles }: Awaited<ReturnType<typeof readAccountRows>>) {
  return {
    profile: { ...profile, updated_at: iso(profile.updated_at) },
    settings,
    identities: identities.map((i) => ({ method: i.method, mfa_enabled: i.mfa_enabled, last_used_at: iso(i.last_used_at) })),
    sessions: sessions.map((s) => ({ id: s.id, created_at: iso(s.created_at)!, ip_address: s.ip_address, user_agent: s.user_agent })),
    organizations: organizations.map((o) => ({ organization_id: o.organization_id, role: o.role, membership_status: o.membership_status, joined_at: iso(o.joined_at) })),
    roles: roles.map((r) => ({ role_id: r.role_id, application_id: r.application_id, assigned_at: iso(r.assigned_at)! })),
  };
}

/**
 * Timestamps built in SQL (json_build_object) come back as PostgreSQL writes them (+00:00):
 * re-written in the API's one format (ISO 8601 UTC with Z).
 */
function shapeApplications(applications: Awaited<ReturnType<typeof readApplicationRows>>) {
  return applications.map((a) => ({
    ...a,
    entitlement: a.entitlement && { ...a.entitlement, starts_at: isoText(a.entitlement.starts_at), ends_at: isoText(a.entitlement.ends_at) },
    app_profile: a.app_profile && { ...a.app_profile, updated_at: isoText(a.app_profile.updated_at) },
  }));
}

interface ErasureRow {
  user_id: string;
  status: 'scheduled' | 'cancelled' | 'completed';
  requested_at: Date;
  scheduled_for: Date;
}
const toErasure = (r: ErasureRow): ErasureRequest => ({
  user_id: r.user_id,
  status: r.status,
  requested_at: r.requested_at.toISOString(),
  scheduled_for: r.scheduled_for.toISOString(),
});

/** POST /v1/users/{id}/erasure-requests: soft delete now, hard-delete cascade 7 days later; a repeat returns the request. */
export async function requestErasure(ctx: Ctx, idParam: string, reason: string | null): Promise<ErasureRequest> {
  const { user } = await targetUser(ctx, idParam, 'write');
  return ctx.db.transaction(async (tx) => {
    // The user row is locked first: two requests at once (no erasure row yet to lock) run one after
    // the other, and the second returns the first's request.
    const locked = await lockTargetUser(tx, user.id);
    const { rows } = await tx.query<ErasureRow>('SELECT user_id, status, requested_at, scheduled_for FROM erasure_requests WHERE user_id = $1 FOR UPDATE', [user.id]);
    if (rows[0]?.status === 'scheduled') return toErasure(rows[0]);
    await softDeleteUserRow(tx, ctx, locked);
    const by = actorRef(ctx);
    const { rows: saved } = await tx.query<ErasureRow>(
      `INSERT INTO erasure_requests (user_id, status, reason, requested_at, scheduled_for, requested_by_type, requested_by_id)
       VALUES ($1, 'scheduled', $2, $3, $4, $5, $6)
       ON CONFLICT (user_id) DO UPDATE SET status = 'scheduled', reason = EXCLUDED.reason, requested_at = EXCLUDED.requested_at,
         scheduled_for = EXCLUDED.scheduled_for, requested_by_type = EXCLUDED.requested_by_type, requested_by_id = EXCLUDED.requested_by_id,
         cancelled_at = NULL
       RETURNING user_id, status, requested_at, scheduled_for`,
      [user.id, reason, ctx.now, addSeconds(ctx.now, ERASURE_DELAY_SECONDS), by.byType, by.byId],
    );
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.erasure_requested', target: { type: 'user', id: user.id }, targetUserId: user.id, after: toErasure(saved[0]) });
    return toErasure(saved[0]);
  });
}

/** DELETE /v1/users/{id}/erasure-requests/current (users.manage): the user stays soft-deleted. */
export async function cancelErasure(ctx: Ctx, idParam: string): Promise<void> {
  const { user } = await targetUser(ctx, idParam, 'write', { allowSelf: false });
  await ctx.db.transaction(async (tx) => {
    // Part A: "users.manage may cancel it inside the window". Once scheduled_for has passed the cascade
    // is due (the job may not have run yet) and the request can no longer be cancelled.
    const { rowCount } = await tx.query(
      `UPDATE erasure_requests SET status = 'cancelled', cancelled_at = $2 WHERE user_id = $1 AND status = 'scheduled' AND scheduled_for > $2`,
      [user.id, ctx.now],
    );
    if (rowCount !== 1) throw new ApiError('erasure_not_scheduled');
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.erasure_cancelled', target: { type: 'user', id: user.id }, targetUserId: user.id });
  });
}

/**
 * The erasure-cascade job: for each request past its 7 days, clears everything the export holds
 * except global Settings (also memberships and member_overrides), scrubs the user row to a
 * tombstone, and redacts the snapshots of the user's audit events, which persist.
 */
export async function runErasureCascade(deps: Deps): Promise<{ erased: number }> {
  // One user per transaction; a user whose erasure fails does not hold back those due after them.
  const erased = await eachSkippingFailures(deps, 'user_id', (skip, picked) => {
    const now = deps.clock.now();
    return deps.database.scoped('system').transaction(async (tx) => {
      const { rows } = await tx.query<{ user_id: string; test_mode: boolean }>(
        `SELECT r.user_id, u.test_mode FROM erasure_requests r JOIN users u ON u.id = r.user_id
          WHERE r.status = 'scheduled' AND r.scheduled_for <= $1 AND r.user_id <> ALL($2::text[]) ORDER BY r.scheduled_for, r.user_id LIMIT 1`,
        [now, skip],
      );
      const due = rows[0];
      if (!due) return 'none';
      picked(due.user_id);
      await lockForErasure(tx, due.user_id);
      // Read again under the locks: a cancel or a repeated request may have come first.
      const { rowCount } = await tx.query(`SELECT 1 FROM erasure_requests WHERE user_id = $1 AND status = 'scheduled' AND scheduled_for <= $2 FOR UPDATE`, [due.user_id, now]);
      if (rowCount !== 1) return 'gone';
      const user = (await findUserById(tx, due.user_id))!;
      await eraseUser(tx, { ...systemCtx(deps, modeOf(due.test_mode)), db: tx, now }, user);
      return 'done';
    });
  });
  return { erased };
}

/**
 * The cascade changes the user's memberships, personal grants and the org grants naming them, then the
 * user row: it locks them in the order of src/access/locks.ts (Organizations, entitlement rows, the
 * user) before the first change. Deleting the memberships first and writing the user row last
 * deadlocked with a member removal of the same user (Organization, user, membership).
 */
async function lockForErasure(tx: Tx, userId: string): Promise<void> {
  const { rows: orgs } = await tx.query<{ organization_id: string }>('SELECT organization_id FROM organization_members WHERE user_id = $1 ORDER BY organization_id', [userId]);
  for (const { organization_id } of orgs) await lockOrganization(tx, organization_id);
  await tx.query('SELECT 1 FROM entitlements WHERE user_id = $1 OR $1 = ANY(member_overrides) ORDER BY id FOR UPDATE', [userId]);
  await lockUsersForAccess(tx, [userId]);
}
