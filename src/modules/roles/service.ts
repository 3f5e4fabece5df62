import { isDeepStrictEqual } from 'node:util';
import type { Ctx } from '../../context.js';
import { hasPermission, inTx, rightMayHaveMoved } from '../../context.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { keyset, toPage } from '../../http/pagination.js';
import { PLATFORM_PERMISSIONS } from '../../http/meta.js';
import { findApplicationRow, type ApplicationRow } from '../applications/store.js';
import { modeOf, type Mode, type Tx } from '../../db/types.js';
import { inSubjectMode } from '../../db/roles.js';
import { findVisibleApplication, isOwner } from '../applications/service.js';
import { viewerOf } from '../applications/visibility.js';
import { assertTenantWritable } from '../tenancy/writable.js';
import {
  countRoleHolders, deleteRoleRow, findRole, findRoleScope, insertRole, listPermissionApplications, listRoleRows, lockApplicationDefaultRole,
  lockApplicationShare, lockRole, lockRoleNoKeyUpdate, PLATFORM_PERMISSION_DESCRIPTIONS, roleListFilter, toRole, updateRole, type RoleRow,
} from './store.js';
import type { CreateRoleBody, PatchRoleBody, Role, ScopeQuery } from './schemas.js';
import { ROLE_READ_ONLY_FIELDS } from './schemas.js';

const keyApp = (ctx: Ctx) => (ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null);
const platformRolesManage = (ctx: Ctx) => hasPermission(ctx.actor, 'roles.manage') && !keyApp(ctx);
const holdsAnyPlatformPermission = (ctx: Ctx) =>
  (ctx.actor.type === 'user' || ctx.actor.type === 'api_key') && !keyApp(ctx) && PLATFORM_PERMISSIONS.some((p) => hasPermission(ctx.actor, p));

/** Who may manage an Application's Roles: platform roles.manage, its owner, or its own key holding roles.manage. */
export async function mayManageAppRoles(ctx: Ctx, app: ApplicationRow): Promise<boolean> {
  if (platformRolesManage(ctx)) return true;
  if (keyApp(ctx) === app.id && hasPermission(ctx.actor, 'roles.manage')) return true;
  return isOwner(ctx, app);
}

/** Read visibility: platform Roles to holders of any platform permission; an Application's Roles to its owner, own key, roles.manage. */
async function mayReadRole(ctx: Ctx, role: { scope: string }): Promise<boolean> {
  if (role.scope === 'platform') return holdsAnyPlatformPermission(ctx);
  if (platformRolesManage(ctx) || keyApp(ctx) === role.scope) return true;
  const app = await findApplicationRow(ctx.db, role.scope);
  return !!app && (await isOwner(ctx, app));
}

export async function visibleRole(ctx: Ctx, id: string): Promise<RoleRow> {
  const role = await findRole(ctx.db, id);
  if (!role || !(await mayReadRole(ctx, role))) throw new ApiError('role_not_found');
  return role;
}

/** GET /v1/permissions: platform keys plus visible Applications' keys; an app-scoped key sees platform keys and its own. */
export async function listPermissions(ctx: Ctx, scope: string | undefined) {
  const items: { key: string; scope: string; description: string }[] = [];
  if (!scope || scope === 'platform') {
    for (const key of PLATFORM_PERMISSIONS) items.push({ key, scope: 'platform', description: PLATFORM_PERMISSION_DESCRIPTIONS[key] });
  }
  if (scope !== 'platform') {
    const rows = await listPermissionApplications(ctx.db, keyApp(ctx), viewerOf(ctx), scope);
    for (const app of rows) for (const p of app.permissions) items.push({ key: p.key, scope: app.id, description: p.description ?? '' });
  }
  return { data: items, page: { next_cursor: null, has_more: false } };
}

/** GET /v1/roles. */
export async function listRoles(ctx: Ctx, q: ScopeQuery) {
  const filter = roleListFilter(
    {
      platform: holdsAnyPlatformPermission(ctx),
      allApps: platformRolesManage(ctx),
      keyApp: keyApp(ctx),
      userId: ctx.actor.type === 'user' ? ctx.actor.userId : null,
    },
    q.scope,
  );
  // Nothing to list, but the cursor is still checked (docs/conventions.md, Pagination).
  if (!filter) return toPage([], keyset(q, 1).limit, toRole);
  const ks = keyset(q, filter.params.length + 1, 'r', 'asc');
  const rows = await listRoleRows(ctx.db, filter, ks);
  return toPage(rows, ks.limit, toRole);
}

/** Permissions must match the Role's scope; a platform Role may hold only what the caller holds. */
function assertRolePermissions(ctx: Ctx, scope: string, app: ApplicationRow | null, permissions: string[]): void {
  if (scope === 'platform') {
    const unknown = permissions.filter((p) => !(PLATFORM_PERMISSIONS as readonly string[]).includes(p));
    if (unknown.length) throw new ApiError('unknown_permission', { details: { permissions: unknown } });
    const missing = permissions.filter((p) => !hasPermission(ctx.actor, p));
    if (missing.length) throw new ApiError('role_escalation_forbidden', { details: { permissions: missing } });
    return;
  }
  const declared = new Set(app!.permissions.map((p) => p.key));
  const unknown = permissions.filter((p) => !declared.has(p));
  if (unknown.length) throw new ApiError('unknown_permission', { details: { permissions: unknown } });
}

/**
 * A platform Role's permissions are what its holders hold: taking one out takes it from every holder,
 * which removing the Role from one of them already needs (the rights of assigning it: every permission
 * it grants). So the caller holds the permissions the PATCH drops too (403 role_escalation_forbidden);
 * a caller who could neither assign nor remove the Role cannot empty it for its holders either.
 */
function assertHoldsDropped(ctx: Ctx, current: string[], next: string[]): void {
  const missing = current.filter((p) => !next.includes(p) && !hasPermission(ctx.actor, p));
  if (missing.length) throw new ApiError('role_escalation_forbidden', { message: 'You cannot take away a permission you do not hold.', details: { permissions: missing } });
}

async function scopeApplication(ctx: Ctx, scope: string): Promise<ApplicationRow | null> {
  if (scope === 'platform') {
    if (!platformRolesManage(ctx)) throw new ApiError('forbidden', { details: { required_permission: 'roles.manage' } });
    return null;
  }
  const app = await findApplicationRow(ctx.db, scope);
  if (!app) throw new ApiError('application_not_found');
  if (keyApp(ctx) && keyApp(ctx) !== app.id) throw new ApiError('application_not_found');
  await assertMayManageAppRoles(ctx, app, 'application_not_found');
  return app;
}

/**
 * The right to manage an Application's Roles; without it, 403 forbidden, or `hidden` (404) when the
 * caller cannot see the Application at all: its Roles do not exist for them (Part B visibility).
 */
export async function assertMayManageAppRoles(ctx: Ctx, app: ApplicationRow, hidden: 'application_not_found' | 'role_not_found'): Promise<void> {
  if (await mayManageAppRoles(ctx, app)) return;
  if (!(await findVisibleApplication(ctx, app.id))) throw new ApiError(hidden);
  throw new ApiError('forbidden', { details: { required_permission: 'roles.manage' } });
}

/**
 * An owner's right, read again under the Application's lock the Role write took (docs/decisions.md, An
 * owner's right is read under the Application's lock): an ownership move that committed while the
 * write waited applies to it. roles.manage (platform, or the Application's own key) is the caller's own.
 */
async function ownerRightMoved(tx: Tx, ctx: Ctx, app: ApplicationRow): Promise<boolean> {
  return rightMayHaveMoved(ctx.actor, 'roles.manage') && !(await isOwner(inTx(ctx, tx), app));
}

/**
 * The mode of an audit row about a Role: its Application's, whoever changes it (Applications and their
 * Roles are shared by both modes); a platform Role belongs to neither, and its rows take the caller's.
 */
const roleMode = (app: ApplicationRow | null): Mode | undefined => (app ? modeOf(app.test_mode) : undefined);

/** POST /v1/roles. */
export async function createRole(ctx: Ctx, body: CreateRoleBody): Promise<Role> {
  const app = await scopeApplication(ctx, body.scope);
  const permissions = body.permissions ?? [];
  assertRolePermissions(ctx, body.scope, app, permissions);
  if (app && !app.available_app_roles.includes(body.name)) throw new ApiError('app_role_not_declared', { details: { available_app_roles: app.available_app_roles } });
  const id = app ? `role_${app.slug}_${body.name}` : `role_platform_${body.name}`;
  return ctx.db.transaction(async (tx) => {
    // Checked again under the Application's lock: a PATCH removing a key or a name, committed since the
    // check above, is seen (and one that comes after sees this Role and answers permission_in_use).
    if (app) {
      const current = await lockScopeApplication(tx, app.id);
      // What a stranger gets (scopeApplication): 403 forbidden, or 404 where the Application is hidden.
      if (await ownerRightMoved(tx, ctx, current)) await assertMayManageAppRoles(inTx(ctx, tx), current, 'application_not_found');
      // An Application's Roles are its Tenant's data: none change while the Tenant is migrating. The
      // Tenant is the one read under the lock (an ownership move may have changed it meanwhile).
      await assertTenantWritable(tx, current.tenant_id);
      assertRolePermissions(ctx, body.scope, current, permissions);
      if (!current.available_app_roles.includes(body.name)) throw new ApiError('app_role_not_declared', { details: { available_app_roles: current.available_app_roles } });
    }
    const rowCount = await insertRole(tx, id, body.name, body.scope, body.description ?? null, permissions, ctx.now);
    if (rowCount !== 1) throw new ApiError('role_name_taken', { details: { role_id: id } });
    const role = toRole((await findRole(tx, id))!);
    await recordAudit(tx, inTx(ctx, tx), { action: 'role.created', target: { type: 'role', id }, applicationId: app?.id ?? null, after: role, mode: roleMode(app) });
    return role;
  });
}

async function editableRole(ctx: Ctx, id: string): Promise<{ role: RoleRow; app: ApplicationRow | null }> {
  const role = await visibleRole(ctx, id);
  const app = await scopeApplication(ctx, role.scope);
  if (role.seed) throw new ApiError('seed_role_immutable');
  return { role, app };
}

/**
 * PATCH /v1/roles/{id}: permissions (replaced wholesale) and description; applies on the holders' next
 * request. The row is locked before it is read: a concurrent PATCH's change is kept (only fields sent change).
 */
export async function patchRole(ctx: Ctx, id: string, body: PatchRoleBody): Promise<Role> {
  return ctx.db.transaction(async (tx) => {
    // The Application before the Role (the order of DELETE /v1/roles and PATCH /v1/applications): its
    // permissions are read under its lock, so a PATCH removing a key either committed first (and the
    // key is unknown here) or waits and finds this Role holding it (409 permission_in_use).
    const found = await findRoleScope(tx, id);
    if (found && found.scope !== 'platform') await lockScopeApplication(tx, found.scope);
    await lockRoleNoKeyUpdate(tx, id);
    return patchLockedRole(inTx(ctx, tx), id, body);
  });
}

/**
 * Locks an Application against a PATCH (FOR SHARE: PATCH /v1/applications holds FOR NO KEY UPDATE)
 * while one of its Roles is written, and returns it as it now stands: an app Role holds only keys and
 * names the Application declares, and a PATCH removing one checks the Roles that hold it.
 */
async function lockScopeApplication(tx: Tx, applicationId: string): Promise<ApplicationRow> {
  await lockApplicationShare(tx, applicationId);
  const app = await findApplicationRow(tx, applicationId);
  if (!app) throw new ApiError('application_not_found');
  return app;
}

async function patchLockedRole(ctx: Ctx, id: string, body: PatchRoleBody): Promise<Role> {
  const { role, app } = await editableRole(ctx, id);
  assertNoReadOnlyFields(body, ROLE_READ_ONLY_FIELDS);
  if (body.permissions) {
    assertRolePermissions(ctx, role.scope, app, body.permissions);
    if (role.scope === 'platform') assertHoldsDropped(ctx, role.permissions, body.permissions);
  }
  return ctx.db.transaction(async (tx) => {
    if (app) await assertTenantWritable(tx, app.tenant_id);
    const description = 'description' in body ? body.description ?? null : role.description;
    const permissions = body.permissions ?? role.permissions;
    // A PATCH that changes nothing writes nothing (no updated_at, no role.updated), as elsewhere.
    if (description === role.description && isDeepStrictEqual(permissions, role.permissions)) return toRole(role);
    // The row's snapshots count the holders of the row's mode, as its readers' GET does; the answer the caller's.
    const mode = roleMode(app) ?? ctx.mode;
    const snapshot = () => inSubjectMode(tx, mode, async () => toRole((await findRole(tx, id))!));
    const before = mode === ctx.mode ? toRole(role) : await snapshot();
    await updateRole(tx, id, description, permissions, ctx.now);
    const after = toRole((await findRole(tx, id))!);
    await recordAudit(tx, inTx(ctx, tx), { action: 'role.updated', target: { type: 'role', id }, applicationId: app?.id ?? null, before, after: mode === ctx.mode ? after : await snapshot(), mode });
    return after;
  });
}

/**
 * DELETE /v1/roles/{id}: non-seed Roles with no assignments. An Application's default_app_role is
 * held by every user with access, now and later, without assignment rows: it is in use while it is
 * the default (409 role_in_use; change default_app_role first).
 */
export async function deleteRole(ctx: Ctx, id: string): Promise<void> {
  const { role, app } = await editableRole(ctx, id);
  await ctx.db.transaction(async (tx) => {
    // Locked, then read again: a concurrent PATCH making this Role the default_app_role, or an
    // assignment of it, either commits first (and is seen here) or waits and finds the Role gone.
    const held = app ? await lockApplicationDefaultRole(tx, app.id) : null;
    // A stranger does not see an Application's Roles (visibleRole): 404 role_not_found.
    if (app && (await ownerRightMoved(tx, ctx, app))) throw new ApiError('role_not_found');
    // Its Tenant as read under the lock (an ownership move may have changed it): not while migrating.
    if (held) await assertTenantWritable(tx, held.tenant_id);
    if (held && held.default_app_role === role.name) {
      throw new ApiError('role_in_use', { message: "The Application's default_app_role is held by every user with access; change default_app_role first.", details: { assignment_count: role.assignment_count, default_app_role: true } });
    }
    if ((await lockRole(tx, id)) !== 1) throw new ApiError('role_not_found');
    // Held in either mode, the Role stays; the count reported is the caller's mode's (the other's is not theirs to see).
    const holders = await countRoleHolders(tx, id);
    if (holders.n > 0) throw new ApiError('role_in_use', { details: { assignment_count: holders.visible } });
    // The Role as deleted, read under the lock: a PATCH that committed since the first read is in it.
    const deleted = (await findRole(tx, id))!;
    await deleteRoleRow(tx, id);
    await recordAudit(tx, inTx(ctx, tx), { action: 'role.deleted', target: { type: 'role', id }, applicationId: app?.id ?? null, before: toRole(deleted), mode: roleMode(app) });
  });
}
