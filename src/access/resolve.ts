import type { Queryable } from '../db/types.js';

export type ResolvedStatus = 'active' | 'scheduled' | 'disabled' | 'expired' | 'revoked' | 'none';

export interface AccessPath {
  source: string;
  entitlement_id: string;
  status: ResolvedStatus;
  organization_id?: string | null;
  member_decision?: 'included' | 'excluded' | 'seat_limit';
}

export interface ResolvedAccess {
  user_id: string;
  application_id: string;
  user_status: string;
  entitlement_status: ResolvedStatus;
  allowed: boolean;
  access_paths: AccessPath[];
}

// Best first: a user's access is the best status among all of their paths.
const RANK: Record<ResolvedStatus, number> = { active: 5, scheduled: 4, disabled: 3, expired: 2, revoked: 1, none: 0 };

/** The resolved status of one entitlement row at `now`: ends_at <= now counts as expired at once. */
export function rowStatus(row: { status: string; starts_at: Date; ends_at: Date | null }, now: Date): ResolvedStatus {
  if (row.status === 'revoked') return 'revoked';
  if (row.status === 'expired' || (row.ends_at && row.ends_at <= now)) return 'expired';
  if (row.status === 'disabled') return 'disabled';
  if (row.starts_at > now) return 'scheduled';
  return 'active';
}

export interface PathRow {
  user_id: string;
  user_status: string;
  application_id: string | null;
  entitlement_id: string | null;
  source: string | null;
  status: string | null;
  starts_at: Date | string | null;
  ends_at: Date | string | null;
  organization_id: string | null;
  member_decision: 'included' | 'excluded' | 'seat_limit' | null;
}

/**
 * The member decision of an organization-wide grant `e` for member `m`: excluded by the grant's
 * member_scope (`named`: SQL condition, the grant's member_overrides name the member), seat_limit when
 * the grant reached the member beyond a Starter Tenant's seat cap (org_seat_limits), else included.
 * The one definition behind MEMBER_DECISION_SQL and its set-wise form, memberDecisionAmongSql.
 */
const memberDecision = (named: string) => `CASE
    WHEN e.member_scope = 'allowlist' AND NOT (${named}) THEN 'excluded'
    WHEN e.member_scope = 'denylist' AND ${named} THEN 'excluded'
    WHEN EXISTS (SELECT 1 FROM org_seat_limits l WHERE l.entitlement_id = e.id AND l.user_id = m.user_id) THEN 'seat_limit'
    ELSE 'included' END`;

/** The member decision of grant `e` for member `m`, for a few members (each compared with the grant's member_overrides). */
export const MEMBER_DECISION_SQL = memberDecision(`m.user_id = ANY(COALESCE(e.member_overrides, '{}'))`);

/**
 * The same member decision, set-wise, for statements that decide every member of a grant (included
 * counts, seat holders): whether the overrides name (grant `e`, member `m`) is read from one hash of
 * the pairs of the grants `grants` (SQL: a relation with their id and member_overrides, e.g. a CTE,
 * or `(SELECT e.id, e.member_overrides)` for one grant `e` of an outer query; it must hold every grant
 * `e` the statement decides, or their overrides name no one): members + overrides,
 * where the per-member `= ANY` compares every member with every override. A NULL member_overrides
 * names no one (as COALESCE does above); a user listed twice is named once.
 */
export const memberDecisionAmongSql = (grants: string) =>
  memberDecision(`(e.id, m.user_id) IN (SELECT g.id, o.user_id FROM ${grants} g CROSS JOIN unnest(g.member_overrides) o(user_id))`);

/** SQL condition: member `m` (an active member of the Organization) is included by its grant `e`: an access path. */
export const INCLUDED_MEMBER_SQL = `m.membership_status = 'active' AND ${MEMBER_DECISION_SQL} = 'included'`;

/** INCLUDED_MEMBER_SQL set-wise (memberDecisionAmongSql): `e` one of the grants `grants`. */
export const includedMemberAmongSql = (grants: string) => `m.membership_status = 'active' AND ${memberDecisionAmongSql(grants)} = 'included'`;

// The users with an access path to the Application `app`, read from its Entitlements (by their
// application index): the users of its personal rows in any status, and the active members that its
// organization-wide grants include (INCLUDED_MEMBER_SQL: a row that excludes the member, by scope or
// seat limit, is never a path). accessPathSql tests one user; accessReachSql lists them all.
const personalPathsSql = (app: string) => `SELECT ep.user_id FROM entitlements ep WHERE ep.application_id = ${app}`;
const grantPathsSql = (app: string) =>
  `SELECT m.user_id FROM entitlements e JOIN organization_members m ON m.organization_id = e.organization_id
    WHERE e.application_id = ${app} AND ${INCLUDED_MEMBER_SQL}`;

/**
 * SQL condition: the user (SQL expression `user`) has an access path to the Application (`app`): a
 * personal Entitlement in any status, or an organization-wide grant that includes them. The one
 * definition behind the users?application_id= filter, invite_only visibility and the app-data checks.
 */
export const accessPathSql = (user: string, app: string) =>
  `(EXISTS (${personalPathsSql(app)} AND ep.user_id = ${user})
    OR EXISTS (${grantPathsSql(app)} AND m.user_id = ${user}))`;

/**
 * SQL query: the ids of the users with an access path to the Application (`app`), a user once per path
 * (UNION ALL: read under a LIMIT, it stops there; a UNION would read every path first to remove repeats).
 */
export const accessReachSql = (app: string) => `${personalPathsSql(app)} AND ep.user_id IS NOT NULL UNION ALL ${grantPathsSql(app)}`;

/**
 * The one access resolver: every path of each user to each Application (personal Entitlements;
 * organization-wide grants join the same list), resolved at `now`. Allowed only when the user is
 * active and the best path is active. Pairs without any path are absent unless asked for in `apps`.
 */
/**
 * Every path row of the users in CTE `ids` to the Applications in `$apps` (a text[] parameter, NULL
 * for all): personal rows, then organization-wide grants of Organizations the user is an active
 * member of, with the member decision of the grant's member_scope. Users without any path still
 * appear once (application_id NULL) so their status is known.
 */
export const PATH_ROWS_SQL = (apps: string) => `
     SELECT u.id AS user_id, u.status AS user_status, e.application_id, e.id AS entitlement_id, e.source, e.status,
            e.starts_at, e.ends_at, NULL::text AS organization_id, NULL::text AS member_decision
       FROM ids JOIN users u ON u.id = ids.id
       LEFT JOIN entitlements e ON e.user_id = u.id AND (${apps}::text[] IS NULL OR e.application_id = ANY(${apps}::text[]))
     UNION ALL
     SELECT u.id, u.status, e.application_id, e.id, e.source, e.status, e.starts_at, e.ends_at, e.organization_id,
            ${MEMBER_DECISION_SQL} AS member_decision
       FROM ids JOIN users u ON u.id = ids.id
       JOIN organization_members m ON m.user_id = u.id AND m.membership_status = 'active'
       JOIN entitlements e ON e.organization_id = m.organization_id AND (${apps}::text[] IS NULL OR e.application_id = ANY(${apps}::text[]))`;

/** The resolver's input: every path row of the given users (to the given Applications, or all). */
export async function findPathRows(db: Queryable, userIds: string[], apps: string[] | null = null): Promise<PathRow[]> {
  if (userIds.length === 0) return [];
  const { rows } = await db.query<PathRow>(
    `WITH ids AS (SELECT DISTINCT unnest($1::text[]) AS id) ${PATH_ROWS_SQL('$2')}`,
    [userIds, apps],
  );
  return rows;
}

/** The one access resolver, in SQL: resolves the given users (to the given Applications, or all). */
export async function resolveAccess(
  db: Queryable,
  userIds: string[],
  now: Date,
  apps: string[] | null = null,
): Promise<Map<string, ResolvedAccess>> {
  if (userIds.length === 0) return new Map();
  return computeAccess(await findPathRows(db, userIds, apps), userIds, now, apps);
}

/**
 * The one access resolver, in code: from path rows to the resolved access of each (user,
 * Application) pair. Allowed only when the user is active and the best path is active; a grant that
 * excludes the member is listed but never an access path. Pairs asked for in `apps` without a path
 * resolve to none.
 */
export function computeAccess(rows: PathRow[], userIds: string[], now: Date, apps: string[] | null): Map<string, ResolvedAccess> {
  const result = new Map<string, ResolvedAccess>();
  const userStatus = new Map<string, string>();
  for (const r of rows) {
    userStatus.set(r.user_id, r.user_status);
    if (!r.application_id || !r.entitlement_id) continue;
    const key = accessKey(r.user_id, r.application_id);
    let access = result.get(key);
    if (!access) {
      access = { user_id: r.user_id, application_id: r.application_id, user_status: r.user_status, entitlement_status: 'none', allowed: false, access_paths: [] };
      result.set(key, access);
    }
    const status = rowStatus({ status: r.status!, starts_at: new Date(r.starts_at!), ends_at: r.ends_at ? new Date(r.ends_at) : null }, now);
    if (r.organization_id) {
      access.access_paths.push({ source: r.source!, entitlement_id: r.entitlement_id, status, organization_id: r.organization_id, member_decision: r.member_decision! });
      if (r.member_decision !== 'included') continue;
    } else {
      access.access_paths.push({ source: r.source!, entitlement_id: r.entitlement_id, status });
    }
    if (RANK[status] > RANK[access.entitlement_status]) access.entitlement_status = status;
  }
  for (const userId of userIds) {
    for (const app of apps ?? []) {
      const key = accessKey(userId, app);
      if (!result.has(key) && userStatus.has(userId)) {
        result.set(key, { user_id: userId, application_id: app, user_status: userStatus.get(userId)!, entitlement_status: 'none', allowed: false, access_paths: [] });
      }
    }
  }
  for (const access of result.values()) access.allowed = access.user_status === 'active' && access.entitlement_status === 'active';
  return result;
}

export const accessKey = (userId: string, applicationId: string) => `${userId}|${applicationId}`;

/**
 * When a user's access to an Application ends with time alone, as its rows resolve at `now`: the
 * latest ends_at of the paths giving access (active; an organization's only where it includes the
 * member), or null when one of them never ends. With `organizationId`, only that Organization's
 * paths. A scheduled path that would take over later is not counted, so this is never later than
 * the real end. A token standing for that access (an app token) must not outlive it.
 */
export function accessEndsAt(rows: PathRow[], userId: string, applicationId: string, now: Date, organizationId?: string): Date | null {
  let end: Date | null = null;
  for (const r of rows) {
    if (r.user_id !== userId || r.application_id !== applicationId || !r.entitlement_id) continue;
    if (organizationId !== undefined && r.organization_id !== organizationId) continue;
    if (r.organization_id && r.member_decision !== 'included') continue;
    const endsAt = r.ends_at ? new Date(r.ends_at) : null;
    if (rowStatus({ status: r.status!, starts_at: new Date(r.starts_at!), ends_at: endsAt }, now) !== 'active') continue;
    if (!endsAt) return null;
    if (!end || endsAt > end) end = endsAt;
  }
  return end;
}
