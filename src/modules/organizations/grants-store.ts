import type { Queryable } from '../../db/types.js';
import { ENT_COLUMNS, nextUpdatedAt, type EntitlementRow } from '../entitlements/store.js';

/** The Organization's live (active or disabled) grant of the Application, locked; null when none. */
export async function lockLiveOrgGrant(db: Queryable, orgId: string, applicationId: string): Promise<EntitlementRow | null> {
  const { rows: live } = await db.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.organization_id = $1 AND e.application_id = $2 AND e.status IN ('active', 'disabled') FOR UPDATE`,
    [orgId, applicationId],
  );
  return live[0] ?? null;
}

export interface OrgGrantInsert {
  id: string;
  orgId: string;
  applicationId: string;
  orderId: string | null;
  startsAt: Date;
  endsAt: Date | null;
  memberScope: string;
  memberOverrides: string[];
  testMode: boolean;
  now: Date;
  /** now for a grant that starts at once, else null (the start notice is still to come). */
  startNotifiedAt: Date | null;
}

/** A new active org_seat grant. */
export async function insertOrgGrant(db: Queryable, g: OrgGrantInsert): Promise<EntitlementRow> {
  const { rows } = await db.query<EntitlementRow>(
    `INSERT INTO entitlements AS e (id, organization_id, application_id, status, source, order_id, starts_at, ends_at, member_scope, member_overrides,
           test_mode, created_at, updated_at, start_notified_at)
         VALUES ($1, $2, $3, 'active', 'org_seat', $4, $5, $6, $7, $8, $9, $10, $10, $11) RETURNING ${ENT_COLUMNS}`,
    [g.id, g.orgId, g.applicationId, g.orderId, g.startsAt, g.endsAt, g.memberScope, g.memberOverrides, g.testMode, g.now, g.startNotifiedAt],
  );
  return rows[0];
}

/** The Organization's grants whose member_overrides name the user, locked, in id order. */
export async function lockGrantsNamingMember(db: Queryable, orgId: string, userId: string): Promise<EntitlementRow[]> {
  const { rows: before } = await db.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.organization_id = $1 AND $2 = ANY(e.member_overrides) ORDER BY e.id FOR UPDATE`,
    [orgId, userId],
  );
  return before;
}

/** Takes the user out of the member_overrides of the Organization's grants; returns the grants changed. */
export async function updateOverridesWithoutMember(db: Queryable, orgId: string, userId: string, now: Date): Promise<EntitlementRow[]> {
  const { rows: after } = await db.query<EntitlementRow>(
    `UPDATE entitlements e SET member_overrides = array_remove(member_overrides, $2), updated_at = ${nextUpdatedAt('$3')}
          WHERE e.organization_id = $1 AND $2 = ANY(e.member_overrides) RETURNING ${ENT_COLUMNS}`,
    [orgId, userId, now],
  );
  return after;
}
