import type { Ctx } from '../context.js';
import type { Tx } from '../db/types.js';
import { emitMany, type OutboundEvent } from '../outbox/emit.js';
import { accessKey, computeAccess, findPathRows, type PathRow, type ResolvedAccess } from './resolve.js';
import { MAX_CLOCK_SKEW_SECONDS } from '../clock.js';
import { lockUsersForAccess } from './locks.js';

/** The reasons an access.* event gives (Part B, Derived access events). */
export const ACCESS_REASONS = [
  'entitlement_granted', 'entitlement_started', 'entitlement_enabled', 'entitlement_disabled', 'entitlement_revoked',
  'entitlement_expired', 'entitlement_deleted', 'org_grant_changed', 'org_member_added', 'org_member_removed',
  'user_suspended', 'user_reactivated', 'user_deleted',
] as const;
export type AccessReason = (typeof ACCESS_REASONS)[number];

/**
 * Every mutation that can change access runs inside this: it reads the affected users' path rows
 * before the change and resolves them after (in the same transaction, at the same instant), and
 * writes access.granted / access.revoked to the outbox exactly once per (user, Application) pair
 * whose access flipped, and never when another active path remains. A flip that time caused earlier
 * (an ends_at or starts_at passed, not yet announced) goes out first, with the time-driven reason.
 * The users are locked first (src/access/locks.ts): a concurrent change to them waits for this one.
 */
export async function withAccessFlips<T>(
  tx: Tx,
  ctx: Ctx,
  scope: { userIds: string[]; applicationIds?: string[] | null },
  reason: AccessReason,
  mutate: () => Promise<T>,
): Promise<T> {
  const apps = scope.applicationIds ?? null;
  await lockUsersForAccess(tx, scope.userIds);
  const rows = await findPathRows(tx, scope.userIds, apps);
  const result = await mutate();
  const after = { rows: await findPathRows(tx, scope.userIds, apps), userIds: scope.userIds, apps };
  await emitFlips(tx, ctx, { rows, fallbackAt: ctx.now }, after, reason);
  return result;
}

/**
 * The affected pairs before the change: their path rows, read before it, and the instant whose
 * resolution stands for what was announced about a pair that never was (now, for a mutation).
 */
export interface AccessBefore {
  rows: PathRow[];
  fallbackAt: Date;
}

/** The pairs after the change: their path rows (read after it), resolved by emitFlips (computeAccess). */
export interface AccessAfter {
  rows: PathRow[];
  userIds: string[];
  apps: string[] | null;
}

/** Path rows by (user, Application) pair; a row without an Application or entitlement is no path. */
function byPair(rows: PathRow[]): Map<string, PathRow[]> {
  const out = new Map<string, PathRow[]>();
  for (const r of rows) {
    if (!r.application_id || !r.entitlement_id) continue;
    const key = accessKey(r.user_id, r.application_id);
    if (!out.has(key)) out.set(key, []);
    out.get(key)!.push(r);
  }
  return out;
}

const timeReason = (allowed: boolean): AccessReason => (allowed ? 'entitlement_started' : 'entitlement_expired');

/**
 * Announces flips against access_states: what subscribers were last told about each pair, and as of
 * when. First the flips time caused since then (timeSteps, reasons entitlement_started /
 * entitlement_expired), then `before` → `after` with `reason` (null: the change is time itself, as in
 * the entitlement jobs). Every pair considered is recorded as of now, flipped or not.
 */
export async function emitFlips(
  tx: Tx,
  ctx: Ctx,
  before: AccessBefore,
  afterRows: AccessAfter,
  reason: AccessReason | null,
): Promise<number> {
  const after = computeAccess(afterRows.rows, afterRows.userIds, ctx.now, afterRows.apps);
  const rowsOf = byPair(before.rows);
  const pairs = collectPairs(rowsOf, after);
  if (pairs.size === 0) return 0;
  const list = [...pairs.values()];
  const announced = await readAnnounced(tx, list);
  const afterRowsOf = byPair(afterRows.rows);
  const events: OutboundEvent[] = [];
  const states: boolean[] = [];
  const stamps: Date[] = [];
  for (const [key, pair] of pairs) {
    const paths = { before: rowsOf.get(key) ?? [], after: afterRowsOf.get(key) ?? [], fallbackAt: before.fallbackAt, resolved: after.get(key) };
    const flipped = flipPair(ctx.now, key, pair, announced.get(key), paths, reason);
    events.push(...flipped.events);
    states.push(flipped.allowed);
    stamps.push(flipped.stamp);
  }
  await recordAnnounced(tx, list, states, stamps);
  await emitMany(tx, ctx, events);
  return events.length;
}

type Pair = { user_id: string; application_id: string };
type AnnouncedRow = { user_id: string; application_id: string; allowed: boolean; updated_at: Date };

/** The pairs considered: every pair with a path before the change or a resolution after it. */
function collectPairs(rowsOf: Map<string, PathRow[]>, after: Map<string, ResolvedAccess>): Map<string, Pair> {
  const pairs = new Map<string, Pair>();
  for (const [key, [r]] of rowsOf) pairs.set(key, { user_id: r!.user_id, application_id: r!.application_id! });
  for (const [key, a] of after) pairs.set(key, { user_id: a.user_id, application_id: a.application_id });
  return pairs;
}

/** What was last announced about each pair (access_states), by pair key. */
async function readAnnounced(tx: Tx, list: Pair[]): Promise<Map<string, AnnouncedRow>> {
  const { rows } = await tx.query<AnnouncedRow>(
    `SELECT s.user_id, s.application_id, s.allowed, s.updated_at FROM access_states s
       JOIN unnest($1::text[], $2::text[]) AS p(user_id, application_id) ON p.user_id = s.user_id AND p.application_id = s.application_id`,
    [list.map((p) => p.user_id), list.map((p) => p.application_id)],
  );
  return new Map(rows.map((r) => [accessKey(r.user_id, r.application_id), r]));
}

/**
 * One pair's events since it was last announced (time's flips, then the change's, if any), whether
 * it is allowed now, and the instant to record as its last announced one. `now` is ctx.now itself:
 * `resolvedAt === now` tells which instant the pair was resolved at.
 */
function flipPair(
  now: Date,
  key: string,
  pair: Pair,
  record: AnnouncedRow | undefined,
  paths: { before: PathRow[]; after: PathRow[]; fallbackAt: Date; resolved: ResolvedAccess | undefined },
  reason: AccessReason | null,
): { events: OutboundEvent[]; allowed: boolean; stamp: Date } {
  const events: OutboundEvent[] = [];
  const last = record ? new Date(record.updated_at).getTime() : -Infinity;
  // Receivers drop an access event older (by created_at) than the last one they applied for the pair
  // (Part B delivery semantics 4). ctx.now is the request's start: a change that started earlier but
  // took the user's lock after another committed would otherwise be announced as the older one, and
  // dropped. So each pair's events are dated strictly after what was last announced for it (read
  // under the user's lock), in the order they are written.
  let at = last >= now.getTime() ? new Date(last + 1) : now;
  const flip = (allowed: boolean, why: AccessReason, access: ResolvedAccess | undefined) => {
    events.push({
      type: allowed ? 'access.granted' : 'access.revoked',
      applicationId: pair.application_id,
      data: { user_id: pair.user_id, application_id: pair.application_id, reason: why, entitlement_status: access?.entitlement_status ?? 'none' },
      createdAt: at,
    });
    at = new Date(at.getTime() + 1);
  };
  // A pair last announced at an instant after ctx.now (by a process whose clock is ahead of this one's,
  // or a change that committed while this one waited for the user's lock) is resolved at that instant,
  // not before it: resolved at ctx.now, a start or an end between the two would be announced undone
  // (a grant that started announced revoked, and nothing announcing it again). Only within
  // MAX_CLOCK_SKEW_SECONDS: beyond, this process's clock is taken (the development clock moved back).
  const resolvedAt = last > now.getTime() && last - now.getTime() <= MAX_CLOCK_SKEW_SECONDS * 1000 ? new Date(last) : now;
  let was = record?.allowed ?? null;
  for (const step of timeSteps(key, paths.before, record ? new Date(record.updated_at) : paths.fallbackAt, resolvedAt, was)) {
    if (was !== null) flip(step.allowed, timeReason(step.allowed), step.access);
    was = step.allowed;
  }
  const current = resolvedAt === now ? paths.resolved : (computeAccess(paths.after, [], resolvedAt, null).get(key) ?? paths.resolved);
  const is = current?.allowed ?? false;
  if (is !== (was ?? false)) flip(is, reason ?? timeReason(is), current);
  // The pair's last announced instant: the instant it was resolved at, or its last event's when that is later.
  return { events, allowed: is, stamp: new Date(Math.max(resolvedAt.getTime(), at.getTime() - 1)) };
}

/** Records every pair considered as announced: allowed or not, as of its stamp. */
async function recordAnnounced(tx: Tx, list: Pair[], states: boolean[], stamps: Date[]): Promise<void> {
  await tx.query(
    `INSERT INTO access_states (user_id, application_id, allowed, updated_at)
     SELECT u, a, al, at FROM unnest($1::text[], $2::text[], $3::boolean[], $4::timestamptz[]) AS t(u, a, al, at)
     ON CONFLICT (user_id, application_id) DO UPDATE SET allowed = EXCLUDED.allowed, updated_at = EXCLUDED.updated_at`,
    [list.map((p) => p.user_id), list.map((p) => p.application_id), states, stamps.map((d) => d.toISOString())],
  );
}

/**
 * The changes of one pair's resolution in (since, until] from `was` (null: never announced; the first
 * step is then its resolution at `since`), evaluated at each starts_at / ends_at of its rows. Between
 * two calls that record a pair, its rows, memberships and user status change only with time (every
 * other change runs in withAccessFlips), so the rows read now resolve those instants as they were.
 */
function timeSteps(key: string, paths: PathRow[], since: Date, until: Date, was: boolean | null): { allowed: boolean; access?: ResolvedAccess }[] {
  const times = new Set<number>();
  for (const r of paths) {
    for (const v of [r.starts_at, r.ends_at]) {
      const t = v === null ? NaN : new Date(v).getTime();
      if (t > since.getTime() && t <= until.getTime()) times.add(t);
    }
  }
  const instants = [...times].sort((a, b) => a - b).map((t) => new Date(t));
  if (was === null) instants.unshift(since);
  const steps: { allowed: boolean; access?: ResolvedAccess }[] = [];
  for (const at of instants) {
    const access = computeAccess(paths, [], at, null).get(key);
    const allowed = access?.allowed ?? false;
    if (allowed !== (steps.at(-1)?.allowed ?? was)) steps.push({ allowed, access });
  }
  return steps;
}
