import type { Queryable } from '../../db/types.js';
import type { Application } from './schemas.js';

export interface ApplicationRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  icon_url: string | null;
  launch_url: string;
  redirect_uris: string[];
  support_url: string | null;
  email_from_name: string | null;
  settings_schema: Record<string, unknown>;
  permissions: { key: string; description: string }[];
  available_app_roles: string[];
  default_app_role: string | null;
  visibility: 'public' | 'invite_only' | 'internal';
  owner_user_id: string | null;
  owner_organization_id: string | null;
  review_status: 'pending_review' | 'approved' | 'rejected' | 'suspended';
  review_notes: string | null;
  tenant_id: string;
  test_mode: boolean;
  created_at: Date;
  updated_at: Date;
}

export const APP_COLUMNS = `a.id, a.slug, a.name, a.description, a.icon_url, a.launch_url, a.redirect_uris, a.support_url, a.email_from_name,
  a.settings_schema, a.permissions, a.available_app_roles, a.default_app_role, a.visibility, a.owner_user_id, a.owner_organization_id,
  a.review_status, a.review_notes, a.tenant_id, a.test_mode, a.created_at, a.updated_at`;

export function toApplication(r: ApplicationRow, staleCounts: Record<string, number> = {}): Application {
  return {
    ...r,
    permissions: r.permissions.map((p) => ({ key: p.key, description: p.description ?? '' })),
    settings_schema_stats: { stale_override_counts: staleCounts },
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

export const toListItem = (r: ApplicationRow) => ({
  id: r.id,
  slug: r.slug,
  name: r.name,
  description: r.description,
  icon_url: r.icon_url,
  visibility: r.visibility,
  review_status: r.review_status,
});

export async function findApplicationRow(db: Queryable, id: string): Promise<ApplicationRow | null> {
  const { rows } = await db.query<ApplicationRow>(`SELECT ${APP_COLUMNS} FROM applications a WHERE a.id = $1`, [id]);
  return rows[0] ?? null;
}

/** The columns of a new Application; it is created approved, created_at = updated_at = now. */
export type NewApplication = Omit<ApplicationRow, 'review_status' | 'review_notes' | 'created_at' | 'updated_at'>;

export async function insertApplication(db: Queryable, a: NewApplication, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO applications (id, slug, name, description, icon_url, launch_url, redirect_uris, support_url, email_from_name,
         settings_schema, permissions, available_app_roles, default_app_role, visibility, owner_user_id, owner_organization_id,
         review_status, tenant_id, test_mode, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, 'approved', $17, $18, $19, $19)`,
    [a.id, a.slug, a.name, a.description, a.icon_url, a.launch_url, a.redirect_uris, a.support_url,
      a.email_from_name, JSON.stringify(a.settings_schema), JSON.stringify(a.permissions), a.available_app_roles, a.default_app_role,
      a.visibility, a.owner_user_id, a.owner_organization_id, a.tenant_id, a.test_mode, now],
  );
}

/** Writes every column a PATCH may change (`next`, as nextApplicationRow fills it) and updated_at. */
export async function updateApplication(db: Queryable, id: string, next: Partial<ApplicationRow>, now: Date): Promise<void> {
  await db.query(
    `UPDATE applications SET name = $2, description = $3, icon_url = $4, launch_url = $5, redirect_uris = $6, support_url = $7,
            email_from_name = $8, settings_schema = $9, permissions = $10, available_app_roles = $11, default_app_role = $12,
            visibility = $13, review_status = $14, review_notes = $15, owner_user_id = $16, owner_organization_id = $17,
            tenant_id = $18, updated_at = $19
      WHERE id = $1`,
    [id, next.name, next.description, next.icon_url, next.launch_url, next.redirect_uris, next.support_url, next.email_from_name,
      JSON.stringify(next.settings_schema), JSON.stringify(next.permissions), next.available_app_roles, next.default_app_role,
      next.visibility, next.review_status, next.review_notes, next.owner_user_id, next.owner_organization_id, next.tenant_id, now],
  );
}

/** The PATCH's lock: FOR NO KEY UPDATE, so rows referencing the Application (KEY SHARE) are not blocked. */
export async function lockApplicationNoKeyUpdate(db: Queryable, id: string): Promise<void> {
  await db.query('SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE', [id]);
}

/** FOR UPDATE: also waits for (and blocks) the KEY SHARE locks of changes that add seats to its Tenant. */
export async function lockApplicationForUpdate(db: Queryable, id: string): Promise<void> {
  await db.query('SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [id]);
}

/** User `userId` exists in that mode, neither deleted nor erased. */
export async function isKnownUser(db: Queryable, userId: string, testMode: boolean): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM users WHERE id = $1 AND status <> 'deleted' AND erased_at IS NULL AND test_mode = $2`, [userId, testMode]);
  return !!rowCount;
}

/** Organization `organizationId` exists in that mode. */
export async function isKnownOrganization(db: Queryable, organizationId: string | null | undefined, testMode: boolean): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM organizations WHERE id = $1 AND test_mode = $2', [organizationId, testMode]);
  return !!rowCount;
}

/** The id of the Tenant the owner (a user, else an organization) already has, if any; none is made. */
export async function findOwnerTenantId(db: Queryable, nextUser: string | null, nextOrg: string | null): Promise<string | null> {
  const { rows: known } = await db.query<{ id: string }>(
    `SELECT id FROM tenants WHERE ${nextUser ? 'owner_user_id' : 'owner_organization_id'} = $1`,
    [nextUser ?? nextOrg],
  );
  return known[0]?.id ?? null;
}

export async function countTenantApplicationRows(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM applications WHERE tenant_id = $1', [tenantId]);
  return rows[0].n;
}

export async function countApplicationSubscriptions(db: Queryable, appId: string): Promise<number> {
  const { rows: subs } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = $1', [appId]);
  return subs[0].n;
}
