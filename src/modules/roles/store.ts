import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import { OWNED_APPLICATIONS_SQL } from '../../access/ownership.js';
import { visibleCondition, type Viewer } from '../applications/visibility.js';
import type { Role } from './schemas.js';

export interface RoleRow {
  id: string;
  name: string;
  scope: string;
  description: string | null;
  permissions: string[];
  seed: boolean;
  assignment_count: number;
  created_at: Date;
  updated_at: Date;
}

/** The reader's mode, as row-level security reads it (an assignment carries its user's mode: migration 0031). */
const READER_MODE = `(current_setting('app.test_mode', true) = 'on')`;

// assignment_count counts the holders the caller's mode sees (users are mode-isolated; a Role is not).
export const ROLE_COLUMNS = `r.id, r.name, r.scope, r.description, r.permissions, r.seed, r.created_at, r.updated_at,
  (SELECT count(*)::int FROM role_assignments ra WHERE ra.role_id = r.id AND ra.test_mode = ${READER_MODE}) AS assignment_count`;

/**
 * A Role's holders of both modes (`n`: held in either, it stays) and of the reader's (`visible`: the
 * count reported; the other mode's is not theirs to see), of Role $1.
 */
export const ROLE_HOLDERS_SQL = `SELECT count(*)::int AS n, (count(*) FILTER (WHERE ra.test_mode = ${READER_MODE}))::int AS visible
  FROM role_assignments ra WHERE ra.role_id = $1`;

export const toRole = (r: RoleRow): Role => ({ ...r, created_at: r.created_at.toISOString(), updated_at: r.updated_at.toISOString() });

export async function findRole(db: Queryable, id: string): Promise<RoleRow | null> {
  const { rows } = await db.query<RoleRow>(`SELECT ${ROLE_COLUMNS} FROM roles r WHERE r.id = $1`, [id]);
  return rows[0] ?? null;
}

/** The WHERE conditions of a list and their parameters, numbered from $1 (a keyset page's come after). */
export interface ListFilter {
  where: string[];
  params: unknown[];
}

/** What a reader of GET /v1/roles may see, decided by the service. */
export interface RoleReader {
  /** Platform Roles (a holder of any platform permission). */
  platform: boolean;
  /** Every Application's Roles (platform roles.manage, not app-confined). */
  allApps: boolean;
  /** The Application of an app-confined key. */
  keyApp: string | null;
  /** A user's owned Applications' Roles. */
  userId: string | null;
}

/** GET /v1/roles's conditions, or null when the reader may see no Role at all. */
export function roleListFilter(reader: RoleReader, scope: string | undefined): ListFilter | null {
  const params: unknown[] = [];
  const scopes: string[] = [];
  if (reader.platform) scopes.push(`r.scope = 'platform'`);
  if (reader.allApps) scopes.push(`r.scope <> 'platform'`);
  else {
    if (reader.keyApp) scopes.push(`r.scope = $${params.push(reader.keyApp)}`);
    if (reader.userId !== null) {
      params.push(reader.userId);
      // Owner rights never reach an internal Application (Part B visibility), as in mayReadRole.
      scopes.push(`r.scope IN (${OWNED_APPLICATIONS_SQL(params.length)})`);
    }
  }
  if (scopes.length === 0) return null;
  const where = [`(${scopes.join(' OR ')})`];
  if (scope) where.push(`r.scope = $${params.push(scope)}`);
  return { where, params };
}

export async function listRoleRows(db: Queryable, filter: ListFilter, ks: KeysetSql): Promise<RoleRow[]> {
  return selectPage<RoleRow>(db, `SELECT ${ROLE_COLUMNS} FROM roles r`, filter, ks);
}

/** The Applications whose permission keys GET /v1/permissions lists: an app-confined key's own, else those `viewer` sees; of `scope` when given. */
export async function listPermissionApplications(
  db: Queryable,
  keyApp: string | null,
  viewer: Viewer,
  scope: string | undefined,
): Promise<{ id: string; permissions: { key: string; description: string }[] }[]> {
  const params: unknown[] = [];
  const where = [keyApp ? `a.id = $${params.push(keyApp)}` : visibleCondition(viewer, params)];
  if (scope) where.push(`a.id = $${params.push(scope)}`);
  const { rows } = await db.query<{ id: string; permissions: { key: string; description: string }[] }>(
    `SELECT a.id, a.permissions FROM applications a WHERE ${where.join(' AND ')} ORDER BY a.id`,
    params,
  );
  return rows;
}

/** Inserts a non-seed Role; returns the rows inserted (0: the id is taken). */
export async function insertRole(db: Queryable, id: string, name: string, scope: string, description: string | null, permissions: string[], now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `INSERT INTO roles (id, name, scope, description, permissions, seed, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, false, $6, $6)
       ON CONFLICT DO NOTHING`,
    [id, name, scope, description, permissions, now],
  );
  return rowCount;
}

/** A Role's scope, read without a lock. */
export async function findRoleScope(db: Queryable, id: string): Promise<{ scope: string } | null> {
  const { rows } = await db.query<{ scope: string }>('SELECT scope FROM roles WHERE id = $1', [id]);
  return rows[0] ?? null;
}

/** Locks a Role's row against other writers (FOR NO KEY UPDATE); returns the rows locked. */
export async function lockRoleNoKeyUpdate(db: Queryable, id: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM roles WHERE id = $1 FOR NO KEY UPDATE', [id]);
  return rowCount;
}

/** Locks a Role's row against its deletion (FOR KEY SHARE); returns the rows locked (0: gone). */
export async function lockRoleKeyShare(db: Queryable, id: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM roles WHERE id = $1 FOR KEY SHARE', [id]);
  return rowCount;
}

/** Locks a Role's row to delete it (FOR UPDATE); returns the rows locked (0: gone). */
export async function lockRole(db: Queryable, id: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM roles WHERE id = $1 FOR UPDATE', [id]);
  return rowCount;
}

/** Locks an Application against a PATCH of it (FOR SHARE) while one of its Roles is written; returns the rows locked. */
export async function lockApplicationShare(db: Queryable, applicationId: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM applications WHERE id = $1 FOR SHARE', [applicationId]);
  return rowCount;
}

/** Locks an Application (FOR NO KEY UPDATE) and reads its default_app_role and Tenant; null when it is gone. */
export async function lockApplicationDefaultRole(db: Queryable, applicationId: string): Promise<{ default_app_role: string | null; tenant_id: string } | null> {
  const { rows } = await db.query<{ default_app_role: string | null; tenant_id: string }>('SELECT default_app_role, tenant_id FROM applications WHERE id = $1 FOR NO KEY UPDATE', [applicationId]);
  return rows[0] ?? null;
}

export async function updateRole(db: Queryable, id: string, description: string | null, permissions: string[], now: Date): Promise<void> {
  await db.query('UPDATE roles SET description = $2, permissions = $3, updated_at = $4 WHERE id = $1', [id, description, permissions, now]);
}

/** Role $1's holders: of both modes (`n`) and of the reader's (`visible`); see ROLE_HOLDERS_SQL. */
export async function countRoleHolders(db: Queryable, id: string): Promise<{ n: number; visible: number }> {
  const { rows } = await db.query<{ n: number; visible: number }>(ROLE_HOLDERS_SQL, [id]);
  return rows[0];
}

export async function deleteRoleRow(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM roles WHERE id = $1', [id]);
}

export interface AssignmentRow {
  user_id: string;
  role_id: string;
  application_id: string | null;
  assigned_at: Date;
  assigned_by_type: string | null;
  assigned_by_id: string | null;
}

/** A user's explicit assignments, of one Application when `filter` (its id) is given. */
export async function listAssignments(db: Queryable, userId: string, filter: string | null): Promise<AssignmentRow[]> {
  const { rows } = await db.query<AssignmentRow>(
    `SELECT user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id FROM role_assignments
      WHERE user_id = $1 ${filter ? 'AND application_id = $2' : ''} ORDER BY assigned_at, role_id`,
    filter ? [userId, filter] : [userId],
  );
  return rows;
}

export async function findAssignment(db: Queryable, userId: string, roleId: string): Promise<AssignmentRow | null> {
  const { rows } = await db.query<AssignmentRow>(
    'SELECT user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id FROM role_assignments WHERE user_id = $1 AND role_id = $2',
    [userId, roleId],
  );
  return rows[0] ?? null;
}

/** Inserts an assignment; null when the user holds the Role already (nothing written). */
export async function insertAssignment(
  db: Queryable,
  userId: string,
  roleId: string,
  applicationId: string | null,
  now: Date,
  byType: string | null,
  byId: string | null,
): Promise<AssignmentRow | null> {
  const { rows } = await db.query<AssignmentRow>(
    `INSERT INTO role_assignments (user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id)
       VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
       RETURNING user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id`,
    [userId, roleId, applicationId, now, byType, byId],
  );
  return rows[0] ?? null;
}

/** Deletes an assignment; returns the rows deleted. */
export async function deleteAssignment(db: Queryable, userId: string, roleId: string): Promise<number> {
  const { rowCount } = await db.query('DELETE FROM role_assignments WHERE user_id = $1 AND role_id = $2', [userId, roleId]);
  return rowCount;
}

/** Those of the given Applications that have a default_app_role, by id. */
export async function listDefaultRoleApplications(db: Queryable, ids: string[]): Promise<{ id: string; slug: string; default_app_role: string }[]> {
  const { rows } = await db.query<{ id: string; slug: string; default_app_role: string }>(
    'SELECT id, slug, default_app_role FROM applications WHERE id = ANY($1::text[]) AND default_app_role IS NOT NULL ORDER BY id',
    [ids],
  );
  return rows;
}

export const PLATFORM_PERMISSION_DESCRIPTIONS: Record<string, string> = {
  'users.list': 'List and read users.',
  'users.manage': 'Create, change, suspend and delete users.',
  'entitlements.manage': 'Grant and change Entitlements.',
  'applications.manage': 'Register and moderate Applications.',
  'roles.manage': 'Manage Roles and their assignments.',
  'organizations.manage': 'Manage every Organization.',
  'billing.manage': 'Read subscriptions and open billing portals.',
  'billing.refund': 'Issue refunds.',
  'audit.view': 'Read the audit log.',
  'webhooks.manage': 'Manage every webhook subscription.',
  'api_keys.manage': 'Manage API keys.',
  'tenants.manage': 'Manage Tenants and tier changes.',
};
