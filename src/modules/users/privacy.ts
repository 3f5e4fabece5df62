import type { Ctx, Deps } from '../../context.js';
import { eachSkippingFailures } from '../../jobs/each.js';
import { inTx, systemCtx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { addSeconds } from '../../clock.js';
import { recordAudit } from '../../audit/record.js';
import { retryAfterSeconds, takeSlidingQuota } from '../../http/counters.js';
import { findUserById, lockUser, toUser, type UserRow } from './store.js';
import { eraseUser } from './erase-user.js';
import { lockOrganization } from '../../access/locks.js';
import { actorRef } from './service.js';
import { holdAccountRight, lockAccount, targetUser } from './access.js';
import { softDeleteUserRow } from './status.js';
import type { ErasureRequest } from './schemas.js';
import { toAuditEvent } from '../audit/store.js';
import { PLATFORM_HOT_WINDOW_DAYS, windowStart } from '../audit/service.js';
import {
  cancelScheduledErasure, findDueErasure, holdUserForExport, listAccountRows, listApplicationRows, listMemberOrganizationIds, listUserAuditTrail,
  lockDueErasure, lockErasureRequest, lockUserEntitlements, upsertErasureRequest, type ErasureRow,
} from './privacy-store.js';

export const EXPORT_LIMIT_PER_DAY = 5;
export const ERASURE_DELAY_SECONDS = 7 * 24 * 3600;
const iso = (d: Date | null) => d?.toISOString() ?? null;
const isoText = (v: string | null) => (v === null ? null : new Date(v).toISOString());

/** GET /v1/users/{id}/export: the whole bundle; never a hash, secret or token. 5 per user in any rolling 24 hours. */
export async function exportUser(ctx: Ctx, idParam: string) {
  const { user, rightMayMove } = await targetUser(ctx, idParam, 'write');
  // A rolling 24 hours (not the calendar day: 5 before midnight and 5 after would pass); Retry-After
  // is when the oldest export of the window leaves it. The call is counted in the export's
  // transaction: a refused call, or one that fails reading the bundle, is not.
  return ctx.db.transaction(async (tx) => {
    await holdAccountRight(tx, ctx, user.id, rightMayMove);
    const quota = await takeSlidingQuota(tx, `export:${user.id}`, EXPORT_LIMIT_PER_DAY, 86400, ctx.now);
    if (!quota.allowed) {
      throw new ApiError('rate_limited', { message: 'At most 5 exports per user per day.', headers: { 'retry-after': String(retryAfterSeconds(quota.retryAt!, ctx.now)) } });
    }
    return exportBundle(ctx, tx, user.id);
  });
}

async function exportBundle(ctx: Ctx, db: Tx, id: string) {
  const user = await lockExportedUser(db, id);
  const account = await listAccountRows(db, user.id);
  const applications = await listApplicationRows(db, user.id);
  // The user's own trail in hot storage: what GET /v1/audit-events?target_user_id=me returns, oldest first.
  const audit = await listUserAuditTrail(db, user.id, windowStart(ctx, PLATFORM_HOT_WINDOW_DAYS));
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
  const user = await holdUserForExport(db, id);
  if (!user || user.erased_at) throw new ApiError('user_not_found');
  return user;
}

function shapeAccount({ profile, settings, identities, sessions, organizations, roles }: Awaited<ReturnType<typeof listAccountRows>>) {
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
function shapeApplications(applications: Awaited<ReturnType<typeof listApplicationRows>>) {
  return applications.map((a) => ({
    ...a,
    entitlement: a.entitlement && { ...a.entitlement, starts_at: isoText(a.entitlement.starts_at), ends_at: isoText(a.entitlement.ends_at) },
    app_profile: a.app_profile && { ...a.app_profile, updated_at: isoText(a.app_profile.updated_at) },
  }));
}

const toErasure = (r: ErasureRow): ErasureRequest => ({
  user_id: r.user_id,
  status: r.status,
  requested_at: r.requested_at.toISOString(),
  scheduled_for: r.scheduled_for.toISOString(),
});

/** POST /v1/users/{id}/erasure-requests: soft delete now, hard-delete cascade 7 days later; a repeat returns the request. */
export async function requestErasure(ctx: Ctx, idParam: string, reason: string | null): Promise<ErasureRequest> {
  const { user, rightMayMove } = await targetUser(ctx, idParam, 'write');
  return ctx.db.transaction(async (tx) => {
    // The user row is locked first: two requests at once (no erasure row yet to lock) run one after
    // the other, and the second returns the first's request.
    const locked = await lockAccount(tx, ctx, user.id, rightMayMove);
    const current = await lockErasureRequest(tx, user.id);
    if (current?.status === 'scheduled') return toErasure(current);
    await softDeleteUserRow(tx, ctx, locked);
    const by = actorRef(ctx);
    const saved = await upsertErasureRequest(tx, {
      userId: user.id, reason, now: ctx.now, scheduledFor: addSeconds(ctx.now, ERASURE_DELAY_SECONDS), byType: by.byType, byId: by.byId,
    });
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.erasure_requested', target: { type: 'user', id: user.id }, targetUserId: user.id, after: toErasure(saved) });
    return toErasure(saved);
  });
}

/** DELETE /v1/users/{id}/erasure-requests/current (users.manage): the user stays soft-deleted. */
export async function cancelErasure(ctx: Ctx, idParam: string): Promise<void> {
  const { user } = await targetUser(ctx, idParam, 'write', { allowSelf: false });
  await ctx.db.transaction(async (tx) => {
    // Part A: "users.manage may cancel it inside the window". Once scheduled_for has passed the cascade
    // is due (the job may not have run yet) and the request can no longer be cancelled.
    if ((await cancelScheduledErasure(tx, user.id, ctx.now)) !== 1) throw new ApiError('erasure_not_scheduled');
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
      const due = await findDueErasure(tx, now, skip);
      if (!due) return 'none';
      picked(due.user_id);
      await lockForErasure(tx, due.user_id);
      // Read again under the locks: a cancel or a repeated request may have come first.
      if ((await lockDueErasure(tx, due.user_id, now)) !== 1) return 'gone';
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
 * deadlocked with a member removal of the same user (Organization, user, membership). The list is read
 * before the locks, once: no membership appears meanwhile, as the user stays deleted while the request is
 * scheduled and no membership write takes a deleted user (an add by user_id reads them again under their lock).
 */
async function lockForErasure(tx: Tx, userId: string): Promise<void> {
  const orgs = await listMemberOrganizationIds(tx, userId);
  for (const { organization_id } of orgs) await lockOrganization(tx, organization_id);
  await lockUserEntitlements(tx, userId);
  // The user FOR UPDATE, where other access changes take FOR NO KEY UPDATE (lockUsersForAccess): an
  // export reading the bundle holds the row FOR KEY SHARE (holdUserForExport), which only FOR UPDATE
  // waits for, so the cascade erases nothing under an export under way.
  await lockUser(tx, userId);
}
