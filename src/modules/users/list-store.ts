import type { KeysetSql, Queryable } from '../../db/types.js';
import { conditions } from '../../db/page.js';
import { mayBeStoredEmail, USER_COLUMNS, type UserRow } from './store.js';
import { accessPathSql, accessReachSql } from '../../access/resolve.js';
import type { UserListQuery } from './schemas.js';

export async function applicationExists(db: Queryable, id: string): Promise<boolean> {
  return (await db.query('SELECT 1 FROM applications WHERE id = $1', [id])).rowCount > 0;
}

/**
 * The most users with an access path to an Application that a page filtered on it is read from
 * (findAppUsers): beyond, the page walks the users newest first, testing each (accessPathSql).
 */
export const APP_USERS_MAX = 1000;

/**
 * The users with an access path to the Application (accessReachSql), read from its Entitlements by
 * their application index, when there are at most `max`; null when there are more. A page of the users
 * of an Application few users reach is then read from these (by id, at most `max`) instead of testing
 * every user of the platform, newest first, until the page fills (docs/conventions.md, Queries at scale).
 */
export async function findAppUsers(db: Queryable, app: string, max = APP_USERS_MAX): Promise<string[] | null> {
  const { rows } = await db.query<{ user_id: string }>(`SELECT r.user_id FROM (${accessReachSql('$1')}) r LIMIT $2::int`, [app, max + 1]);
  const users = new Set(rows.map((r) => r.user_id));
  return rows.length > max ? null : [...users];
}

/** What GET /v1/users filters on, decided by the service. */
export interface UserListFilter extends Pick<UserListQuery, 'status' | 'email' | 'created_after' | 'created_before' | 'organization_id' | 'q'> {
  /** Deleted users too, when no status is asked for. */
  includeDeleted: boolean;
  /** Only users with an access path to this Application. */
  app: string | null | undefined;
  /** All the users with an access path to `app`, when few (findAppUsers); null: too many to list. */
  appUsers: string[] | null;
}

/** The list's conditions and their parameters ($1…); `prefix`: the parameter number of q (0: none). */
export interface UserListConditions {
  where: string[];
  params: unknown[];
  prefix: number;
}

export function userListConditions(q: UserListFilter): UserListConditions {
  const { where, params, add } = conditions();
  if (q.status) add((n) => `u.status = $${n}`, q.status);
  else if (!q.includeDeleted) where.push(`u.status <> 'deleted'`);
  if (q.email && !mayBeStoredEmail(q.email)) where.push('false');
  else if (q.email) add((n) => `u.email_lower = lower($${n})`, q.email);
  if (q.created_after) add((n) => `u.created_at > $${n}`, q.created_after);
  if (q.created_before) add((n) => `u.created_at < $${n}`, q.created_before);
  const app = q.app;
  if (app && q.appUsers) add((n) => `u.id = ANY($${n}::text[])`, q.appUsers);
  else if (app) add((n) => accessPathSql('u.id', `$${n}`), app);
  if (q.organization_id) add((n) => `EXISTS (SELECT 1 FROM organization_members om WHERE om.user_id = u.id AND om.organization_id = $${n} AND om.membership_status = 'active')`, q.organization_id);
  const prefix = q.q ? params.push(q.q) : 0;
  return { where, params, prefix };
}

/**
 * One page of users: q (`prefix`) is an email or display_name starting with it. The two prefixes are
 * two index ranges on two tables, so each is its own page (the newest rows matching it) and the page is
 * the newest of both: one condition `email LIKE OR display_name LIKE` read every user (docs/conventions.md,
 * Queries at scale). Lowered in SQL like the columns, never in JavaScript: the two lower İ and a final Σ differently.
 */
export async function listUserRows(db: Queryable, { where, params, prefix }: UserListConditions, ks: KeysetSql): Promise<UserRow[]> {
  const page = (match: string) =>
    `SELECT ${USER_COLUMNS} FROM users u JOIN profiles p ON p.user_id = u.id
      WHERE ${[...where, match, ks.condition].join(' AND ')} ${ks.orderLimit}`;
  const sql = prefix
    ? `SELECT * FROM ((${page(`u.email_lower ^@ lower($${prefix})`)}) UNION (${page(`lower(p.display_name) ^@ lower($${prefix})`)})) u ${ks.orderLimit}`
    : page('TRUE');
  const { rows } = await db.query<UserRow>(sql, [...params, ...ks.params]);
  return rows;
}
