import type { Queryable } from '../db/types.js';

export interface OwnedApplication {
  id: string;
  slug: string;
  owner_user_id: string | null;
  owner_organization_id: string | null;
  permissions: { key: string; description?: string }[];
}

/**
 * An Application's owner: its owner_user_id, or any active org_admin of owner_organization_id. Not of
 * an `internal` Application, which Part B shows only to applications.manage and its own key: owner
 * rights (its keys, webhooks, entitlement list) go with seeing it (docs/decisions.md "Owners").
 */
export async function isApplicationOwner(db: Queryable, userId: string, applicationId: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `SELECT 1 FROM applications a
      WHERE a.id = $1 AND a.visibility <> 'internal' AND (a.owner_user_id = $2 OR EXISTS (
        SELECT 1 FROM organization_members m WHERE m.organization_id = a.owner_organization_id AND m.user_id = $2
           AND m.role = 'org_admin' AND m.membership_status = 'active'))`,
    [applicationId, userId],
  );
  return rowCount > 0;
}

/**
 * SQL array: the Organizations user `$userParam` is an active org_admin of, whose Applications and
 * Tenants they own. Compared with `owner_organization_id = ANY (…)`, not `IN (SELECT …)`: the owner is
 * then an index condition instead of a hashed subquery filtering every row (docs/conventions.md).
 */
export const ADMINED_ORGANIZATIONS_SQL = (userParam: number) => `ARRAY(SELECT m.organization_id FROM organization_members m
  WHERE m.user_id = $${userParam} AND m.role = 'org_admin' AND m.membership_status = 'active')`;

/**
 * Application ids the user owns (directly or as org_admin of the owning Organization), `internal` ones
 * excepted. The Organizations as an array (= ANY), not `IN (SELECT …)`: both owners are then index
 * conditions (applications_owner_user_idx, applications_owner_org_idx) instead of a hashed subquery
 * filtering every Application (docs/conventions.md, Queries at scale).
 */
export const OWNED_APPLICATIONS_SQL = (userParam: number) => `SELECT a.id FROM applications a
  WHERE a.visibility <> 'internal' AND (a.owner_user_id = $${userParam} OR a.owner_organization_id = ANY (${ADMINED_ORGANIZATIONS_SQL(userParam)}))`;

export async function findApplication(db: Queryable, id: string): Promise<OwnedApplication | null> {
  const { rows } = await db.query<OwnedApplication>('SELECT id, slug, owner_user_id, owner_organization_id, permissions FROM applications WHERE id = $1', [id]);
  return rows[0] ?? null;
}
