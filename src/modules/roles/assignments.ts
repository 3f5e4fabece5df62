import type { Ctx } from '../../context.js';
import { hasPermission, inTx, rightMayHaveMoved } from '../../context.js';
import type { Queryable, Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { emit } from '../../outbox/emit.js';
import { resolveAccess } from '../../access/resolve.js';
import { checkAccessForCaller } from '../../access/check.js';
import { targetUser, confinedApp, holdsSuperadmin } from '../users/access.js';
import { actorRef, MEMBER_ROLE_ID, resolveUserId, SUPERADMIN_ROLE_ID } from '../users/service.js';
import { findLiveUser, holdLiveUser } from '../users/store.js';
import { findApplicationRow } from '../applications/store.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import { assertMayManageAppRoles } from './service.js';
import {
  deleteAssignment, findAssignment, findRole, insertAssignment, listAssignments, listDefaultRoleApplications, lockRoleKeyShare,
  type AssignmentRow, type RoleRow,
} from './store.js';
import type { Assignment, EffectivePermissions } from './schemas.js';

const toAssignment = (r: AssignmentRow): Assignment => ({
  user_id: r.user_id,
  role_id: r.role_id,
  application_id: r.application_id,
  assigned_at: r.assigned_at.toISOString(),
  assigned_by: r.assigned_by_type ? { type: r.assigned_by_type, id: r.assigned_by_id } : null,
  implicit: false,
});

const APP_CONFINED_PERMISSIONS = ['entitlements.manage', 'users.list', 'roles.manage', 'audit.view'];

/**
 * Implicit default_app_role rows: every user with active access holds the Application's default Role.
 * From the user's own access paths to the Applications among them with a default Role: the work grows
 * with the user's Entitlements, not with the platform's Applications.
 */
async function implicitRows(db: Queryable, userId: string, now: Date, appFilter: string | null): Promise<Assignment[]> {
  const access = await resolveAccess(db, [userId], now, appFilter ? [appFilter] : null);
  const allowed = [...access.values()].filter((a) => a.allowed).map((a) => a.application_id);
  if (!allowed.length) return [];
  const rows = await listDefaultRoleApplications(db, allowed);
  return rows.map((a) => ({ user_id: userId, role_id: `role_${a.slug}_${a.default_app_role}`, application_id: a.id, assigned_at: null, assigned_by: null, implicit: true }));
}

/** GET /v1/users/{id}/roles: self, roles.manage, users.list, or app-confined (its own Application's rows). */
export async function listUserRoles(ctx: Ctx, idParam: string, applicationId: string | undefined) {
  const app = confinedApp(ctx);
  // "App-confined": an app-scoped key holding any of the four confined permissions reads the rows of
  // its own Application for users with an access path to it.
  const confined = app && APP_CONFINED_PERMISSIONS.some((p) => hasPermission(ctx.actor, p)) ? app : undefined;
  const { user } = await targetUser(ctx, idParam, 'read', { readers: ['users.list', 'roles.manage'], ownKeyApp: confined });
  const filter = app ?? applicationId ?? null;
  const rows = await listAssignments(ctx.db, user.id, filter);
  const explicit = rows.map(toAssignment);
  // An implicit row only where the default Role is not also assigned explicitly: one row per Role.
  const held = new Set(explicit.map((a) => `${a.application_id}:${a.role_id}`));
  const implicit = (await implicitRows(ctx.db, user.id, ctx.now, filter)).filter((a) => !held.has(`${a.application_id}:${a.role_id}`));
  const data = [...explicit, ...implicit];
  return { data, page: { next_cursor: null, has_more: false } };
}

/**
 * Assignment rights: a platform Role needs platform roles.manage and every permission it grants
 * (superadmin only by a superadmin); an app Role needs roles.manage, the owner, or the Application's
 * own key with roles.manage (another Application's Role: 403 role_scope_mismatch).
 */
async function assertMayAssign(ctx: Ctx, role: RoleRow): Promise<void> {
  const key = confinedApp(ctx);
  if (role.scope === 'platform') {
    if (key) throw new ApiError('role_scope_mismatch');
    if (!hasPermission(ctx.actor, 'roles.manage')) throw new ApiError('forbidden', { details: { required_permission: 'roles.manage' } });
    const missing = role.permissions.filter((p) => !hasPermission(ctx.actor, p));
    if (missing.length) throw new ApiError('role_escalation_forbidden', { details: { permissions: missing } });
    if (role.id === SUPERADMIN_ROLE_ID) {
      const isSuper = ctx.actor.type === 'user' && (await holdsSuperadmin(ctx.db, ctx.actor.userId));
      if (!isSuper) throw new ApiError('role_escalation_forbidden', { message: 'Only a superadmin may assign superadmin.' });
    }
    return;
  }
  if (key && key !== role.scope) throw new ApiError('role_scope_mismatch');
  const app = (await findApplicationRow(ctx.db, role.scope))!;
  await assertMayManageAppRoles(ctx, app, 'role_not_found');
}

/**
 * An app Role's assignment in its transaction: the Application's Tenant writable (its check holds the
 * Application FOR KEY SHARE, which an ownership move waits for), then the caller's right read again
 * under that lock, so an owner who lost the Application meanwhile is refused as a stranger is.
 */
async function assertAppRightHeld(tx: Tx, ctx: Ctx, applicationId: string): Promise<void> {
  await assertAppTenantWritable(tx, applicationId);
  if (!rightMayHaveMoved(ctx.actor, 'roles.manage')) return;
  const app = await findApplicationRow(tx, applicationId);
  if (app) await assertMayManageAppRoles(inTx(ctx, tx), app, 'role_not_found');
}

async function assignable(ctx: Ctx, idParam: string, roleId: string) {
  const role = await findRole(ctx.db, roleId);
  if (!role) throw new ApiError('role_not_found');
  await assertMayAssign(ctx, role);
  // Anyone allowed to assign may target any live user (assigning without access grants nothing);
  // an app-confined key still reaches only users with an access path to its Application.
  if (confinedApp(ctx)) return { role, user: (await targetUser(ctx, idParam, 'read', { ownKeyApp: role.scope })).user };
  const user = await findLiveUser(ctx.db, resolveUserId(ctx, idParam));
  if (!user) throw new ApiError('user_not_found');
  return { role, user };
}

/** POST /v1/users/{id}/roles/{roleId}: 201, or 200 when already held (no event). */
export async function assignRole(ctx: Ctx, idParam: string, roleId: string): Promise<{ created: boolean; assignment: Assignment }> {
  const { role, user } = await assignable(ctx, idParam, roleId);
  return ctx.db.transaction(async (tx) => {
    const by = actorRef(ctx);
    const applicationId = role.scope === 'platform' ? null : role.scope;
    // An app Role's assignments are its Application's Tenant's data: paused while it is migrating.
    if (applicationId) await assertAppRightHeld(tx, ctx, applicationId);
    // The Role may have been deleted since it was read: a concurrent DELETE /v1/roles either waits
    // for this assignment (and answers role_in_use) or has committed (and the Role is gone here).
    const present = await lockRoleKeyShare(tx, role.id);
    if (present !== 1) throw new ApiError('role_not_found');
    // The user as they are now: a soft delete or the test purge that committed since the user was read
    // left no one to assign to (gone: a foreign-key violation, 500). A platform Role's holds them FOR
    // UPDATE: a write to their account under way (holdAccountRight) commits first, or reads the
    // caller's right to it after this assignment commits.
    if (!(await holdLiveUser(tx, user.id, !applicationId))) throw new ApiError('user_not_found');
    // Held already: 200 with the assignment as it is. A DELETE of it that commits between the
    // conflict and the read leaves nothing to read: the user holds the Role no more, so insert again.
    for (;;) {
      const inserted = await insertAssignment(tx, user.id, role.id, applicationId, ctx.now, by.byType, by.byId);
      if (inserted) {
        await announceRoleChange(tx, inTx(ctx, tx), 'role.assigned', { user_id: user.id, role_id: role.id, application_id: applicationId });
        return { created: true, assignment: toAssignment(inserted) };
      }
      const existing = await findAssignment(tx, user.id, role.id);
      if (existing) return { created: false, assignment: toAssignment(existing) };
    }
  });
}

/** DELETE /v1/users/{id}/roles/{roleId}: idempotent; an event only when something was removed. */
export async function removeRole(ctx: Ctx, idParam: string, roleId: string): Promise<void> {
  const { role, user } = await assignable(ctx, idParam, roleId);
  if (role.id === MEMBER_ROLE_ID) throw new ApiError('member_role_required');
  await ctx.db.transaction(async (tx) => {
    if (role.scope !== 'platform') await assertAppRightHeld(tx, ctx, role.scope);
    const rowCount = await deleteAssignment(tx, user.id, role.id);
    if (rowCount !== 1) return;
    await announceRoleChange(tx, inTx(ctx, tx), 'role.removed', { user_id: user.id, role_id: role.id, application_id: role.scope === 'platform' ? null : role.scope });
  });
}

/**
 * An assignment created or deleted (Part B Resource events `role.assigned`, `role.removed`): its audit
 * row and webhook event, from the API, the bootstrap admin's superadmin Role, the erasure cascade and
 * the test purge. The platform `member` Role is part of the user record (created with `user.created`,
 * removed only with the user: `user.erased`, the purge) and is not announced on its own.
 */
export async function announceRoleChange(
  tx: Tx,
  ctx: Ctx,
  action: 'role.assigned' | 'role.removed',
  data: { user_id: string; role_id: string; application_id: string | null },
): Promise<void> {
  const snapshot = action === 'role.assigned' ? { after: data } : { before: data };
  await recordAudit(tx, ctx, { action, target: { type: 'role', id: data.role_id }, targetUserId: data.user_id, applicationId: data.application_id, ...snapshot });
  await emit(tx, ctx, { type: action, applicationId: data.application_id, data });
}

/**
 * GET /v1/users/{id}/apps/{appId}/effective-permissions: the live access check, in one round trip
 * after authentication. Always 200 for a caller who may ask (the Application's own key may ask about
 * any live user: one without a path is allowed false with entitlement_status none). effective_permissions holds only the
 * Application's app.<slug>.* keys from explicit and implicit (default_app_role) assignments, and is
 * empty unless access is allowed.
 */
export async function effectivePermissions(given: Ctx, idParam: string, appId: string): Promise<EffectivePermissions> {
  const key = confinedApp(given);
  if (key && key !== appId) throw new ApiError('application_not_found');
  const userId = resolveUserId(given, idParam);
  // The caller's session is confirmed in the same round trip as the access check (session: 'fused'),
  // before any right of the caller is looked at.
  const { ctx, check } = await checkAccessForCaller(given, userId, appId);
  const self = ctx.actor.type === 'user' && ctx.actor.userId === userId;
  const reader = key === appId || hasPermission(ctx.actor, 'users.list') || hasPermission(ctx.actor, 'entitlements.manage');
  if (!self && !reader) throw new ApiError('user_not_found');
  if (!check.user || check.user.erased || (check.user.deleted && !hasPermission(ctx.actor, 'users.manage'))) throw new ApiError('user_not_found');
  if (!check.app || !check.access) throw new ApiError('application_not_found');
  const access = check.access;
  const roles = check.roles.map((r) => ({ ...r, implicit: false }));
  if (access.allowed && check.defaultRole && !roles.some((r) => r.id === check.defaultRole!.id)) roles.push({ ...check.defaultRole, implicit: true });
  const prefix = `app.${check.app.slug}.`;
  const effective = access.allowed ? [...new Set(roles.flatMap((r) => r.permissions).filter((p) => p.startsWith(prefix)))].sort() : [];
  return {
    user_id: userId,
    application_id: appId,
    allowed: access.allowed,
    user_status: access.user_status,
    entitlement_status: access.entitlement_status,
    access_paths: access.access_paths,
    roles: roles.map((r) => ({ role_id: r.id, name: r.name, implicit: r.implicit })),
    effective_permissions: effective,
    computed_at: ctx.now.toISOString(),
  };
}
