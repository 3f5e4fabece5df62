import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { emitFlips } from '../../access/flips.js';
import { findPathRows, type PathRow } from '../../access/resolve.js';
import { lockOrganization, lockUsersForAccess } from '../../access/locks.js';
import { ENT_COLUMNS, nextUpdatedAt, toEntitlement, type EntitlementRow } from './store.js';
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
  const expired = await eachDueRow(deps, `e.status IN ('active', 'disabled') AND e.ends_at <= $1`, 'e.ends_at', (tx, ctx, row) => expireRow(tx, ctx, row));
  return { expired };
}

/**
 * Runs `fn` on each entitlement row `due` selects (at the clock's now, $1), oldest `order` first, one
 * transaction per row: the row's Organization is locked before the row, as every request does
 * (src/access/locks.ts). Locking a batch of rows first and their Organizations and users after
 * deadlocked with a PATCH of one of them (Organization, then row). A row a request changed
 * meanwhile is read again under its lock and left alone when it is no longer due.
 */
async function eachDueRow(deps: Deps, due: string, order: string, fn: (tx: Tx, ctx: Ctx, row: EntitlementRow) => Promise<void>): Promise<number> {
  return eachSkippingFailures(deps, 'entitlement_id', (skip, picked) =>
    deps.database.scoped('system').transaction(async (tx) => {
      const now = deps.clock.now();
      const { rows: [next] } = await tx.query<{ id: string; organization_id: string | null }>(
        `SELECT e.id, e.organization_id FROM entitlements e WHERE ${due} AND e.id <> ALL($2::text[]) ORDER BY ${order}, e.id LIMIT 1`,
        [now, skip],
      );
      if (!next) return 'none';
      picked(next.id);
      if (next.organization_id) await lockOrganization(tx, next.organization_id);
      const { rows: [row] } = await tx.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE ${due} AND e.id = $2 FOR UPDATE`, [now, next.id]);
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
  const { rows } = await tx.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.id = $1`, [row.id]);
  return rows[0];
}

/** Marks one active or disabled row expired, with the sweep's audit, event and time-driven flips. */
export async function expireRow(tx: Tx, ctx: Ctx, row: EntitlementRow): Promise<void> {
  if (row.organization_id) await lockOrganization(tx, row.organization_id);
  const users = await affectedUsers(tx, row);
  await lockUsersForAccess(tx, users);
  // Read before the write: a row marked expired resolves as expired at every instant, even before ends_at.
  const paths = row.status === 'active' ? await findPathRows(tx, users, [row.application_id]) : [];
  const { rows } = await tx.query<EntitlementRow>(`UPDATE entitlements e SET status = 'expired', updated_at = ${nextUpdatedAt('$2')} WHERE e.id = $1 RETURNING ${ENT_COLUMNS}`, [row.id, ctx.now]);
  await recordAudit(tx, ctx, { action: 'entitlement.expired', target: { type: 'entitlement', id: row.id }, targetUserId: row.user_id, organizationId: row.organization_id, applicationId: row.application_id, before: toEntitlement(row), after: toEntitlement(rows[0]) });
  await emitEntitlementEvent(tx, ctx, 'entitlement.expired', rows[0]);
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
  const started = await eachDueRow(deps, `e.status = 'active' AND e.start_notified_at IS NULL AND e.starts_at <= $1`, 'e.starts_at', async (tx, ctx, row) => {
    const users = await affectedUsers(tx, row);
    await lockUsersForAccess(tx, users);
    await tx.query('UPDATE entitlements SET start_notified_at = $2 WHERE id = $1', [row.id, ctx.now]);
    await announceTimeFlips(tx, ctx, row, users, await findPathRows(tx, users, [row.application_id]), row.starts_at);
  });
  return { started };
}

