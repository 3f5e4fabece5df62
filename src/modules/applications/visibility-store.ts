import type { KeysetSql, Queryable } from '../../db/types.js';
import { type Conditions, conditions, selectPage } from '../../db/page.js';
import { accessPathSql } from '../../access/resolve.js';
import { ADMINED_ORGANIZATIONS_SQL } from '../../access/ownership.js';
import { APP_COLUMNS, type ApplicationRow } from './store.js';
import type { ApplicationListQuery } from './schemas.js';

/** Who is asking, reduced to what Application visibility depends on. */
export interface Viewer {
  admin: boolean;
  userId: string | null;
  keyApp: string | null;
}

/** SQL: the user owns Application `a` (owner_user_id, or active org_admin of the owning Organization); = ANY as OWNED_APPLICATIONS_SQL. */
export const ownerCondition = (userParam: number) => `(a.owner_user_id = $${userParam} OR a.owner_organization_id = ANY (${ADMINED_ORGANIZATIONS_SQL(userParam)}))`;

/** SQL: the user (parameter `$userParam`) has any access path to Application `a` (accessPathSql). */
export const accessPathToApp = (userParam: number) => accessPathSql(`$${userParam}`, 'a.id');

/**
 * Part B visibility: public to everyone while approved; invite_only to users with an access path;
 * internal only to applications.manage and the Application's own key (not its owner). Owners, the own
 * key and applications.manage see their other Applications in every review_status.
 */
export function visibleCondition(viewer: Viewer, params: unknown[]): string {
  if (viewer.admin) return 'TRUE';
  // An app-confined key reaches only its own Application (Part A, Authentication 4; others 404).
  if (viewer.keyApp) {
    params.push(viewer.keyApp);
    return `a.id = $${params.length}`;
  }
  const parts: string[] = [];
  if (viewer.userId) {
    params.push(viewer.userId);
    const u = params.length;
    parts.push(`(a.visibility <> 'internal' AND ${ownerCondition(u)})`);
    parts.push(`(a.review_status = 'approved' AND (a.visibility = 'public' OR (a.visibility = 'invite_only' AND ${accessPathToApp(u)})))`);
  } else {
    parts.push(`(a.review_status = 'approved' AND a.visibility = 'public')`);
  }
  return `(${parts.join(' OR ')})`;
}

/** Application `id` if the viewer may see it (Part B visibility), else null. */
export async function findVisibleApplicationRow(db: Queryable, id: string, viewer: Viewer): Promise<ApplicationRow | null> {
  const params: unknown[] = [id];
  const condition = visibleCondition(viewer, params);
  const { rows } = await db.query<ApplicationRow>(`SELECT ${APP_COLUMNS} FROM applications a WHERE a.id = $1 AND ${condition}`, params);
  return rows[0] ?? null;
}

/** The viewer may see Application `appId` or, as a user, holds an access path to it (any status). */
export async function isApplicationKnownTo(db: Queryable, appId: string, viewer: Viewer): Promise<boolean> {
  const params: unknown[] = [appId];
  const known = [visibleCondition(viewer, params)];
  if (viewer.userId) known.push(accessPathToApp(params.push(viewer.userId)));
  const { rowCount } = await db.query(`SELECT 1 FROM applications a WHERE a.id = $1 AND (${known.join(' OR ')})`, params);
  return !!rowCount;
}

export type ApplicationListFilters = Pick<ApplicationListQuery, 'visibility' | 'review_status' | 'owned' | 'tenant_id' | 'owner_user_id' | 'owner_organization_id'>;

/**
 * The WHERE conditions and their parameters of GET /v1/applications: what the viewer may see, then each
 * filter sent. `owned` needs a user viewer (the caller answers an empty page to anyone else).
 */
export function applicationListWhere(viewer: Viewer, q: ApplicationListFilters): Conditions {
  const params: unknown[] = [];
  const { where, add } = conditions([visibleCondition(viewer, params)], params);
  if (q.visibility) add((n) => `a.visibility = $${n}`, q.visibility);
  if (q.review_status) add((n) => `a.review_status = $${n}`, q.review_status);
  if (q.owned) {
    params.push(viewer.userId);
    where.push(ownerCondition(params.length));
  }
  if (q.tenant_id) add((n) => `a.tenant_id = $${n}`, q.tenant_id);
  if (q.owner_user_id) add((n) => `a.owner_user_id = $${n}`, q.owner_user_id);
  if (q.owner_organization_id) add((n) => `a.owner_organization_id = $${n}`, q.owner_organization_id);
  return { where, params };
}

/** One keyset page of the Applications `where` (applicationListWhere) selects. */
export async function listApplicationRows(db: Queryable, filter: Conditions, ks: KeysetSql): Promise<ApplicationRow[]> {
  return selectPage<ApplicationRow>(db, `SELECT ${APP_COLUMNS} FROM applications a`, filter, ks);
}
