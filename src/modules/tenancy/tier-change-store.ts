import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import type { Tier, TierChangeRequest } from './schemas.js';
import type { ListWhere } from './store.js';

export interface TierChangeRow {
  id: string;
  tenant_id: string;
  from_tier: Tier;
  from_region: string;
  requested_tier: Tier;
  requested_region: string | null;
  status: 'pending' | 'scheduled' | 'in_progress' | 'completed' | 'cancelled';
  reason: string;
  scheduled_for: Date | null;
  notes: string | null;
  requested_by: string | null;
  created_at: Date;
  updated_at: Date;
  started_at: Date | null;
  completed_at: Date | null;
}

export const TCR_COLUMNS = `r.id, r.tenant_id, r.from_tier, r.from_region, r.requested_tier, r.requested_region, r.status, r.reason,
  r.scheduled_for, r.notes, r.requested_by, r.created_at, r.updated_at, r.started_at, r.completed_at`;

export const OPEN_STATUSES = ['pending', 'scheduled', 'in_progress'] as const;

export function toTierChangeRequest(r: TierChangeRow): TierChangeRequest {
  return {
    id: r.id,
    tenant_id: r.tenant_id,
    from_tier: r.from_tier,
    from_region: r.from_region,
    requested_tier: r.requested_tier,
    requested_region: r.requested_region,
    status: r.status,
    reason: r.reason,
    scheduled_for: r.scheduled_for?.toISOString() ?? null,
    notes: r.notes,
    requested_by: r.requested_by,
    created_at: r.created_at.toISOString(),
    started_at: r.started_at?.toISOString() ?? null,
    completed_at: r.completed_at?.toISOString() ?? null,
  };
}

export async function findTierChange(db: Queryable, tenantId: string, id: string, forUpdate = false): Promise<TierChangeRow | null> {
  const { rows } = await db.query<TierChangeRow>(
    `SELECT ${TCR_COLUMNS} FROM tier_change_requests r WHERE r.id = $1 AND r.tenant_id = $2 ${forUpdate ? 'FOR UPDATE' : ''}`,
    [id, tenantId],
  );
  return rows[0] ?? null;
}

export async function findOpenTierChange(db: Queryable, tenantId: string): Promise<TierChangeRow | null> {
  const { rows } = await db.query<TierChangeRow>(
    `SELECT ${TCR_COLUMNS} FROM tier_change_requests r WHERE r.tenant_id = $1 AND r.status = ANY($2::text[])`,
    [tenantId, OPEN_STATUSES],
  );
  return rows[0] ?? null;
}

/** A Tenant's requests; terminal ones (completed, cancelled) only with include_inactive (Part A convention 12). */
export function tierChangeListWhere(tenantId: string, includeInactive: boolean | undefined): ListWhere {
  const params: unknown[] = [tenantId];
  const where = ['r.tenant_id = $1'];
  if (!includeInactive) {
    params.push(OPEN_STATUSES);
    where.push(`r.status = ANY($${params.length}::text[])`);
  }
  return { where, params };
}

export async function listTierChangeRows(db: Queryable, filter: ListWhere, ks: KeysetSql): Promise<TierChangeRow[]> {
  return selectPage<TierChangeRow>(db, `SELECT ${TCR_COLUMNS} FROM tier_change_requests r`, filter, ks);
}

export async function insertTierChange(db: Queryable, row: Omit<TierChangeRow, 'scheduled_for' | 'notes' | 'started_at' | 'completed_at' | 'updated_at'>): Promise<TierChangeRow> {
  const { rows } = await db.query<TierChangeRow>(
    `INSERT INTO tier_change_requests AS r (id, tenant_id, from_tier, from_region, requested_tier, requested_region, status, reason, requested_by, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) RETURNING ${TCR_COLUMNS}`,
    [row.id, row.tenant_id, row.from_tier, row.from_region, row.requested_tier, row.requested_region, row.status, row.reason, row.requested_by, row.created_at],
  );
  return rows[0];
}

export async function updateTierChange(
  db: Queryable,
  id: string,
  next: Pick<TierChangeRow, 'status' | 'scheduled_for' | 'notes' | 'started_at' | 'completed_at'>,
  now: Date,
): Promise<TierChangeRow> {
  const { rows } = await db.query<TierChangeRow>(
    `UPDATE tier_change_requests r SET status = $2, scheduled_for = $3, notes = $4, started_at = $5, completed_at = $6, updated_at = $7
      WHERE r.id = $1 RETURNING ${TCR_COLUMNS}`,
    [id, next.status, next.scheduled_for, next.notes, next.started_at, next.completed_at, now],
  );
  return rows[0];
}

/** Moves the Tenant itself (status, and on completion or rollback its tier and region). */
export async function updateTenantPlacement(db: Queryable, tenantId: string, next: { status: string; tier: string; region: string }, now: Date): Promise<void> {
  await db.query('UPDATE tenants SET status = $2, tier = $3, region = $4, updated_at = $5 WHERE id = $1', [tenantId, next.status, next.tier, next.region, now]);
}
