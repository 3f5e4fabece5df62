import { isDeepStrictEqual } from 'node:util';
import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { recordAudit } from '../../audit/record.js';
import { ApiError, invalidField } from '../../errors.js';
import { assertNoReadOnlyFields, mergeCustom } from '../../http/patch.js';
import { accessKey, resolveAccess } from '../../access/resolve.js';
import { confinedApp, lockTargetUser, targetUser } from '../users/access.js';
import { findApplicationRow } from '../applications/store.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import { findLiveUser, type UserRow } from '../users/store.js';
import { resolveUserId } from '../users/service.js';
import type { Queryable } from '../../db/types.js';
import { findAppProfile, upsertAppProfile, type AppProfileRow } from './store.js';
import { APP_PROFILE_READ_ONLY, type AppProfile, type PatchAppProfileBody } from './schemas.js';

export const CUSTOM_MAX_BYTES = 16 * 1024;

/**
 * AppProfile and AppSettings callers: the user themself, the Application's own key (no extra permission, any live user; another
 * Application's key gets 404), or users.manage. Self and the app key need the user's access to be active (403
 * entitlement_required); users.manage is exempt.
 */
export async function authorizeAppUserData(ctx: Ctx, idParam: string, appId: string) {
  const key = confinedApp(ctx);
  if (key && key !== appId) throw new ApiError('application_not_found');
  const app = await findApplicationRow(ctx.db, appId);
  if (!app) throw new ApiError('application_not_found');
  const manage = hasPermission(ctx.actor, 'users.manage') && !key;
  // The own key reaches every live user: one without active access (no path at all included) is
  // 403 entitlement_required, as the rule for the app key says, not 404.
  const { user, self } = key === appId ? { user: await liveUser(ctx, idParam), self: false } : await targetUser(ctx, idParam, 'read');
  // A users.list holder sees the user but not its per-Application data: 403, as for its Settings
  // and export (docs/decisions.md "403 or 404"); anyone who cannot see the user got 404 above.
  if (!self && !manage && key !== appId) throw new ApiError('forbidden', { details: { required_permission: 'users.manage' } });
  if (!manage) await assertActiveAccess(ctx.db, ctx, user.id, app.id);
  return { user, app, self };
}

/** Self and the app key: the user's access to the Application must be active, else 403 entitlement_required. */
async function assertActiveAccess(db: Queryable, ctx: Ctx, userId: string, appId: string): Promise<void> {
  const access = (await resolveAccess(db, [userId], ctx.now, [appId])).get(accessKey(userId, appId));
  if (!access?.allowed) throw new ApiError('entitlement_required', { details: { entitlement_status: access?.entitlement_status ?? 'none' } });
}

/**
 * Locks the user before an AppProfile or AppSettings write (the row may not exist yet, so the user is
 * the lock) and reads it again under the lock: an erasure cascade, or a soft delete, that committed
 * while the write waited is seen. An erased user is 404 user_not_found for everyone, so the write does
 * not bring back the data the cascade removed (nor an audit row holding it); a soft-deleted one is
 * 404 to all but users.manage, as when the write began. For self and the app key the user's access is
 * resolved again too: every access change locks the users it changes (withAccessFlips), so a revoke,
 * a suspension or a membership removal committed while the write waited is 403 entitlement_required.
 */
export async function lockUserForAppData(tx: Queryable, ctx: Ctx, userId: string, appId: string): Promise<void> {
  const user = await lockTargetUser(tx, userId);
  const manage = hasPermission(ctx.actor, 'users.manage') && !confinedApp(ctx);
  if (user.status === 'deleted' && !manage) throw new ApiError('user_not_found');
  if (!manage) await assertActiveAccess(tx, ctx, userId, appId);
}

async function liveUser(ctx: Ctx, idParam: string): Promise<UserRow> {
  const user = await findLiveUser(ctx.db, resolveUserId(ctx, idParam));
  if (!user) throw new ApiError('user_not_found');
  return user;
}

type Row = AppProfileRow;

async function load(ctx: Ctx, userId: string, appId: string): Promise<{ row: Row | null; displayName: string }> {
  const r = await findAppProfile(ctx.db, userId, appId);
  return { row: r && r.updated_at ? r : null, displayName: r?.display_name ?? '' };
}

const shape = (userId: string, appId: string, row: Row | null, displayName: string): AppProfile => ({
  user_id: userId,
  application_id: appId,
  display_handle: row?.display_handle ?? null,
  effective_display_name: row?.display_handle ?? displayName,
  custom: row?.custom ?? {},
  updated_at: row?.updated_at.toISOString() ?? null,
});

/** GET: without a record, defaults and nothing written. */
export async function getAppProfile(ctx: Ctx, idParam: string, appId: string): Promise<AppProfile> {
  const { user, app } = await authorizeAppUserData(ctx, idParam, appId);
  const { row, displayName } = await load(ctx, user.id, app.id);
  return shape(user.id, app.id, row, displayName);
}

/** PATCH: the first one creates the record; custom merges one level deep (null removes a key), at most 16 KB. */
export async function patchAppProfile(ctx: Ctx, idParam: string, appId: string, body: PatchAppProfileBody): Promise<AppProfile> {
  const { user, app, self } = await authorizeAppUserData(ctx, idParam, appId);
  assertNoReadOnlyFields(body, APP_PROFILE_READ_ONLY);
  return ctx.db.transaction(async (tx) => {
    // An AppProfile is the Application's Tenant's data: unchanged while that Tenant is migrating.
    await assertAppTenantWritable(tx, app.id);
    // The row may not exist yet: the user is locked instead (as for AppSettings), so a concurrent
    // PATCH's custom keys are merged into, not overwritten.
    await lockUserForAppData(tx, ctx, user.id, app.id);
    const c = { ...ctx, db: tx };
    const current = await load(c, user.id, app.id);
    const { row } = current;
    const custom = body.custom ? mergeCustom(row?.custom ?? {}, body.custom) : row?.custom ?? {};
    if (Buffer.byteLength(JSON.stringify(custom)) > CUSTOM_MAX_BYTES) {
      throw invalidField('custom', 'must serialize to at most 16 KB');
    }
    const handle = 'display_handle' in body ? body.display_handle ?? null : row?.display_handle ?? null;
    // The first PATCH creates the record; later ones that change nothing write nothing (no audit row,
    // updated_at kept), as for the Profile.
    if (row && handle === row.display_handle && isDeepStrictEqual(custom, row.custom)) return shape(user.id, app.id, row, current.displayName);
    await upsertAppProfile(tx, user.id, app.id, handle, JSON.stringify(custom), ctx.now);
    const after = await load(c, user.id, app.id);
    const profile = shape(user.id, app.id, after.row, after.displayName);
    // As for the Profile: a self-service change writes no audit event; anyone else's (users.manage, the
    // Application's own key) writes profile.updated.
    if (!self) {
      await recordAudit(tx, inTx(ctx, tx), {
        action: 'profile.updated',
        target: { type: 'app_profile', id: `${user.id}:${app.id}` },
        targetUserId: user.id,
        applicationId: app.id,
        before: shape(user.id, app.id, current.row, current.displayName),
        after: profile,
      });
    }
    return profile;
  });
}
