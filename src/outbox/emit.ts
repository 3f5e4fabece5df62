import type { Ctx } from '../context.js';
import type { Mode, Tx } from '../db/types.js';
import { newId } from '../ids.js';
import { INCLUDED_MEMBER_SQL } from '../access/resolve.js';

export interface OutboundEvent {
  type: string;
  applicationId?: string | null;
  data: Record<string, unknown>;
  /** user.* / organization.member_*: Applications the user had a path to before this transaction's change. */
  formerPathApplicationIds?: string[];
  /** The event's created_at when it is not the transaction's instant (ctx.now); emitMany only. */
  createdAt?: Date;
  /** The mode of what the event is about, when it is not the caller's (a shared Application's), as recordAudit's. */
  mode?: Mode;
}

/**
 * Events whose created_at follows the commits of their user's changes (user.*, role.*,
 * organization.member_*): receivers drop an event older than the last one they applied (Part B
 * delivery semantics 4), and a request's instant is taken when it starts, so of two racing changes
 * the one that started first may commit second. access.* are ordered per pair (src/access/flips.ts).
 */
const isOrderedByUser = (type: string) => isUserEvent(type) || type.startsWith('role.');

/**
 * Whose clock row dates the event: the user's (above), or the Application's for application.* (review
 * status changes): two of them on processes whose clocks disagree by seconds would otherwise be dated
 * out of order, and a receiver would drop a reinstatement as older than the suspension before it.
 */
const orderedSubject = (event: OutboundEvent, userId: string | null): string | null =>
  userId && isOrderedByUser(event.type) ? userId : event.type.startsWith('application.') && event.applicationId ? event.applicationId : null;

/** Events about a user that app-scope subscriptions receive only through an access path (Part B Webhooks). */
export const isUserEvent = (type: string) => type.startsWith('user.') || type.startsWith('organization.member_');

/**
 * The Applications the user ($1) has an access path to: a personal Entitlement in any status, or a
 * grant of an Organization they are an active member of that includes them (a grant that excludes
 * them is never a path). Evaluated when the event is written, so later changes do not re-route it.
 */
const PATH_APPLICATIONS_SQL = `ARRAY(
  SELECT p.application_id FROM entitlements p WHERE p.user_id = $1
  UNION
  SELECT e.application_id FROM entitlements e JOIN organization_members m ON m.organization_id = e.organization_id
   WHERE m.user_id = $1 AND ${INCLUDED_MEMBER_SQL})`;

/** The Applications a user has an access path to now (PATH_APPLICATIONS_SQL). */
export async function pathApplicationIds(tx: Tx, userId: string): Promise<string[]> {
  const { rows } = await tx.query<{ apps: string[] }>(`SELECT ${PATH_APPLICATIONS_SQL} AS apps`, [userId]);
  return rows[0].apps;
}

/**
 * Writes a webhook event to the transactional outbox in the mutation's transaction. Nothing leaves
 * the process here; the delivery relay picks committed rows up (claimed with SKIP LOCKED).
 */
export async function emit(tx: Tx, ctx: Ctx, event: OutboundEvent): Promise<string> {
  const id = newId('wev');
  const userId = typeof event.data.user_id === 'string' ? event.data.user_id : null;
  let paths: string[] | null = null;
  if (!event.applicationId && userId && isUserEvent(event.type)) {
    paths = [...new Set([...(await pathApplicationIds(tx, userId)), ...(event.formerPathApplicationIds ?? [])])];
  }
  // An ordered event is dated strictly after its subject's last one, under the subject's clock row's
  // lock (held to commit); the clock row is written only when there is a subject ($8).
  await tx.query(
    `WITH clock AS (
       INSERT INTO event_clocks AS c (subject, last_at) SELECT $8, $6 WHERE $8::text IS NOT NULL ON CONFLICT (subject)
       DO UPDATE SET last_at = GREATEST(EXCLUDED.last_at, c.last_at + interval '1 millisecond') RETURNING last_at)
     INSERT INTO outbox_events (id, type, application_id, test_mode, data, created_at, path_application_ids)
     SELECT $1, $2, $3, $4, $5, COALESCE((SELECT last_at FROM clock), $6), $7`,
    [id, event.type, event.applicationId ?? null, (event.mode ?? ctx.mode) === 'test', JSON.stringify(event.data), ctx.now, paths, orderedSubject(event, userId)],
  );
  return id;
}

/**
 * Many events in one statement (an organization-wide change can flip thousands of pairs); each names
 * its Application, and its created_at when not ctx.now.
 */
export async function emitMany(tx: Tx, ctx: Ctx, events: OutboundEvent[]): Promise<void> {
  if (events.length === 0) return;
  await tx.query(
    `INSERT INTO outbox_events (id, type, application_id, test_mode, data, created_at)
     SELECT id, type, app, $4, data::jsonb, COALESCE(at, $5) FROM unnest($1::text[], $2::text[], $3::text[], $6::text[], $7::timestamptz[]) AS t(id, type, app, data, at)`,
    [events.map(() => newId('wev')), events.map((e) => e.type), events.map((e) => e.applicationId ?? null), ctx.mode === 'test', ctx.now, events.map((e) => JSON.stringify(e.data)), events.map((e) => e.createdAt?.toISOString() ?? null)],
  );
}
