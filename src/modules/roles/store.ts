import type { Queryable } from '../../db/types.js';
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
