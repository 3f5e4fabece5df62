import type { Ctx } from '../context.js';
import type { Queryable } from '../db/types.js';
import { SESSION_SQL, actorOfSession, type SessionRow } from '../auth/credentials.js';
import { accessKey, computeAccess, PATH_ROWS_SQL, type PathRow, type ResolvedAccess } from './resolve.js';

export interface RoleGrant {
  id: string;
  name: string;
  permissions: string[];
}

export interface AccessCheck {
  app: { id: string; slug: string; review_status: string; default_app_role: string | null; tenant_suspended: boolean } | null;
  user: { id: string; status: string; erased: boolean; deleted: boolean } | null;
  access: ResolvedAccess | null;
  /** Every path row of the pair, as resolved into `access` (e.g. for accessEndsAt). */
  paths: PathRow[];
  /** Explicit assignments of the Application's Roles. */
  roles: RoleGrant[];
  /** The default_app_role's Role, held implicitly while access is active. */
  defaultRole: RoleGrant | null;
}

/**
 * One user's access to one Application with everything the hot paths need (the Application, the
 * user, every path, the user's app Roles and the default Role) in one round trip. The resolution is
 * the one resolver's (PATH_ROWS_SQL + computeAccess), so it cannot drift from the flips.
 */
export async function checkAccess(db: Queryable, userId: string, appId: string, now: Date): Promise<AccessCheck> {
  const { rows } = await db.query<CheckRow>(`${CHECK_CTES} SELECT ${CHECK_COLUMNS}`, [userId, appId]);
  return accessCheckOf(rows[0], userId, appId, now);
}

/**
 * checkAccess and a caller's session in one round trip (the hottest route authenticates in its own
 * query): the session of parameter $3 (SESSION_SQL's columns) beside the check of $1 and $2.
 */
async function checkAccessWithSession<S>(db: Queryable, sessionSql: string, userId: string, appId: string, sessionId: string, now: Date): Promise<{ session: S | undefined; check: AccessCheck }> {
  const { rows } = await db.query<CheckRow & S & { user_id: string | null }>(
    `${CHECK_CTES} SELECT sess.*, ${CHECK_COLUMNS} FROM (SELECT 1) one LEFT JOIN (${sessionSql}) sess ON true`,
    [userId, appId, sessionId],
  );
  const row = rows[0];
  return { session: row.user_id === null ? undefined : row, check: accessCheckOf(row, userId, appId, now) };
}

interface CheckRow {
  app: AccessCheck['app'];
  usr: AccessCheck['user'];
  paths: PathRow[] | null;
  roles: RoleGrant[] | null;
  default_role: RoleGrant | null;
}

const CHECK_CTES = `WITH ids AS (SELECT $1::text AS id),
          a AS (SELECT a.id, a.slug, a.review_status, a.default_app_role, COALESCE(t.suspended, false) AS tenant_suspended
                  FROM applications a LEFT JOIN tenants t ON t.id = a.tenant_id WHERE a.id = $2),
          p AS (${PATH_ROWS_SQL('ARRAY[$2::text]')})`;

const CHECK_COLUMNS = `(SELECT row_to_json(a) FROM a) AS app,
            (SELECT json_build_object('id', u.id, 'status', u.status, 'erased', u.erased_at IS NOT NULL, 'deleted', u.status = 'deleted')
               FROM users u WHERE u.id = $1) AS usr,
            (SELECT json_agg(p) FROM p) AS paths,
            (SELECT json_agg(json_build_object('id', r.id, 'name', r.name, 'permissions', r.permissions) ORDER BY r.id)
               FROM role_assignments ra JOIN roles r ON r.id = ra.role_id WHERE ra.user_id = $1 AND r.scope = $2) AS roles,
            (SELECT json_build_object('id', r.id, 'name', r.name, 'permissions', r.permissions)
               FROM a JOIN roles r ON r.id = 'role_' || a.slug || '_' || a.default_app_role) AS default_role`;

function accessCheckOf(r: CheckRow, userId: string, appId: string, now: Date): AccessCheck {
  const access = r.usr ? (computeAccess(r.paths ?? [], [userId], now, [appId]).get(accessKey(userId, appId)) ?? null) : null;
  return { app: r.app, user: r.usr, access, paths: r.paths ?? [], roles: r.roles ?? [], defaultRole: r.default_role };
}

/**
 * The access check for a request's caller, confirming first an actor the gate left unconfirmed
 * (routes with `session: 'fused'`): its session and the check come back in one round trip, and the
 * returned ctx carries the confirmed actor (with its platform permissions). 401 if the session is not live.
 */
export async function checkAccessForCaller(ctx: Ctx, userId: string, appId: string): Promise<{ ctx: Ctx; check: AccessCheck }> {
  if (ctx.actor.type !== 'user' || !ctx.actor.unconfirmed) return { ctx, check: await checkAccess(ctx.db, userId, appId, ctx.now) };
  const { userId: sub, sessionId } = ctx.actor;
  const fused = await checkAccessWithSession<SessionRow>(ctx.db, SESSION_SQL(3), userId, appId, sessionId, ctx.now);
  const actor = actorOfSession({ sub, sid: sessionId, test_mode: ctx.mode === 'test' }, fused.session, ctx.now);
  return { ctx: { ...ctx, actor }, check: fused.check };
}
