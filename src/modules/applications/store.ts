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
