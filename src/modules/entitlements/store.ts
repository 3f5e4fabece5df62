import { createHash } from 'node:crypto';
import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import type { Entitlement } from './schemas.js';

export interface EntitlementRow {
  id: string;
  user_id: string | null;
  organization_id: string | null;
  application_id: string;
  status: 'active' | 'disabled' | 'revoked' | 'expired';
  source: 'purchase' | 'trial' | 'admin_grant' | 'org_seat';
  order_id: string | null;
  starts_at: Date;
  ends_at: Date | null;
  disabled_reason: string | null;
  member_scope: 'all_members' | 'allowlist' | 'denylist' | null;
  member_overrides: string[] | null;
  test_mode: boolean;
  created_at: Date;
  updated_at: Date;
}

export const ENT_COLUMNS = `e.id, e.user_id, e.organization_id, e.application_id, e.status, e.source, e.order_id, e.starts_at, e.ends_at,
  e.disabled_reason, e.member_scope, e.member_overrides, e.test_mode, e.created_at, e.updated_at`;

export function toEntitlement(r: EntitlementRow): Entitlement {
  return {
    ...r,
    starts_at: r.starts_at.toISOString(),
    ends_at: r.ends_at?.toISOString() ?? null,
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

/**
 * The updated_at a write to an entitlement row (aliased `e`, locked) sets: the transaction's instant
 * `param`, or 1 ms after the row's when that is not earlier. Receivers drop entitlement.* events whose
 * entitlement.updated_at is older than the one they hold (Part B delivery semantics 4); the instant is
 * the request's start, so a change that took the row's lock after a later-started one committed would
 * otherwise go back in time and be dropped.
 */
export const nextUpdatedAt = (param: string) => `GREATEST(${param}::timestamptz, e.updated_at + interval '1 millisecond')`;

/**
 * The ETag of an Entitlement's current state (If-Match guards concurrent operators): a strong ETag of everything the row shows: two writes within one millisecond (same updated_at)
 * still give different ETags when anything changed, so a stale If-Match cannot pass.
 */
export const etagOf = (r: EntitlementRow) => `"${createHash('sha256').update(JSON.stringify(toEntitlement(r))).digest('base64url').slice(0, 22)}"`;

/**
 * RFC 9110 §13.1.1: `*`, or a list of entity tags (one header with commas, or the header sent twice,
 * which Node joins with a comma) of which any may match the current ETag, compared strongly.
 */
const ifMatchHolds = (header: string, etag: string): boolean => header.trim() === '*' || header.split(',').some((tag) => tag.trim() === etag);

/** An If-Match (when sent) that names no current ETag: 412 precondition_failed naming it (§13.1.1, on a GET too by §13.2.2). */
export function assertIfMatch(header: string | undefined, etag: string): void {
  if (header !== undefined && !ifMatchHolds(header, etag)) throw new ApiError('precondition_failed', { details: { etag } });
}

/**
 * RFC 9110 §13.1.2: If-None-Match is false when it is `*` (the row exists) or lists the current ETag,
 * compared weakly (a `W/` tag matches its strong twin): then a GET is 304 and a PATCH 412.
 */
export const ifNoneMatchHolds = (header: string, etag: string): boolean =>
  header.trim() !== '*' && !header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);

export async function findEntitlement(db: Queryable, id: string, forUpdate = false): Promise<EntitlementRow | null> {
  const { rows } = await db.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.id = $1 ${forUpdate ? 'FOR UPDATE' : ''}`, [id]);
  return rows[0] ?? null;
}

/** The live (active or disabled) personal row of a user for an Application. */
export async function findLivePersonal(db: Queryable, userId: string, applicationId: string): Promise<EntitlementRow | null> {
  const { rows } = await db.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.user_id = $1 AND e.application_id = $2 AND e.status IN ('active', 'disabled')`,
    [userId, applicationId],
  );
  return rows[0] ?? null;
}

/**
 * The entitlement row `id` as it now stands (after a write in this transaction; the caller holds it
 * locked, so it is there). Not findEntitlement: that statement's text ends in a space.
 */
export async function findEntitlementRow(db: Queryable, id: string): Promise<EntitlementRow> {
  const { rows } = await db.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.id = $1`, [id]);
  return rows[0];
}

/** The live (active or disabled) org-wide grant of an Organization for an Application. */
export async function findLiveOrgGrant(db: Queryable, organizationId: string, applicationId: string): Promise<{ id: string; status: string } | null> {
  const { rows } = await db.query<{ id: string; status: string }>(
    `SELECT id, status FROM entitlements WHERE organization_id = $1 AND application_id = $2 AND status IN ('active', 'disabled') LIMIT 1`,
    [organizationId, applicationId],
  );
  return rows[0] ?? null;
}

/** A new active personal row; start_notified_at is set when it starts at once (nothing left for scheduled-starts). */
export interface NewPersonalEntitlement {
  id: string;
  userId: string;
  applicationId: string;
  source: EntitlementRow['source'];
  orderId: string | null;
  startsAt: Date;
  endsAt: Date | null;
  testMode: boolean;
  now: Date;
  startNotifiedAt: Date | null;
}

export async function insertPersonalEntitlement(db: Queryable, e: NewPersonalEntitlement): Promise<EntitlementRow> {
  const { rows } = await db.query<EntitlementRow>(
    `INSERT INTO entitlements AS e (id, user_id, application_id, status, source, order_id, starts_at, ends_at, test_mode, created_at, updated_at,
           start_notified_at)
         VALUES ($1, $2, $3, 'active', $4, $5, $6, $7, $8, $9, $9, $10) RETURNING ${ENT_COLUMNS}`,
    [e.id, e.userId, e.applicationId, e.source, e.orderId, e.startsAt, e.endsAt, e.testMode, e.now, e.startNotifiedAt],
  );
  return rows[0];
}

/** What a PATCH writes; a null member_scope or member_overrides keeps the row's. */
export interface EntitlementUpdate {
  status: string;
  disabledReason: string | null;
  endsAt: Date | null;
  source: EntitlementRow['source'];
  orderId: string | null;
  memberScope: EntitlementRow['member_scope'];
  memberOverrides: string[] | null;
}

/** Writes a PATCH to the (locked) row, updated_at by nextUpdatedAt; returns the row as updated. */
export async function updateEntitlement(db: Queryable, id: string, u: EntitlementUpdate, now: Date): Promise<EntitlementRow> {
  const { rows } = await db.query<EntitlementRow>(
    `UPDATE entitlements e SET status = $2, disabled_reason = $3, ends_at = $4, source = $5, order_id = $6,
                member_scope = COALESCE($7, member_scope), member_overrides = COALESCE($8, member_overrides), updated_at = ${nextUpdatedAt('$9')}
          WHERE e.id = $1 RETURNING ${ENT_COLUMNS}`,
    [id, u.status, u.disabledReason, u.endsAt, u.source, u.orderId, u.memberScope, u.memberOverrides, now],
  );
  return rows[0];
}

/** Marks the (locked) row expired, keeping disabled_reason; returns it as updated. */
export async function updateEntitlementExpired(db: Queryable, id: string, now: Date): Promise<EntitlementRow> {
  const { rows } = await db.query<EntitlementRow>(`UPDATE entitlements e SET status = 'expired', updated_at = ${nextUpdatedAt('$2')} WHERE e.id = $1 RETURNING ${ENT_COLUMNS}`, [id, now]);
  return rows[0];
}

/** Records that the row's start was announced (scheduled-starts runs once per row). */
export async function updateEntitlementStartNotified(db: Queryable, id: string, now: Date): Promise<void> {
  await db.query('UPDATE entitlements SET start_notified_at = $2 WHERE id = $1', [id, now]);
}

export async function deleteEntitlementRow(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM entitlements WHERE id = $1', [id]);
}

/** The rows a job works through, as a condition on the clock's now ($1), and the order it takes them in. */
const DUE_ROWS = {
  /** entitlement-expiry: live rows whose ends_at passed. */
  expiry: { due: `e.status IN ('active', 'disabled') AND e.ends_at <= $1`, order: 'e.ends_at' },
  /** scheduled-starts: active rows whose start passed unannounced. */
  scheduled_start: { due: `e.status = 'active' AND e.start_notified_at IS NULL AND e.starts_at <= $1`, order: 'e.starts_at' },
};
export type DueRows = keyof typeof DUE_ROWS;

/** The next due row (oldest first), not one of `skip`; null when none is left. */
export async function findNextDueEntitlement(db: Queryable, kind: DueRows, now: Date, skip: string[]): Promise<{ id: string; organization_id: string | null } | null> {
  const { due, order } = DUE_ROWS[kind];
  const { rows: [next] } = await db.query<{ id: string; organization_id: string | null }>(
    `SELECT e.id, e.organization_id FROM entitlements e WHERE ${due} AND e.id <> ALL($2::text[]) ORDER BY ${order}, e.id LIMIT 1`,
    [now, skip],
  );
  return next ?? null;
}

/** Locks row `id` (FOR UPDATE) and reads it, if it is still due; null when a request changed it meanwhile. */
export async function lockDueEntitlement(db: Queryable, kind: DueRows, now: Date, id: string): Promise<EntitlementRow | null> {
  const { due } = DUE_ROWS[kind];
  const { rows: [row] } = await db.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE ${due} AND e.id = $2 FOR UPDATE`, [now, id]);
  return row ?? null;
}
