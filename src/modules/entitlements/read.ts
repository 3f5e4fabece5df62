import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import { ApiError } from '../../errors.js';
import { keyset, toPage } from '../../http/pagination.js';
import { targetUser } from '../users/access.js';
import { findApplicationRow } from '../applications/store.js';
import { findEntitlement, toEntitlement, type EntitlementRow } from './store.js';
import { entitlementListFilter, listEntitlementRows, listUserEntitlementRows, ownsAnyApplication, userEntitlementFilter } from './list-store.js';
import { findActiveMembership } from './members-store.js';
import { confinedApp, rightsOver, type Rights } from './rights.js';
import type { EntitlementQuery, UserEntitlementQuery } from './schemas.js';

/** Moved to list-store.ts; organizations/grants.ts imports it from here. */
export { includedMemberCount } from './list-store.js';

export interface Access {
  row: EntitlementRow;
  rights: Rights;
  /** Active org_admin of the holding Organization (org_seat rows). */
  orgAdmin: boolean;
}

/**
 * An Entitlement the caller may see: the holder, a member of the holding Organization,
 * entitlements.manage (platform, or the Application's own key), the Application's owner, or an org
 * admin of an org_seat row. Anyone else: 404 entitlement_not_found.
 */
export async function visibleEntitlement(ctx: Ctx, id: string, forUpdate = false): Promise<Access> {
  const row = await findEntitlement(ctx.db, id, forUpdate);
  if (!row) throw new ApiError('entitlement_not_found');
  const app = (await findApplicationRow(ctx.db, row.application_id))!;
  const rights = await rightsOver(ctx, app);
  const userId = ctx.actor.type === 'user' ? ctx.actor.userId : null;
  let member = false;
  let orgAdmin = false;
  if (row.organization_id && userId) {
    const membership = await findActiveMembership(ctx.db, row.organization_id, userId);
    member = membership !== null;
    orgAdmin = membership?.role === 'org_admin';
  }
  const holder = userId !== null && row.user_id === userId;
  if (!(holder || member || rights.platform || rights.appKey || rights.owner)) throw new ApiError('entitlement_not_found');
  return { row, rights, orgAdmin };
}

/** GET /v1/users/{id}/entitlements: personal rows plus org-wide rows of the user's Organizations, with granted_via. */
export async function listUserEntitlements(ctx: Ctx, idParam: string, q: UserEntitlementQuery) {
  const app = confinedApp(ctx);
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !app;
  const confinedReader = app !== null && (hasPermission(ctx.actor, 'entitlements.manage') || hasPermission(ctx.actor, 'users.list'));
  const { user, self } = await targetUser(ctx, idParam, 'read', { readers: ['users.list', 'entitlements.manage'] });
  if (!self && !platform && !confinedReader && !hasPermission(ctx.actor, 'users.manage')) throw new ApiError('user_not_found');
  const filter = userEntitlementFilter(user.id, app, q);
  const ks = keyset(q, filter.params.length + 1, 'e');
  const rows = await listUserEntitlementRows(ctx.db, filter, ks);
  return toPage(rows, ks.limit, (r) => ({
    ...toEntitlement(r),
    granted_via: r.organization_id ? { organization_id: r.organization_id, member_decision: r.member_decision as 'included' } : null,
  }));
}

/** GET /v1/entitlements: the cross-user list, confined to the caller's Applications unless platform entitlements.manage. */
export async function listEntitlements(ctx: Ctx, q: EntitlementQuery, extra: { organizationId?: string } = {}) {
  const app = confinedApp(ctx);
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !app;
  // The rows of the caller's Applications: an app-confined key's own, or (ownerId) an owner's.
  let ownerId: string | null = null;
  if (app) {
    if (!hasPermission(ctx.actor, 'entitlements.manage')) throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
  } else if (!platform && !extra.organizationId) {
    // Otherwise only an Application owner may list (the rows of the Applications they own).
    const actor = ctx.actor;
    const owner = actor.type === 'user' && (await ownsAnyApplication(ctx.db, actor.userId));
    if (!owner || actor.type !== 'user') throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
    ownerId = actor.userId;
  }
  const filter = entitlementListFilter({ app, ownerId, organizationId: extra.organizationId }, q);
  const ks = keyset(q, filter.params.length + 1, 'e');
  const rows = await listEntitlementRows(ctx.db, filter, ks);
  return toPage(rows, ks.limit, (r) => ({ ...toEntitlement(r), ...(r.included === null ? {} : { included_member_count: r.included }) }));
}
