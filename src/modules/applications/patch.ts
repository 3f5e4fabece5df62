import { isDeepStrictEqual } from 'node:util';
import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { inSubjectMode } from '../../db/roles.js';
import { assertWithinPlan, findTenant, resolveOwnerTenant } from '../tenancy/plans.js';
import {
  countApplicationSubscriptions, countTenantApplicationRows, findApplicationRow, findOwnerTenantId, lockApplicationForUpdate,
  lockApplicationNoKeyUpdate, toApplication, updateApplication, type ApplicationRow,
} from './store.js';
import { listRolesUsingPermissions } from './app-roles-store.js';
import { APPLICATION_READ_ONLY, type Application, type PatchApplicationBody } from './schemas.js';
import { assertOwnerKnown, emitReviewChange, isOwner, seedAppRole, validateConfig, visibleApplication } from './service.js';
import { restampSettingsOverrides, staleCounts } from './stale.js';
import { assertTenantWritable } from '../tenancy/writable.js';
import { countTenantSubscriptions } from '../webhooks/store.js';
import { countRoleHolders, deleteRoleRow, findRole, lockRole, toRole } from '../roles/store.js';
import { assertDestructiveAllowed } from '../../http/gate.js';
import { countSeats, countSeatsWithApplication, releaseSeatLimits } from '../tenancy/seats.js';
import { lockTenantSeats } from '../../access/locks.js';

const CONFIG_FIELDS = ['name', 'description', 'icon_url', 'launch_url', 'redirect_uris', 'support_url', 'email_from_name', 'settings_schema', 'permissions', 'available_app_roles', 'default_app_role'] as const;
const MODERATION_FIELDS = ['visibility', 'review_status', 'review_notes', 'owner_user_id', 'owner_organization_id'] as const;

/** review_status moves (Part B): from → allowed targets. rejected → pending_review happens only automatically. */
const REVIEW_MOVES: Record<string, string[]> = {
  pending_review: ['approved', 'rejected'],
  approved: ['suspended'],
  suspended: ['approved'],
  rejected: [],
};
const NOTES_REQUIRED = ['rejected', 'suspended'];

/**
 * PATCH /v1/applications/{id}: owner (configuration fields) or applications.manage (all). The row is
 * locked before it is read: of two PATCHes at once the second starts from the first's result (only
 * the fields sent change), and a DELETE /v1/roles of the Role it makes the default waits (or is seen).
 */
export async function patchApplication(ctx: Ctx, id: string, body: PatchApplicationBody): Promise<Application> {
  return ctx.db.transaction(async (tx) => {
    await lockApplicationNoKeyUpdate(tx, id);
    return patchLockedApplication(inTx(ctx, tx), id, body);
  });
}

async function patchLockedApplication(ctx: Ctx, id: string, body: PatchApplicationBody): Promise<Application> {
  const { app, owner } = await authorizeApplicationPatch(ctx, id, body);
  const { roles, defaultRole, permissions } = planAppRoles(app, body);

  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    await assertTenantWritable(tx, app.tenant_id);
    const { review, notes } = planReviewStatus(app, body, owner);
    const { tenantId, owners } = await moveOwnership(tx, ctx, app, body);
    await syncAppRoles(tx, ctx, app, roles, tenantId);
    // Everyone with access holds the default Role: it exists even if its Role was deleted while another name was the default.
    if (defaultRole && defaultRole !== app.default_app_role) await seedAppRole(tx, ctx, app, defaultRole, tenantId);
    if (permissions) await assertPermissionsUnused(tx, app, permissions.map((p) => p.key));

    const next = nextApplicationRow(app, body, {
      permissions: permissions ?? app.permissions, available_app_roles: roles, default_app_role: defaultRole,
      review_status: review, review_notes: notes, tenant_id: tenantId, ...owners,
    });
    // A PATCH that changes nothing writes nothing (no updated_at, no application.updated), as elsewhere.
    if ((Object.keys(next) as (keyof ApplicationRow)[]).every((k) => isDeepStrictEqual(next[k], app[k]))) return toApplication(app, await staleCounts(c, app));
    // The audit's before snapshot, while the stored overrides' stale keys are still judged against the old schema.
    const before = await snapshotInMode(tx, c, app);
    const after = await writeApplication(tx, c, app, next, tenantId);
    const out = toApplication(after, await staleCounts(c, after));
    await recordApplicationChange(tx, c, { app, before }, after, out, { review, notes, tenantId });
    return out;
  });
}

/** The owner (configuration fields) or applications.manage (all, moderation fields too); returns the row and whether the caller owns it. */
async function authorizeApplicationPatch(ctx: Ctx, id: string, body: PatchApplicationBody): Promise<{ app: ApplicationRow; owner: boolean }> {
  const app = await visibleApplication(ctx, id);
  const admin = hasPermission(ctx.actor, 'applications.manage') && !(ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform');
  const owner = await isOwner(ctx, app);
  if (!admin && !owner) throw new ApiError('forbidden');
  assertNoReadOnlyFields(body, APPLICATION_READ_ONLY);
  const moderation = MODERATION_FIELDS.filter((f) => f in body);
  if (moderation.length && !admin) throw new ApiError('moderation_field_forbidden', { details: { fields: moderation } });
  return { app, owner };
}

/** The app role names, the default one and the permissions the PATCH leaves (permissions undefined: not sent). */
function planAppRoles(app: ApplicationRow, body: PatchApplicationBody) {
  const roles = body.available_app_roles ?? app.available_app_roles;
  // The default Role is held by everyone with access, now and later: its name goes only with a new
  // default_app_role in the same PATCH (as DELETE /v1/roles refuses it while it is the default).
  if (body.default_app_role === undefined && app.default_app_role && !roles.includes(app.default_app_role)) {
    throw new ApiError('app_role_in_use', {
      message: 'That app role is the default_app_role: change default_app_role in the same request.',
      details: { role_id: `role_${app.slug}_${app.default_app_role}`, default_app_role: true },
    });
  }
  const defaultRole = body.default_app_role !== undefined ? body.default_app_role : app.default_app_role;
  const permissions = validateConfig(app.slug, app.test_mode, body, roles, defaultRole);
  return { roles, defaultRole, permissions };
}

/** The review_status and review_notes after the PATCH: a move an admin asks for, or the owner's return to the queue. */
function planReviewStatus(app: ApplicationRow, body: PatchApplicationBody, owner: boolean): { review: ApplicationRow['review_status']; notes: string | null } {
  let review = app.review_status;
  const notes = body.review_notes !== undefined ? body.review_notes : app.review_notes;
  if (body.review_status !== undefined && body.review_status !== app.review_status) {
    if (!REVIEW_MOVES[app.review_status]?.includes(body.review_status)) {
      throw new ApiError('invalid_review_transition', { details: { from: app.review_status, to: body.review_status } });
    }
    // Whitespace-only notes count as missing.
    if (NOTES_REQUIRED.includes(body.review_status) && !body.review_notes?.trim()) throw new ApiError('review_notes_required');
    review = body.review_status;
  } else if (app.review_status === 'rejected' && owner && body.review_status === undefined && CONFIG_FIELDS.some((f) => f in body)) {
    // The owner's next configuration change puts a rejected Application back in the queue, also when
    // the owner holds applications.manage; a PATCH that sets review_status itself is not moved.
    review = 'pending_review';
  }
  return { review, notes };
}

/** The row's columns after the PATCH: each field sent, else its current value; then the columns decided above. */
function nextApplicationRow(app: ApplicationRow, body: PatchApplicationBody, decided: Partial<ApplicationRow>): Partial<ApplicationRow> {
  const v = <K extends keyof ApplicationRow>(k: K, fallback: ApplicationRow[K]) => (k in body ? (body as any)[k] : fallback);
  return {
    ...Object.fromEntries(CONFIG_FIELDS.map((f) => [f, v(f, app[f])])),
    visibility: v('visibility', app.visibility),
    ...decided,
  };
}

/** The UPDATE, and the seats a move to another Tenant frees; returns the row as stored. */
async function writeApplication(tx: Tx, c: Ctx, app: ApplicationRow, next: Partial<ApplicationRow>, tenantId: string): Promise<ApplicationRow> {
  await updateApplication(tx, app.id, next, c.now);
  // A move changes both Tenants' seats: members marked seat_limit get the room the move gives them
  // (the destination without a cap, or the seats leaving the source) in this transaction, as an
  // Entitlement PATCH or a plan change gives it, not at the next seat-limit-release run.
  if (tenantId !== app.tenant_id) for (const tenant of [app.tenant_id, tenantId]) await releaseSeatLimits(tx, c, tenant);
  const after = (await findApplicationRow(tx, app.id))!;
  // The stored overrides' stale keys, judged against the new schema (stale_override_counts reads them).
  if (!isDeepStrictEqual(after.settings_schema, app.settings_schema)) await restampSettingsOverrides(tx, after);
  return after;
}

/** application.updated, and for a review move application.review_status_changed and its webhook. */
// Rows of the Application's mode, whoever changes it (a test-mode key suspending a live one), as
// emitReviewChange; their snapshots count that mode's users, as its readers' GET does (the caller's
// answer counts the caller's: neither mode sees the other's).
const snapshotInMode = (tx: Tx, c: Ctx, row: ApplicationRow) => inSubjectMode(tx, modeOf(row.test_mode), async () => toApplication(row, await staleCounts(c, row)));

async function recordApplicationChange(tx: Tx, c: Ctx, { app, before }: { app: ApplicationRow; before: Application }, after: ApplicationRow, out: Application, { review, notes, tenantId }: { review: ApplicationRow['review_status']; notes: string | null; tenantId: string }): Promise<void> {
  const mode = modeOf(app.test_mode);
  await recordAudit(tx, c, { action: 'application.updated', target: { type: 'application', id: app.id }, applicationId: app.id, tenantId, before, after: mode === c.mode ? out : await snapshotInMode(tx, c, after), mode });
  if (review !== app.review_status) {
    await recordAudit(tx, c, {
      action: 'application.review_status_changed',
      target: { type: 'application', id: app.id },
      applicationId: app.id,
      tenantId,
      before: { review_status: app.review_status },
      after: { review_status: review, review_notes: notes },
      mode,
    });
    // The webhook is for approved, rejected, suspended and reinstated (Part B Events); the automatic
    // return to the queue is audited only.
    if (review !== 'pending_review') await emitReviewChange(tx, c, after);
  }
}

/**
 * Adding a name seeds its Role; removing one deletes the unassigned Role or refuses (409 app_role_in_use).
 * The AppRole cap is the plan of the Tenant the Application ends up in: checked when a name is added
 * and on every move to another Tenant, even when no name is added.
 */
async function syncAppRoles(tx: Tx, ctx: Ctx, app: ApplicationRow, roles: string[], tenantId: string): Promise<void> {
  const added = roles.filter((r) => !app.available_app_roles.includes(r));
  const removed = app.available_app_roles.filter((r) => !roles.includes(r));
  if (added.length || tenantId !== app.tenant_id) {
    const tenant = (await findTenant(tx, tenantId))!;
    assertWithinPlan(tenant, 'app_roles', roles.length, app.available_app_roles.length);
  }
  for (const name of removed) {
    const roleId = `role_${app.slug}_${name}`;
    // Locked before its assignments are counted, as DELETE /v1/roles/{id} does: an assignment made at
    // the same time either commits first (counted here: 409) or waits and finds the Role gone (404).
    await lockRole(tx, roleId);
    // Held in either mode, the name stays; the count reported is the caller's mode's (as DELETE /v1/roles/{id}).
    const holders = await countRoleHolders(tx, roleId);
    if (holders.n > 0) throw new ApiError('app_role_in_use', { details: { role_id: roleId, assignments: holders.visible } });
  }
  // Every removed name is checked (409 app_role_in_use holds for every caller) before any Role goes,
  // so a restricted key's answer does not depend on the order of the names.
  for (const name of removed) {
    const roleId = `role_${app.slug}_${name}`;
    const role = await findRole(tx, roleId);
    // A Role deleted with its name is a role deletion (Part A convention 11), however it is asked for:
    // refused to a restrict_destructive key as DELETE /v1/roles/{id} is (the route defers this to here).
    if (role) assertDestructiveAllowed(ctx.actor);
    await deleteRoleRow(tx, roleId);
    // Deleted with its name: audited as role.deleted, as DELETE /v1/roles/{id} is.
    if (role) await recordAudit(tx, inTx(ctx, tx), { action: 'role.deleted', target: { type: 'role', id: roleId }, applicationId: app.id, tenantId, before: toRole(role), mode: modeOf(app.test_mode) });
  }
  for (const name of added) await seedAppRole(tx, ctx, app, name, tenantId);
}

async function assertPermissionsUnused(tx: Tx, app: ApplicationRow, keep: string[]): Promise<void> {
  const removed = app.permissions.map((p) => p.key).filter((k) => !keep.includes(k));
  if (!removed.length) return;
  const roleIds = await listRolesUsingPermissions(tx, app.id, removed);
  if (roleIds.length) throw new ApiError('permission_in_use', { details: { role_ids: roleIds, permissions: removed } });
}

type Owners = Pick<ApplicationRow, 'owner_user_id' | 'owner_organization_id'>;

/**
 * The owner after the PATCH (naming one side clears the other) and its Tenant: ownership moves the
 * Application to the new owner's Tenant, only between shared-tier Tenants.
 */
async function moveOwnership(tx: Tx, ctx: Ctx, app: ApplicationRow, body: PatchApplicationBody): Promise<{ tenantId: string; owners: Owners }> {
  const kept = { tenantId: app.tenant_id, owners: { owner_user_id: app.owner_user_id, owner_organization_id: app.owner_organization_id } };
  if (!('owner_user_id' in body) && !('owner_organization_id' in body)) return kept;
  const ownerUser = 'owner_user_id' in body ? body.owner_user_id ?? null : app.owner_user_id;
  const ownerOrg = 'owner_organization_id' in body ? body.owner_organization_id ?? null : app.owner_organization_id;
  const userSide = 'owner_user_id' in body && body.owner_user_id ? body.owner_user_id : null;
  const orgSide = 'owner_organization_id' in body && body.owner_organization_id ? body.owner_organization_id : null;
  const nextUser = userSide ?? (orgSide ? null : ownerUser);
  const nextOrg = orgSide ?? (userSide ? null : ownerOrg);
  if (!!nextUser === !!nextOrg) {
    throw invalidField('owner_user_id', 'exactly one of owner_user_id or owner_organization_id');
  }
  const owners = { owner_user_id: nextUser, owner_organization_id: nextOrg };
  if (nextUser === app.owner_user_id && nextOrg === app.owner_organization_id) return kept;
  // FOR UPDATE (the PATCH holds FOR NO KEY UPDATE): a change adding seats reads the Application's Tenant
  // under a KEY SHARE lock (lockApplicationTenants). The move waits for one that has, so the seats it
  // added are counted below; one that comes after reads the destination and counts against its cap.
  await lockApplicationForUpdate(tx, app.id);
  await assertOwnerKnown(tx, { userId: nextUser, organizationId: nextOrg }, app.test_mode);
  // The seats of both Tenants change, in id order (src/access/locks.ts): a release of seat_limit
  // members counting the source Tenant's room (releaseSeatLimits, which takes no Application lock) is
  // waited for, so a member it seats on this Application is counted against the destination below.
  const known = await findOwnerTenantId(tx, nextUser, nextOrg);
  await lockTenantSeats(tx, [app.tenant_id, known]);
  const from = (await findTenant(tx, app.tenant_id))!;
  const to = await resolveOwnerTenant(tx, { userId: nextUser, organizationId: nextOrg }, ctx.now);
  if (to.id === from.id) return { tenantId: from.id, owners };
  // The source Tenant was checked by the caller; the destination receives the Application's data.
  await assertTenantWritable(tx, to.id);
  if (from.tier !== 'shared' || to.tier !== 'shared') throw new ApiError('ownership_change_requires_migration', { details: { from_tenant: from.id, to_tenant: to.id } });
  assertWithinPlan(to, 'applications', (await countTenantApplicationRows(tx, to.id)) + 1);
  // Its grants' users become the destination's seats: Starter's seat cap holds too (as for its
  // webhook subscriptions below). Counted as the caller's mode sees them, as a grant counts them.
  const seats = await countSeats(tx, to.id, ctx.now);
  const seatsAfter = await countSeatsWithApplication(tx, to.id, app.id, ctx.now);
  if (seatsAfter > seats) assertWithinPlan(to, 'seats', seatsAfter, seats);
  // Its webhook subscriptions move with it: the destination's webhooks cap holds too (Part B Errors:
  // plan_limit_reached when "a plan cap ... would be exceeded").
  const subs = await countApplicationSubscriptions(tx, app.id);
  if (subs > 0) assertWithinPlan(to, 'webhooks', (await countTenantSubscriptions(tx, to.id)) + subs);
  return { tenantId: to.id, owners };
}
