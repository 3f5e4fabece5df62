import type { KeysetSql, Queryable } from '../../db/types.js';
import { conditions, selectPage } from '../../db/page.js';
import { PLAN_LIMITS, type Plan } from '../tenancy/plans.js';
import { tenantOwnerCondition } from '../tenancy/store.js';
import type { AuditEvent, AuditQuery } from './schemas.js';

export interface AuditRow {
  id: string;
  action: string;
  actor_type: 'user' | 'api_key' | 'system';
  actor_id: string | null;
  via_api_key_id: string | null;
  target_type: string | null;
  target_id: string | null;
  target_user_id: string | null;
  application_id: string | null;
  organization_id: string | null;
  tenant_id: string | null;
  before: unknown;
  after: unknown;
  request_id: string | null;
  created_at: Date;
}

export const AUDIT_COLUMNS = `e.id, e.action, e.actor_type, e.actor_id, e.via_api_key_id, e.target_type, e.target_id, e.target_user_id,
  e.application_id, e.organization_id, e.tenant_id, e.before, e.after, e.request_id, e.created_at`;

export function toAuditEvent(r: AuditRow): AuditEvent {
  return {
    id: r.id,
    action: r.action,
    actor: { type: r.actor_type, id: r.actor_id, via_api_key_id: r.via_api_key_id },
    target: r.target_type ? { type: r.target_type, id: r.target_id } : null,
    target_user_id: r.target_user_id,
    application_id: r.application_id,
    organization_id: r.organization_id,
    tenant_id: r.tenant_id,
    before: r.before ?? null,
    after: r.after ?? null,
    request_id: r.request_id,
    timestamp: r.created_at.toISOString(),
  };
}

/**
 * SQL over `e`: the event belongs to Tenant `$n`, recorded with it or about one of its Applications.
 * The Applications are an array, so both halves are index conditions (one bitmap of the two indexes).
 */
export const tenantCondition = (n: number) =>
  `(e.tenant_id = $${n} OR e.application_id = ANY(ARRAY(SELECT a.id FROM applications a WHERE a.tenant_id = $${n})))`;

/** The hot window of a Tenant owner's audit view: its plan's (Part B Limits). */
export const windowDaysOf = (plan: Plan): number => PLAN_LIMITS[plan].audit_hot_window_days;

/** The plan of an Application's Tenant. */
export async function applicationPlan(db: Queryable, applicationId: string): Promise<Plan | null> {
  const { rows } = await db.query<{ plan: Plan }>('SELECT t.plan FROM applications a JOIN tenants t ON t.id = a.tenant_id WHERE a.id = $1', [applicationId]);
  return rows[0]?.plan ?? null;
}

/** Tenants the user owns (owner_user_id, or an active org_admin of owner_organization_id), with their plans. */
export async function ownedTenants(db: Queryable, userId: string, tenantIds: string[]): Promise<{ id: string; plan: Plan }[]> {
  if (tenantIds.length === 0) return [];
  const { rows } = await db.query<{ id: string; plan: Plan }>(
    `SELECT t.id, t.plan FROM tenants t
      WHERE t.id = ANY($1::text[]) AND ${tenantOwnerCondition(2)}`,
    [tenantIds, userId],
  );
  return rows;
}

/** The Tenants an event belongs to: the one recorded on it and its Application's. */
export async function tenantsOfEvent(db: Queryable, row: Pick<AuditRow, 'tenant_id' | 'application_id'>): Promise<string[]> {
  const ids = new Set<string>();
  if (row.tenant_id) ids.add(row.tenant_id);
  if (row.application_id) {
    const { rows } = await db.query<{ tenant_id: string }>('SELECT tenant_id FROM applications WHERE id = $1', [row.application_id]);
    if (rows[0]) ids.add(rows[0].tenant_id);
  }
  return [...ids];
}

/** Which rows a reader may list (SQL over `e`): adds its parameter to params and returns its condition. */
export type AuditRowFilter = (params: unknown[]) => string;

/** Platform audit.view: every row. */
export const everyEvent: AuditRowFilter = () => 'TRUE';
/** The events of one Application (an app-scoped key's forced filter). */
export const eventsOfApplication = (app: string): AuditRowFilter => (p) => `e.application_id = $${p.push(app)}`;
/** The events about one user. */
export const eventsAboutUser = (userId: string): AuditRowFilter => (p) => `e.target_user_id = $${p.push(userId)}`;
/** The events of one Tenant (tenantCondition). */
export const eventsOfTenant = (tenantId: string): AuditRowFilter => (p) => tenantCondition(p.push(tenantId));

/** The WHERE conditions of a list and their parameters, before the keyset page's (numbered after them). */
export interface AuditListFilter {
  where: string[];
  params: unknown[];
}

/**
 * The list's conditions: within the window from `start`, the reader's view, then the query's filters
 * (`targetUserId` is q.target_user_id with `me` resolved to the caller).
 */
export function auditListFilter(start: Date, view: AuditRowFilter, q: AuditQuery, targetUserId: string | undefined): AuditListFilter {
  const params: unknown[] = [start];
  const { where, add } = conditions(['e.created_at >= $1', view(params)], params);
  if (targetUserId) add((n) => `e.target_user_id = $${n}`, targetUserId);
  if (q.target_type) add((n) => `e.target_type = $${n}`, q.target_type);
  if (q.target_id) add((n) => `e.target_id = $${n}`, q.target_id);
  if (q.actor_id) add((n) => `e.actor_id = $${n}`, q.actor_id);
  if (q.actor_type) add((n) => `e.actor_type = $${n}`, q.actor_type);
  if (q.action) add((n) => `e.action = ANY($${n}::text[])`, q.action);
  if (q.application_id) add((n) => `e.application_id = $${n}`, q.application_id);
  if (q.organization_id) add((n) => `e.organization_id = $${n}`, q.organization_id);
  if (q.tenant_id) add((n) => tenantCondition(n), q.tenant_id);
  if (q.since) add((n) => `e.created_at >= $${n}::timestamptz`, q.since);
  if (q.until) add((n) => `e.created_at < $${n}::timestamptz`, q.until);
  return { where, params };
}

/** One keyset page of the events the filter selects, newest first. */
export async function listAuditRows(db: Queryable, filter: AuditListFilter, ks: KeysetSql): Promise<AuditRow[]> {
  return selectPage<AuditRow>(db, `SELECT ${AUDIT_COLUMNS} FROM audit_events e`, filter, ks);
}

export async function findAuditRow(db: Queryable, id: string): Promise<AuditRow | null> {
  const { rows } = await db.query<AuditRow>(`SELECT ${AUDIT_COLUMNS} FROM audit_events e WHERE e.id = $1`, [id]);
  return rows[0] ?? null;
}
