import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { hasPermission } from '../../context.js';
import { ApiError } from '../../errors.js';
import { keyset, toPage } from '../../http/pagination.js';
import { MEMBER_DECISION_SQL } from '../../access/resolve.js';
import { OWNED_APPLICATIONS_SQL } from '../../access/ownership.js';
import { targetUser } from '../users/access.js';
import { findApplicationRow } from '../applications/store.js';
import { ENT_COLUMNS, findEntitlement, toEntitlement, type EntitlementRow } from './store.js';
import { confinedApp, rightsOver, type Rights } from './rights.js';
import type { EntitlementQuery, UserEntitlementQuery } from './schemas.js';

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
    const { rows } = await ctx.db.query<{ role: string }>(
      `SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2 AND membership_status = 'active'`,
      [row.organization_id, userId],
    );
    member = rows.length > 0;
    orgAdmin = rows[0]?.role === 'org_admin';
  }
  const holder = userId !== null && row.user_id === userId;
  if (!(holder || member || rights.platform || rights.appKey || rights.owner)) throw new ApiError('entitlement_not_found');
  return { row, rights, orgAdmin };
}

const inactiveFilter = (q: { status?: string; include_inactive?: boolean }) =>
  q.status || q.include_inactive ? null : `e.status IN ('active', 'disabled')`;

/** Members an organization-wide grant `e` includes (neither excluded by its scope nor over the seat cap). */
const INCLUDED_COUNT_SQL = `SELECT count(*)::int FROM organization_members m
  WHERE m.organization_id = e.organization_id AND m.membership_status = 'active' AND ${MEMBER_DECISION_SQL} = 'included'`;

export async function includedMemberCount(db: Queryable, entitlementId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT (${INCLUDED_COUNT_SQL}) AS n FROM entitlements e WHERE e.id = $1`, [entitlementId]);
  return rows[0]?.n ?? 0;
}

/** GET /v1/users/{id}/entitlements: personal rows plus org-wide rows of the user's Organizations, with granted_via. */
export async function listUserEntitlements(ctx: Ctx, idParam: string, q: UserEntitlementQuery) {
  const app = confinedApp(ctx);
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !app;
  const confinedReader = app !== null && (hasPermission(ctx.actor, 'entitlements.manage') || hasPermission(ctx.actor, 'users.list'));
  const { user, self } = await targetUser(ctx, idParam, 'read', { readers: ['users.list', 'entitlements.manage'] });
  if (!self && !platform && !confinedReader && !hasPermission(ctx.actor, 'users.manage')) throw new ApiError('user_not_found');
  const params: unknown[] = [user.id];
  // The user's Organizations as an array (= ANY), not `IN (SELECT …)`: the two sides of the OR are then
  // two index conditions (BitmapOr), where a hashed subquery made the page read every entitlement
  // newest first until it had found the user's (docs/conventions.md, Queries at scale).
  const where: string[] = [
    `(e.user_id = $1 OR e.organization_id = ANY (ARRAY(SELECT organization_id FROM organization_members WHERE user_id = $1 AND membership_status = 'active')))`,
  ];
  const add = (sql: (n: number) => string, value: unknown) => {
    params.push(value);
    where.push(sql(params.length));
  };
  if (app) add((n) => `e.application_id = $${n}`, app);
  if (q.application_id) add((n) => `e.application_id = $${n}`, q.application_id);
  if (q.status) add((n) => `e.status = $${n}`, q.status);
  if (q.source) add((n) => `e.source = $${n}`, q.source);
  const inactive = inactiveFilter(q);
  if (inactive) where.push(inactive);
  const ks = keyset(q, params.length + 1, 'e');
  const { rows } = await ctx.db.query<EntitlementRow & { member_decision: string | null }>(
    `SELECT ${ENT_COLUMNS}, CASE WHEN e.organization_id IS NULL THEN NULL ELSE ${MEMBER_DECISION_SQL} END AS member_decision
       FROM entitlements e LEFT JOIN organization_members m ON m.organization_id = e.organization_id AND m.user_id = $1
      WHERE ${[...where, ks.condition].join(' AND ')} ${ks.orderLimit}`,
    [...params, ...ks.params],
  );
  return toPage(rows, ks.limit, (r) => ({
    ...toEntitlement(r),
    granted_via: r.organization_id ? { organization_id: r.organization_id, member_decision: r.member_decision as 'included' } : null,
  }));
}

/** GET /v1/entitlements: the cross-user list, confined to the caller's Applications unless platform entitlements.manage. */
export async function listEntitlements(ctx: Ctx, q: EntitlementQuery, extra: { organizationId?: string } = {}) {
  const app = confinedApp(ctx);
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !app;
  const params: unknown[] = [];
  const where: string[] = [];
  const add = (sql: (n: number) => string, value: unknown) => {
    params.push(value);
    where.push(sql(params.length));
  };
  if (app) {
    if (!hasPermission(ctx.actor, 'entitlements.manage')) throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
    add((n) => `e.application_id = $${n}`, app);
  } else if (!platform && !extra.organizationId) {
    // Otherwise only an Application owner may list (the rows of the Applications they own).
    const actor = ctx.actor;
    const owner =
      actor.type === 'user' && (await ctx.db.query<{ owner: boolean }>(`SELECT EXISTS (${OWNED_APPLICATIONS_SQL(1)}) AS owner`, [actor.userId])).rows[0].owner;
    if (!owner || actor.type !== 'user') throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
    add((n) => `e.application_id IN (${OWNED_APPLICATIONS_SQL(n)})`, actor.userId);
  }
  if (extra.organizationId) add((n) => `e.organization_id = $${n}`, extra.organizationId);
  if (q.application_id) add((n) => `e.application_id = $${n}`, q.application_id);
  if (q.status) add((n) => `e.status = $${n}`, q.status);
  if (q.user_id) add((n) => `e.user_id = $${n}`, q.user_id);
  if (q.organization_id) add((n) => `e.organization_id = $${n}`, q.organization_id);
  if (q.source) add((n) => `e.source = $${n}`, q.source);
  if (q.order_id) add((n) => `e.order_id = $${n}`, q.order_id);
  if (q.ends_before) add((n) => `e.ends_at < $${n}`, q.ends_before);
  const inactive = inactiveFilter(q);
  if (inactive) where.push(inactive);
  const ks = keyset(q, params.length + 1, 'e');
  const { rows } = await ctx.db.query<EntitlementRow & { included: number | null }>(
    `SELECT ${ENT_COLUMNS},
            CASE WHEN e.organization_id IS NULL THEN NULL ELSE (${INCLUDED_COUNT_SQL}) END AS included
       FROM entitlements e WHERE ${[...where, ks.condition].join(' AND ')} ${ks.orderLimit}`,
    [...params, ...ks.params],
  );
  return toPage(rows, ks.limit, (r) => ({ ...toEntitlement(r), ...(r.included === null ? {} : { included_member_count: r.included }) }));
}
