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

/** The ETag of an Entitlement's current state (If-Match guards concurrent operators). */
/**
 * A strong ETag of everything the row shows: two writes within one millisecond (same updated_at)
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
