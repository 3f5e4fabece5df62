import { inTx, type Ctx } from '../../context.js';
import { ApiError } from '../../errors.js';
import type { Queryable, Tx } from '../../db/types.js';
import { withAccessFlips } from '../../access/flips.js';
import { lockApplicationTenants, lockTenantSeats, lockUsersForAccess } from '../../access/locks.js';
import { asModeWithin } from '../../db/roles.js';
import { PLAN_LIMITS } from './plans.js';
import { findApplicationTenant, findTenantPlan, isTenantRestricted } from './store.js';
import {
  countSeats,
  deleteSeatLimits,
  findSeatHolders,
  insertSeatLimits,
  listOrgGrantApplications,
  listSeatedByRelease,
  listSeatLimitMarks,
} from './seats-store.js';

export { SEAT_HOLDERS_SQL, countSeats, countSeatsWithApplication } from './seats-store.js';

export async function isSeat(db: Queryable, tenantId: string, userId: string, now: Date): Promise<boolean> {
  return (await findSeatHolders(db, tenantId, [userId], now)).has(userId);
}

async function seatCapOf(db: Queryable, tenantId: string): Promise<number | null> {
  const row = await findTenantPlan(db, tenantId);
  return row ? PLAN_LIMITS[row.plan].seats : null;
}

export async function applicationTenant(db: Queryable, applicationId: string): Promise<string | null> {
  return (await findApplicationTenant(db, applicationId))?.tenant_id ?? null;
}

/**
 * The Tenants whose Applications an Organization's live grants are for, locked before their seats are
 * counted, each read under its Application's lock (lockApplicationTenants: an ownership move meanwhile
 * is waited for, or waits). Call after the Organization is locked.
 */
export async function lockOrgGrantTenants(tx: Tx, orgId: string): Promise<string[]> {
  return lockApplicationTenants(tx, await listOrgGrantApplications(tx, orgId));
}

/**
 * Runs `mutate` and refuses it (402 subscription_required; the caller's transaction rolls back) when
 * the Tenant is restricted and one of `userIds` holds a seat afterwards that they did not hold before:
 * a restricted Tenant takes no new seat (Part B). Seats already held stay; a change adding none passes.
 */
export async function withoutNewSeatsIfRestricted<T>(tx: Tx, tenantId: string | null, userIds: string[], now: Date, mutate: () => Promise<T>): Promise<T> {
  const restricted = tenantId !== null && (await isTenantRestricted(tx, tenantId));
  if (!restricted) return mutate();
  const before = await findSeatHolders(tx, tenantId, userIds, now);
  const result = await mutate();
  const after = await findSeatHolders(tx, tenantId, userIds, now);
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
    if (opts.holdRestricted && (await isTenantRestricted(tx, tenantId))) cap = Math.min(cap ?? Infinity, await countSeats(tx, tenantId, now));
    if (cap !== null) capped.push({ tenantId, cap, before: await findSeatHolders(tx, tenantId, userIds, now) });
  }
  const result = await mutate();
  for (const { tenantId, cap, before } of capped) {
    const excess = (await countSeats(tx, tenantId, now)) - cap;
    if (excess <= 0) continue;
    const after = await findSeatHolders(tx, tenantId, userIds, now);
    const added = [...after].filter((u) => !before.has(u)).sort();
    const over = added.slice(Math.max(0, added.length - excess));
    if (over.length === 0) continue;
    await insertSeatLimits(tx, tenantId, over, now);
  }
  return result;
}

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
  const markedNow = () => listSeatLimitMarks(tx, tenantId);
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
  const cap = (await isTenantRestricted(tx, tenantId)) ? 0 : await seatCapOf(tx, tenantId);
  // A job or processor event (system scope) sees both modes' marks. Each mode's seats are counted
  // apart, as that mode's requests count them (row-level security), so the other mode's seats never
  // take this mode's room; and each user's access.granted is an event of that user's mode, so a test
  // member's goes only to test-mode subscriptions.
  let count = 0;
  for (const mode of ['live', 'test'] as const) {
    const ids = marked.filter((r) => r.test_mode === (mode === 'test')).map((r) => r.user_id);
    if (ids.length === 0) continue;
    const { seating, dropped, apps } = await asModeWithin(tx, mode, async () => {
      const seated = await findSeatHolders(tx, tenantId, ids, ctx.now);
      const byRelease = await listSeatedByRelease(tx, tenantId, ids, ctx.now);
      let room = cap === null ? Infinity : cap - (await countSeats(tx, tenantId, ctx.now));
      // A member every marked grant now leaves out (scope, disabled, ended) takes no room and gains
      // nothing: the mark goes, and the seat goes to the next one waiting.
      const dropped = ids.filter((u) => !byRelease.has(u));
      const seating: string[] = [];
      const byChange = new Set(opts.seatedByChange);
      for (const u of ids.filter((id) => byRelease.has(id))) {
        if (seated.has(u)) seating.push(u);
        else if (room-- > 0 && !byChange.has(u)) seating.push(u);
        // A member the calling change is about to seat through its own path keeps their place (the
        // room stays theirs) and their mark, which the next release drops without using room.
      }
      return { seating, dropped, apps: [...new Set(seating.flatMap((u) => byRelease.get(u)!))] };
    });
    if (dropped.length) await deleteSeatLimits(tx, tenantId, dropped);
    if (seating.length) {
      await withAccessFlips(tx, { ...ctx, mode }, { userIds: seating, applicationIds: apps }, 'org_grant_changed', () => deleteSeatLimits(tx, tenantId, seating));
    }
    count += dropped.length + seating.length;
  }
  return count;
}
