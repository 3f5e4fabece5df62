import type { KeysetSql, Queryable } from '../../db/types.js';
import { conditions, selectPage } from '../../db/page.js';
import { ADMINED_ORGANIZATIONS_SQL } from '../../access/ownership.js';
import type { Mode } from '../../db/types.js';
import type { Plan } from './plans.js';
import type { Tenant, TenantListQuery, Tier } from './schemas.js';

export interface TenantRow {
  id: string;
  owner_type: 'user' | 'organization';
  owner_user_id: string | null;
  owner_organization_id: string | null;
  tier: string;
  plan: Plan;
  region: string;
  status: string;
  suspended: boolean;
  subscription_status: string;
  restricted: boolean;
}

const TENANT_COLUMNS = 'id, owner_type, owner_user_id, owner_organization_id, tier, plan, region, status, suspended, subscription_status, restricted';

export async function findTenant(db: Queryable, id: string): Promise<TenantRow | null> {
  const { rows } = await db.query<TenantRow>(`SELECT ${TENANT_COLUMNS} FROM tenants WHERE id = $1`, [id]);
  return rows[0] ?? null;
}

/** An owner's Tenant, unless the owner has one already (a unique index per owner column). */
export async function insertOwnerTenant(
  db: Queryable,
  tenant: { id: string; owner_type: 'user' | 'organization'; owner_user_id: string | null | undefined; owner_organization_id: string | null | undefined; plan: Plan },
  now: Date,
): Promise<void> {
  await db.query(
    `INSERT INTO tenants (id, owner_type, owner_user_id, owner_organization_id, tier, plan, region, created_at, updated_at)
     VALUES ($1, $2, $3, $4, 'shared', $5, 'us-east-1', $6, $6) ON CONFLICT DO NOTHING`,
    [tenant.id, tenant.owner_type, tenant.owner_user_id, tenant.owner_organization_id, tenant.plan, now],
  );
}

/**
 * The owner's Tenant, locked: the caller counts its Applications against the plan cap, and a creation
 * and an ownership move into one Tenant at once must not both see room for the last one.
 */
export async function lockOwnerTenant(db: Queryable, ownerType: 'user' | 'organization', ownerId: string | null | undefined): Promise<TenantRow> {
  const column = ownerType === 'user' ? 'owner_user_id' : 'owner_organization_id';
  const { rows } = await db.query<TenantRow>(`SELECT ${TENANT_COLUMNS} FROM tenants WHERE ${column} = $1 FOR NO KEY UPDATE`, [ownerId]);
  return rows[0];
}

/**
 * The Tenant's status, its row read FOR KEY SHARE and so held until the caller's write commits: a
 * tier-change move to in_progress (the Tenant FOR UPDATE) waits for writes that found it active, and a
 * write arriving while that move is committing waits for it and reads `migrating`. (A plain read let a
 * write that had found the Tenant active commit after the migration had started.) KEY SHARE conflicts
 * with no other Tenant lock the writes take (FOR NO KEY UPDATE for seats and Application counts).
 */
export async function lockTenantStatus(db: Queryable, tenantId: string): Promise<{ status: string } | null> {
  const { rows } = await db.query<{ status: string }>('SELECT status FROM tenants WHERE id = $1 FOR KEY SHARE', [tenantId]);
  return rows[0] ?? null;
}

export async function findTenantPlan(db: Queryable, tenantId: string): Promise<{ plan: Plan } | null> {
  const { rows } = await db.query<{ plan: Plan }>('SELECT plan FROM tenants WHERE id = $1', [tenantId]);
  return rows[0] ?? null;
}

/** Whether the Tenant is restricted (false when there is no such Tenant). */
export async function isTenantRestricted(db: Queryable, tenantId: string): Promise<boolean> {
  const { rows } = await db.query<{ restricted: boolean }>('SELECT restricted FROM tenants WHERE id = $1', [tenantId]);
  return rows[0]?.restricted ?? false;
}

/** The Application's Tenant column (null: no such Application; the column itself may be null). */
export async function findApplicationTenant(db: Queryable, applicationId: string): Promise<{ tenant_id: string | null } | null> {
  const { rows } = await db.query<{ tenant_id: string | null }>('SELECT tenant_id FROM applications WHERE id = $1', [applicationId]);
  return rows[0] ?? null;
}

/**
 * The same, read under a KEY SHARE lock of the Application held to commit: an ownership move (which
 * takes the Application FOR UPDATE) waits for the caller, so the Tenant read stays the Application's.
 */
export async function lockApplicationTenant(db: Queryable, applicationId: string): Promise<{ tenant_id: string | null } | null> {
  const { rows } = await db.query<{ tenant_id: string | null }>('SELECT tenant_id FROM applications WHERE id = $1 FOR KEY SHARE', [applicationId]);
  return rows[0] ?? null;
}

/** A Tenant with its subscription mirror (the columns 0007 adds). */
export interface TenantRecord {
  id: string;
  owner_type: 'user' | 'organization';
  owner_user_id: string | null;
  owner_organization_id: string | null;
  tier: Tier;
  plan: Plan;
  region: string;
  status: 'active' | 'migrating';
  subscription_status: string;
  restricted: boolean;
  application_count: number;
  stripe_customer_id: string | null;
  stripe_subscription_id: string | null;
  processor_plan: Plan | null;
  current_period_start: Date | null;
  current_period_end: Date | null;
  cancel_at_period_end: boolean;
  seats_last_synced_at: Date | null;
  last_processor_event_created: Date | null;
  /** The processor subscription whose own event last set subscription_status (null: not known). */
  status_subscription_id: string | null;
  add_ons: { code: string; amount: number }[];
  currency: string;
  created_at: Date;
  updated_at: Date;
}

export const TENANT_RECORD_COLUMNS = `t.id, t.owner_type, t.owner_user_id, t.owner_organization_id, t.tier, t.plan, t.region, t.status,
  t.subscription_status, t.restricted, (SELECT count(*)::int FROM applications a WHERE a.tenant_id = t.id) AS application_count,
  t.stripe_customer_id, t.stripe_subscription_id, t.processor_plan, t.current_period_start, t.current_period_end,
  t.cancel_at_period_end, t.seats_last_synced_at, t.last_processor_event_created, t.status_subscription_id, t.add_ons, t.currency, t.created_at, t.updated_at`;

/**
 * SQL: the user owns Tenant `t` (its owner_user_id, or an active org_admin of owner_organization_id).
 * The Organizations as an array (= ANY), not `IN (SELECT …)`: both sides of the OR are then index
 * conditions, where a hashed subquery made a user's Tenant list walk every Tenant newest first
 * (docs/conventions.md, Queries at scale).
 */
export const tenantOwnerCondition = (userParam: number) => `(t.owner_user_id = $${userParam} OR t.owner_organization_id = ANY (${ADMINED_ORGANIZATIONS_SQL(userParam)}))`;

/**
 * A Tenant belongs to its owner's mode: it is visible only where its owner (a User or an Organization,
 * both moded tables under row-level security) is, so a test-mode credential never reaches a live
 * Tenant. On the unrestricted system connection every Tenant passes. Scalar subqueries (one primary
 * key probe per Tenant): as EXISTS, a list page was planned as a hashed scan of every user.
 */
export const TENANT_IN_MODE = `(COALESCE((SELECT true FROM users ou WHERE ou.id = t.owner_user_id), false)
  OR COALESCE((SELECT true FROM organizations oo WHERE oo.id = t.owner_organization_id), false))`;

export async function findTenantRecord(db: Queryable, id: string, forUpdate = false): Promise<TenantRecord | null> {
  const { rows } = await db.query<TenantRecord>(`SELECT ${TENANT_RECORD_COLUMNS} FROM tenants t WHERE t.id = $1 AND ${TENANT_IN_MODE} ${forUpdate ? 'FOR UPDATE OF t' : ''}`, [id]);
  return rows[0] ?? null;
}

/** The WHERE conditions of a list and their parameters ($1 up); a keyset page's parameters follow them. */
export interface ListWhere {
  where: string[];
  params: unknown[];
}

/** A Tenant list's conditions: the mode's Tenants, those the user owns (null: every one), the query's filters. */
export function tenantListWhere(ownerUserId: string | null, q: TenantListQuery): ListWhere {
  const { where, params, add } = conditions([TENANT_IN_MODE]);
  if (ownerUserId !== null) {
    params.push(ownerUserId);
    where.push(tenantOwnerCondition(params.length));
  }
  if (q.plan) add((n) => `t.plan = $${n}`, q.plan);
  if (q.tier) add((n) => `t.tier = $${n}`, q.tier);
  if (q.status) add((n) => `t.status = $${n}`, q.status);
  if (q.restricted !== undefined) add((n) => `t.restricted = $${n}`, q.restricted);
  if (q.owner_user_id) add((n) => `t.owner_user_id = $${n}`, q.owner_user_id);
  if (q.owner_organization_id) add((n) => `t.owner_organization_id = $${n}`, q.owner_organization_id);
  return { where, params };
}

export async function listTenantRecords(db: Queryable, filter: ListWhere, ks: KeysetSql): Promise<TenantRecord[]> {
  return selectPage<TenantRecord>(db, `SELECT ${TENANT_RECORD_COLUMNS} FROM tenants t`, filter, ks);
}

export async function isTenantOwner(db: Queryable, userId: string, tenantId: string): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM tenants t WHERE t.id = $1 AND ${tenantOwnerCondition(2)}`, [tenantId, userId]);
  return rowCount > 0;
}

/** Where a Tenant's owner lives (live or test): its owner user's or Organization's mode. Needs an unscoped handle. */
export async function tenantModeOf(db: Queryable, tenant: Pick<TenantRecord, 'owner_user_id' | 'owner_organization_id'>): Promise<Mode> {
  const { rows } = await db.query<{ test_mode: boolean | null }>(
    `SELECT COALESCE((SELECT test_mode FROM users WHERE id = $1), (SELECT test_mode FROM organizations WHERE id = $2), false) AS test_mode`,
    [tenant.owner_user_id, tenant.owner_organization_id],
  );
  return rows[0]?.test_mode ? 'test' : 'live';
}

/** Where mail about a Tenant goes: its owner user, or the active org_admins of its Organization. */
export async function tenantOwnerEmails(db: Queryable, tenant: Pick<TenantRecord, 'owner_user_id' | 'owner_organization_id'>): Promise<string[]> {
  const { rows } = await db.query<{ email: string }>(
    `SELECT u.email FROM users u WHERE u.status <> 'deleted' AND (u.id = $1 OR u.id = ANY (ARRAY(
       SELECT m.user_id FROM organization_members m WHERE m.organization_id = $2 AND m.role = 'org_admin' AND m.membership_status = 'active')))
     ORDER BY u.email`,
    [tenant.owner_user_id, tenant.owner_organization_id],
  );
  return rows.map((r) => r.email);
}

export function toTenant(r: TenantRecord): Tenant {
  return {
    id: r.id,
    owner_type: r.owner_type,
    owner_user_id: r.owner_user_id,
    owner_organization_id: r.owner_organization_id,
    tier: r.tier,
    plan: r.plan,
    region: r.region,
    status: r.status,
    subscription_status: r.subscription_status,
    restricted: r.restricted,
    application_count: r.application_count,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}
