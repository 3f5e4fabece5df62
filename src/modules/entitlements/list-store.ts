import type { KeysetSql, Queryable } from '../../db/types.js';
import { conditions, selectPage } from '../../db/page.js';
import { includedMemberAmongSql, MEMBER_DECISION_SQL } from '../../access/resolve.js';
import { OWNED_APPLICATIONS_SQL } from '../../access/ownership.js';
import { ENT_COLUMNS, type EntitlementRow } from './store.js';
import type { EntitlementQuery, UserEntitlementQuery } from './schemas.js';

/** The WHERE conditions of a list and their parameters, numbered from $1 (a keyset page's come after). */
export interface ListFilter {
  where: string[];
  params: unknown[];
}

const inactiveFilter = (q: { status?: string; include_inactive?: boolean }) =>
  q.status || q.include_inactive ? null : `e.status IN ('active', 'disabled')`;

/** Members an organization-wide grant `e` includes (neither excluded by its scope nor over the seat cap), decided set-wise. */
const INCLUDED_COUNT_SQL = `SELECT count(*)::int FROM organization_members m
  WHERE m.organization_id = e.organization_id AND ${includedMemberAmongSql('(SELECT e.id, e.member_overrides)')}`;

export async function includedMemberCount(db: Queryable, entitlementId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT (${INCLUDED_COUNT_SQL}) AS n FROM entitlements e WHERE e.id = $1`, [entitlementId]);
  return rows[0]?.n ?? 0;
}

/** Whether the user owns any Application (owner rights never reach an internal one). */
export async function ownsAnyApplication(db: Queryable, userId: string): Promise<boolean> {
  return (await db.query<{ owner: boolean }>(`SELECT EXISTS (${OWNED_APPLICATIONS_SQL(1)}) AS owner`, [userId])).rows[0].owner;
}

/**
 * The entitlement rows `e` that are user `$n`'s: their personal rows and those of the Organizations
 * they are an active member of. The Organizations as an array (= ANY), not `IN (SELECT …)`: the two
 * sides of the OR are then two index conditions (BitmapOr), where a hashed subquery made the page read
 * every entitlement newest first until it had found the user's (docs/conventions.md, Queries at scale).
 */
export const USER_ENTITLEMENTS_SQL = (n: number) =>
  `(e.user_id = $${n} OR e.organization_id = ANY (ARRAY(SELECT organization_id FROM organization_members WHERE user_id = $${n} AND membership_status = 'active')))`;

/** GET /v1/users/{id}/entitlements's conditions: the user's personal rows and their Organizations' rows, of `app` when confined. */
export function userEntitlementFilter(userId: string, app: string | null, q: UserEntitlementQuery): ListFilter {
  const params: unknown[] = [userId];
  const { where, add } = conditions([USER_ENTITLEMENTS_SQL(1)], params);
  if (app) add((n) => `e.application_id = $${n}`, app);
  if (q.application_id) add((n) => `e.application_id = $${n}`, q.application_id);
  if (q.status) add((n) => `e.status = $${n}`, q.status);
  if (q.source) add((n) => `e.source = $${n}`, q.source);
  const inactive = inactiveFilter(q);
  if (inactive) where.push(inactive);
  return { where, params };
}

/** One page of a user's rows, each org-wide one with the user's member_decision ($1 is the user). */
export async function listUserEntitlementRows(db: Queryable, filter: ListFilter, ks: KeysetSql): Promise<(EntitlementRow & { member_decision: string | null })[]> {
  const from = `SELECT ${ENT_COLUMNS}, CASE WHEN e.organization_id IS NULL THEN NULL ELSE ${MEMBER_DECISION_SQL} END AS member_decision
       FROM entitlements e LEFT JOIN organization_members m ON m.organization_id = e.organization_id AND m.user_id = $1`;
  return selectPage<EntitlementRow & { member_decision: string | null }>(db, from, filter, ks);
}

/** Whose rows GET /v1/entitlements lists, decided by the service: an app-confined key's Application, an owner's Applications, or all. */
export interface EntitlementListScope {
  app: string | null;
  /** The owner whose Applications' rows are listed (when neither confined, platform nor an Organization's list). */
  ownerId: string | null;
  organizationId?: string;
}

/** GET /v1/entitlements's conditions. */
export function entitlementListFilter(scope: EntitlementListScope, q: EntitlementQuery): ListFilter {
  const { where, params, add } = conditions();
  if (scope.app) add((n) => `e.application_id = $${n}`, scope.app);
  else if (scope.ownerId !== null) add((n) => `e.application_id IN (${OWNED_APPLICATIONS_SQL(n)})`, scope.ownerId);
  if (scope.organizationId) add((n) => `e.organization_id = $${n}`, scope.organizationId);
  if (q.application_id) add((n) => `e.application_id = $${n}`, q.application_id);
  if (q.status) add((n) => `e.status = $${n}`, q.status);
  if (q.user_id) add((n) => `e.user_id = $${n}`, q.user_id);
  if (q.organization_id) add((n) => `e.organization_id = $${n}`, q.organization_id);
  if (q.source) add((n) => `e.source = $${n}`, q.source);
  if (q.order_id) add((n) => `e.order_id = $${n}`, q.order_id);
  if (q.ends_before) add((n) => `e.ends_at < $${n}`, q.ends_before);
  const inactive = inactiveFilter(q);
  if (inactive) where.push(inactive);
  return { where, params };
}

/** One page of GET /v1/entitlements, each org-wide row with its included member count. */
export async function listEntitlementRows(db: Queryable, filter: ListFilter, ks: KeysetSql): Promise<(EntitlementRow & { included: number | null })[]> {
  const from = `SELECT ${ENT_COLUMNS},
            CASE WHEN e.organization_id IS NULL THEN NULL ELSE (${INCLUDED_COUNT_SQL}) END AS included
       FROM entitlements e`;
  return selectPage<EntitlementRow & { included: number | null }>(db, from, filter, ks);
}
