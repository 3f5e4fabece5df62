import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { emitFlips } from '../../access/flips.js';
import { findPathRows, type PathRow } from '../../access/resolve.js';
import { lockOrganization, lockUsersForAccess } from '../../access/locks.js';
import {
  findEntitlementRow, findNextDueEntitlement, lockDueEntitlement, toEntitlement, updateEntitlementExpired, updateEntitlementStartNotified,
  type DueRows, type EntitlementRow,
} from './store.js';
import { affectedUsers } from './patch.js';
import { emitEntitlementEvent } from './grant.js';
import { eachSkippingFailures } from '../../jobs/each.js';

/**
 * Announces the time-driven flips of the pairs `row` reaches, read from `paths` (the path rows before
 * the job wrote the row). A pair never announced starts from its resolution just before `at` (the
 * row's start or end), or at the row's creation when that came later: a backdated row never gave access.
 */
async function announceTimeFlips(tx: Tx, ctx: Ctx, row: EntitlementRow, users: string[], paths: PathRow[], at: Date): Promise<void> {
  const fallbackAt = new Date(Math.max(at.getTime() - 1, row.created_at.getTime()));
  await emitFlips(tx, ctx, { rows: paths, fallbackAt }, { rows: paths, userIds: users, apps: [row.application_id] }, null);
}

/**
 * entitlement-expiry (every 5 minutes): rows whose ends_at passed become expired. Resolution already
 * treated them as expired at ends_at; this writes the row, entitlement.expired (for active rows) and
 * the time-driven flips not yet announced: access.revoked (entitlement_expired) for each pair that was
 * allowed just before ends_at and is not now, preceded by access.granted (entitlement_started) when the
 * pair's start passed unannounced. Disabled rows expire silently (no access event), keeping disabled_reason.
 */
export async function runExpirySweep(deps: Deps): Promise<{ expired: number }> {
  const expired = await eachDueRow(deps, 'expiry', (tx, ctx, row) => expireRow(tx, ctx, row));
  return { expired };
}

/**
 * Runs `fn` on each entitlement row `kind` selects (store.ts DUE_ROWS, at the clock's now), oldest
 * first, one transaction per row: the row's Organization is locked before the row, as every request does
 * (src/access/locks.ts). Locking a batch of rows first and their Organizations and users after
 * deadlocked with a PATCH of one of them (Organization, then row). A row a request changed
 * meanwhile is read again under its lock and left alone when it is no longer due.
 */
async function eachDueRow(deps: Deps, kind: DueRows, fn: (tx: Tx, ctx: Ctx, row: EntitlementRow) => Promise<void>): Promise<number> {
  return eachSkippingFailures(deps, 'entitlement_id', (skip, picked) =>
    deps.database.scoped('system').transaction(async (tx) => {
      const now = deps.clock.now();
      const next = await findNextDueEntitlement(tx, kind, now, skip);
      if (!next) return 'none';
      picked(next.id);
      if (next.organization_id) await lockOrganization(tx, next.organization_id);
      const row = await lockDueEntitlement(tx, kind, now, next.id);
      if (!row) return 'gone';
      await fn(tx, { ...systemCtx(deps, modeOf(row.test_mode)), db: tx, now }, row);
      return 'done';
    }),
  );
}

/**
 * A live row whose ends_at passed resolves as expired already; the sweep has not written it yet.
 * Requests that meet one (a new grant, a PATCH) do the sweep's work first, in their transaction, as
 * the system: `row` must be locked by the caller. Returns the row as it now stands.
 */
export async function expireIfEnded(tx: Tx, ctx: Ctx, row: EntitlementRow): Promise<EntitlementRow> {
  if ((row.status !== 'active' && row.status !== 'disabled') || !row.ends_at || row.ends_at > ctx.now) return row;
  await expireRow(tx, { ...systemCtx(ctx.deps, ctx.mode), db: tx, now: ctx.now }, row);
  return findEntitlementRow(tx, row.id);
}

/** Marks one active or disabled row expired, with the sweep's audit, event and time-driven flips. */
export async function expireRow(tx: Tx, ctx: Ctx, row: EntitlementRow): Promise<void> {
  if (row.organization_id) await lockOrganization(tx, row.organization_id);
  const users = await affectedUsers(tx, row);
  await lockUsersForAccess(tx, users);
  // Read before the write: a row marked expired resolves as expired at every instant, even before ends_at.
  const paths = row.status === 'active' ? await findPathRows(tx, users, [row.application_id]) : [];
  const expired = await updateEntitlementExpired(tx, row.id, ctx.now);
  await recordAudit(tx, ctx, { action: 'entitlement.expired', target: { type: 'entitlement', id: row.id }, targetUserId: row.user_id, organizationId: row.organization_id, applicationId: row.application_id, before: toEntitlement(row), after: toEntitlement(expired) });
  await emitEntitlementEvent(tx, ctx, 'entitlement.expired', expired);
  // disabled → expired keeps disabled_reason and gives no access event (the row gave no access).
  if (row.status === 'active') await announceTimeFlips(tx, ctx, row, users, paths, row.ends_at!);
}

/**
 * scheduled-starts (every minute): a row created with a future starts_at resolves as scheduled until
 * then; once it starts, access.granted with reason entitlement_started fires for each pair that
 * flips (once per row: start_notified_at), unless a transaction that ran since announced it, and
 * access.revoked (entitlement_expired) follows when the row's ends_at passed too.
 */
export async function runScheduledStarts(deps: Deps): Promise<{ started: number }> {
  const started = await eachDueRow(deps, 'scheduled_start', async (tx, ctx, row) => {
    const users = await affectedUsers(tx, row);
    await lockUsersForAccess(tx, users);
    await updateEntitlementStartNotified(tx, row.id, ctx.now);
    await announceTimeFlips(tx, ctx, row, users, await findPathRows(tx, users, [row.application_id]), row.starts_at);
  });
  return { started };
}

