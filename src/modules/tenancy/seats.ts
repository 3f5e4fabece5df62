import { inTx, type Ctx } from '../../context.js';
import { ApiError } from '../../errors.js';
import type { Queryable, Tx } from '../../db/types.js';
import { MEMBER_DECISION_SQL } from '../../access/resolve.js';
import { withAccessFlips } from '../../access/flips.js';
import { lockApplicationTenants, lockTenantSeats, lockUsersForAccess } from '../../access/locks.js';
import { asModeWithin } from '../../db/roles.js';
import { PLAN_LIMITS, type Plan } from './plans.js';

/**
 * Seats of a Tenant: distinct users reached by a live grant (status active, scheduled included: the seat is reserved when the grant is made; not ended) to any
 * of its Applications — personal rows, and members an organization-wide grant includes (a member
 * marked seat_limit is not a seat).
 */
const seatHoldersOf = (applications: string) => `
  SELECT e.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
   WHERE ${applications} AND e.user_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
  UNION
  SELECT m.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
    JOIN organization_members m ON m.organization_id = e.organization_id AND m.membership_status = 'active'
   WHERE ${applications} AND e.organization_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
     AND ${MEMBER_DECISION_SQL} = 'included'`;
export const SEAT_HOLDERS_SQL = seatHoldersOf('a.tenant_id = $1');

export async function countSeats(db: Queryable, tenantId: string, now: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${SEAT_HOLDERS_SQL}) s`, [tenantId, now]);
  return rows[0].n;
}

/** The seats the Tenant would hold with the grants of Application `applicationId` (of another Tenant) counted in. */
export async function countSeatsWithApplication(db: Queryable, tenantId: string, applicationId: string, now: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${seatHoldersOf('(a.tenant_id = $1 OR a.id = $3)')}) s`, [tenantId, now, applicationId]);
  return rows[0].n;
}

export async function isSeat(db: Queryable, tenantId: string, userId: string, now: Date): Promise<boolean> {
  return (await seatHoldersAmong(db, tenantId, [userId], now)).has(userId);
}

async function seatHoldersAmong(db: Queryable, tenantId: string, userIds: string[], now: Date): Promise<Set<string>> {
  if (userIds.length === 0) return new Set();
  const { rows } = await db.query<{ user_id: string }>(`SELECT s.user_id FROM (${SEAT_HOLDERS_SQL}) s WHERE s.user_id = ANY($3::text[])`, [tenantId, now, userIds]);
  return new Set(rows.map((r) => r.user_id));
}

async function seatCapOf(db: Queryable, tenantId: string): Promise<number | null> {
  const { rows } = await db.query<{ plan: Plan }>('SELECT plan FROM tenants WHERE id = $1', [tenantId]);
  return rows[0] ? PLAN_LIMITS[rows[0].plan].seats : null;
}

async function isRestricted(db: Queryable, tenantId: string): Promise<boolean> {
  const { rows } = await db.query<{ restricted: boolean }>('SELECT restricted FROM tenants WHERE id = $1', [tenantId]);
  return rows[0]?.restricted ?? false;
}

export async function applicationTenant(db: Queryable, applicationId: string): Promise<string | null> {
  const { rows } = await db.query<{ tenant_id: string | null }>('SELECT tenant_id FROM applications WHERE id = $1', [applicationId]);
  return rows[0]?.tenant_id ?? null;
}

/**
 * The Tenants whose Applications an Organization's live grants are for, locked before their seats are
 * counted, each read under its Application's lock (lockApplicationTenants: an ownership move meanwhile
 * is waited for, or waits). Call after the Organization is locked.
 */
export async function lockOrgGrantTenants(tx: Tx, orgId: string): Promise<string[]> {
  const { rows } = await tx.query<{ application_id: string }>(
    `SELECT DISTINCT e.application_id FROM entitlements e WHERE e.organization_id = $1 AND e.status IN ('active', 'disabled')`,
    [orgId],
  );
  return lockApplicationTenants(tx, rows.map((r) => r.application_id));
}

/**
 * Runs `mutate` and refuses it (402 subscription_required; the caller's transaction rolls back) when
 * the Tenant is restricted and one of `userIds` holds a seat afterwards that they did not hold before:
 * a restricted Tenant takes no new seat (Part B). Seats already held stay; a change adding none passes.
 */
export async function withoutNewSeatsIfRestricted<T>(tx: Tx, tenantId: string | null, userIds: string[], now: Date, mutate: () => Promise<T>): Promise<T> {
  const restricted = tenantId !== null && (await isRestricted(tx, tenantId));
  if (!restricted) return mutate();
  const before = await seatHoldersAmong(tx, tenantId, userIds, now);
  const result = await mutate();
  const after = await seatHoldersAmong(tx, tenantId, userIds, now);
  if ([...after].some((u) => !before.has(u))) throw new ApiError('subscription_required', { details: { tenant_id: tenantId, resource: 'seats' } });
  return result;
}

/**
 * Runs `mutate` (which may make organization-wide grants reach members) and then holds the Tenants'
 * seat caps: when a capped Tenant ends up over its cap, the users among `userIds` who became seats
 * through the change (newest user ids last, so the choice is stable) are marked seat_limit on every
 * grant of that Tenant that reaches them, until the count is back at the cap. Adding a member never
 * fails on a plan limit; the excess members simply get no access. With holdRestricted (a member
 * becoming active), a restricted Tenant's cap is the seats it holds: it takes no new seat, and the
 * member is marked instead of the request failing. Call it inside withAccessFlips so
 * the marked members' access never flips on. Seats freed by time that no release has given back yet
 * go to the members already marked first (releaseSeatLimits, before the change): the change's users
 * take only the room left after them.
 */
export async function withSeatCap<T>(tx: Tx, ctx: Ctx, tenantIds: string[], userIds: string[], mutate: () => Promise<T>, opts: { holdRestricted?: boolean } = {}): Promise<T> {
  const now = ctx.now;
  const capped: { tenantId: string; cap: number; before: Set<string> }[] = [];
  await lockTenantSeats(tx, tenantIds);
  for (const tenantId of new Set(tenantIds)) {
    await releaseSeatLimits(tx, inTx(ctx, tx), tenantId, { seatedByChange: userIds });
    let cap = await seatCapOf(tx, tenantId);
    // A restricted Tenant takes no new seat: its cap is the seats it holds now.
    if (opts.holdRestricted && (await isRestricted(tx, tenantId))) cap = Math.min(cap ?? Infinity, await countSeats(tx, tenantId, now));
    if (cap !== null) capped.push({ tenantId, cap, before: await seatHoldersAmong(tx, tenantId, userIds, now) });
  }
  const result = await mutate();
  for (const { tenantId, cap, before } of capped) {
    const excess = (await countSeats(tx, tenantId, now)) - cap;
    if (excess <= 0) continue;
    const after = await seatHoldersAmong(tx, tenantId, userIds, now);
    const added = [...after].filter((u) => !before.has(u)).sort();
    const over = added.slice(Math.max(0, added.length - excess));
    if (over.length === 0) continue;
    await tx.query(
      `INSERT INTO org_seat_limits (entitlement_id, user_id, created_at)
       SELECT e.id, m.user_id, $3 FROM entitlements e JOIN applications a ON a.id = e.application_id
         JOIN organization_members m ON m.organization_id = e.organization_id AND m.membership_status = 'active'
        WHERE a.tenant_id = $1 AND m.user_id = ANY($2::text[]) AND e.organization_id IS NOT NULL AND e.status IN ('active', 'disabled')
       ON CONFLICT DO NOTHING`,
      [tenantId, over, now],
    );
  }
  return result;
}

/**
 * The marked users among `userIds` whom releasing their marks would make seats, with the Applications
 * of those grants: a marked grant that is live and whose scope includes them.
 */
async function seatedByRelease(db: Queryable, tenantId: string, userIds: string[], now: Date): Promise<Map<string, string[]>> {
  const { rows } = await db.query<{ user_id: string; application_id: string }>(
    `SELECT DISTINCT l.user_id, e.application_id FROM org_seat_limits l JOIN entitlements e ON e.id = l.entitlement_id JOIN applications a ON a.id = e.application_id
       JOIN organization_members m ON m.organization_id = e.organization_id AND m.user_id = l.user_id AND m.membership_status = 'active'
      WHERE a.tenant_id = $1 AND l.user_id = ANY($3::text[]) AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
        AND ${MEMBER_DECISION_SQL} <> 'excluded'`,
    [tenantId, now, userIds],
  );
  const out = new Map<string, string[]>();
  for (const r of rows) out.set(r.user_id, [...(out.get(r.user_id) ?? []), r.application_id]);
  return out;
}

const DELETE_MARKS_SQL = `DELETE FROM org_seat_limits l USING entitlements e, applications a
  WHERE e.id = l.entitlement_id AND a.id = e.application_id AND a.tenant_id = $1 AND l.user_id = ANY($2::text[])`;

/**
 * Gives freed seats back: members marked seat_limit on the Tenant regain their place, oldest marks
 * first, while the Tenant has room (all of them when its plan has no cap; a member who is already a
 * seat through another path costs nothing). Their access flips on with reason org_grant_changed.
 *
 * A mutation that frees seats calls this inside its own withAccessFlips, after its change: a pair
 * whose access the change ends and the release gives back (a marked member whose personal grant is
 * revoked, who takes the seat it held) did not flip, and gets no event at all, rather than
 * access.revoked and access.granted in one transaction. The release announces only the pairs it can
 * change, the released users' Applications of the marked grants that now include them, so a pair the
 * change itself flipped keeps the change's reason.
 *
 * A change that may add a seat calls it first (opts.seatedByChange: the users it may seat): a marked
 * member among them keeps their place, the room left for them, and takes it through the change.
 */
export async function releaseSeatLimits(tx: Tx, ctx: Ctx, tenantId: string, opts: { seatedByChange?: string[] } = {}): Promise<number> {
  // Seats are counted here: a grant counting them at the same time would take the room this gives
  // back too (the Tenant over its cap). Locked before the members released (src/access/locks.ts).
  await lockTenantSeats(tx, [tenantId]);
  const markedNow = async () => (await tx.query<{ user_id: string; test_mode: boolean }>(
    `SELECT l.user_id, bool_or(e.test_mode) AS test_mode FROM org_seat_limits l JOIN entitlements e ON e.id = l.entitlement_id JOIN applications a ON a.id = e.application_id
      WHERE a.tenant_id = $1 GROUP BY l.user_id ORDER BY min(l.created_at), l.user_id`,
    [tenantId],
  )).rows;
  // The marked members are locked before the ones to seat are chosen, and their marks and memberships
  // read again under the locks: an erasure (or a member removal) holding one of them has committed by
  // now, and the seat goes to a member still waiting, not to the one it removed. Marks are added only
  // under the Tenant's lock (held), so none appears meanwhile.
  const waiting = await markedNow();
  if (waiting.length === 0) return 0;
  await lockUsersForAccess(tx, waiting.map((r) => r.user_id));
  const marked = await markedNow();
  if (marked.length === 0) return 0;
  // A restricted Tenant has no room for a new seat until the restriction lifts.
  const cap = (await isRestricted(tx, tenantId)) ? 0 : await seatCapOf(tx, tenantId);
  // A job or processor event (system scope) sees both modes' marks. Each mode's seats are counted
  // apart, as that mode's requests count them (row-level security), so the other mode's seats never
  // take this mode's room; and each user's access.granted is an event of that user's mode, so a test
  // member's goes only to test-mode subscriptions.
  let count = 0;
  for (const mode of ['live', 'test'] as const) {
    const ids = marked.filter((r) => r.test_mode === (mode === 'test')).map((r) => r.user_id);
    if (ids.length === 0) continue;
    const { seating, dropped, apps } = await asModeWithin(tx, mode, async () => {
      const seated = await seatHoldersAmong(tx, tenantId, ids, ctx.now);
      const byRelease = await seatedByRelease(tx, tenantId, ids, ctx.now);
      let room = cap === null ? Infinity : cap - (await countSeats(tx, tenantId, ctx.now));
      // A member every marked grant now leaves out (scope, disabled, ended) takes no room and gains
      // nothing: the mark goes, and the seat goes to the next one waiting.
      const dropped = ids.filter((u) => !byRelease.has(u));
      const seating: string[] = [];
      for (const u of ids.filter((id) => byRelease.has(id))) {
        if (seated.has(u)) seating.push(u);
        else if (room-- > 0 && !opts.seatedByChange?.includes(u)) seating.push(u);
        // A member the calling change is about to seat through its own path keeps their place (the
        // room stays theirs) and their mark, which the next release drops without using room.
      }
      return { seating, dropped, apps: [...new Set(seating.flatMap((u) => byRelease.get(u)!))] };
    });
    if (dropped.length) await tx.query(DELETE_MARKS_SQL, [tenantId, dropped]);
    if (seating.length) {
      await withAccessFlips(tx, { ...ctx, mode }, { userIds: seating, applicationIds: apps }, 'org_grant_changed', () => tx.query(DELETE_MARKS_SQL, [tenantId, seating]));
    }
    count += dropped.length + seating.length;
  }
  return count;
}
