import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { emitFlips } from '../../access/flips.js';
import { resolveAccess, type ResolvedAccess } from '../../access/resolve.js';
import { ENT_COLUMNS, toEntitlement, type EntitlementRow } from './store.js';
import { affectedUsers } from './patch.js';
import { emitEntitlementEvent } from './grant.js';

const BATCH = 200;
const justBefore = (d: Date) => new Date(d.getTime() - 1);

/** The resolution of each affected pair just before `at` (an expiry or a start), for flip detection. */
async function resolveBefore(tx: Tx, users: string[], app: string, at: Date): Promise<Map<string, ResolvedAccess>> {
  return resolveAccess(tx, users, justBefore(at), [app]);
}

/**
 * entitlement-expiry (every 5 minutes): rows whose ends_at passed become expired. Resolution already
 * treated them as expired at ends_at; this writes the row, entitlement.expired (for active rows) and
 * access.revoked with reason entitlement_expired for each pair that was allowed just before ends_at
 * and is not now. Disabled rows expire silently (no access event), keeping disabled_reason.
 */
export async function runExpirySweep(deps: Deps): Promise<{ expired: number }> {
  let expired = 0;
  for (;;) {
    const n = await deps.database.scoped('system').transaction(async (tx) => {
      const now = deps.clock.now();
      const { rows } = await tx.query<EntitlementRow>(
        `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.status IN ('active', 'disabled') AND e.ends_at <= $1
          ORDER BY e.ends_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`,
        [now],
      );
      for (const row of rows) await expireRow(tx, { ...systemCtx(deps, modeOf(row.test_mode)), db: tx, now }, row);
      return rows.length;
    });
    expired += n;
    if (n < BATCH) return { expired };
  }
}

async function expireRow(tx: Tx, ctx: Ctx, row: EntitlementRow): Promise<void> {
  const users = await affectedUsers(tx, row);
  // A row created already past its ends_at (backdated) never gave access: there is nothing to revoke.
  const gaveAccess = row.status === 'active' && row.ends_at! > row.created_at;
  const before = gaveAccess ? await resolveBefore(tx, users, row.application_id, row.ends_at!) : new Map();
  const { rows } = await tx.query<EntitlementRow>(`UPDATE entitlements e SET status = 'expired', updated_at = $2 WHERE e.id = $1 RETURNING ${ENT_COLUMNS}`, [row.id, ctx.now]);
  if (row.status !== 'active') return;
  const after = await resolveAccess(tx, users, ctx.now, [row.application_id]);
  await recordAudit(tx, ctx, { action: 'entitlement.expired', target: { type: 'entitlement', id: row.id }, targetUserId: row.user_id, organizationId: row.organization_id, applicationId: row.application_id, before: toEntitlement(row), after: toEntitlement(rows[0]) });
  await emitEntitlementEvent(tx, ctx, 'entitlement.expired', rows[0]);
  await emitFlips(tx, ctx, before, after, 'entitlement_expired', 'revoked');
}

/**
 * scheduled-starts (every minute): a row created with a future starts_at resolves as scheduled until
 * then; once it starts, access.granted with reason entitlement_started fires for each pair that
 * flips (once per row: start_notified_at).
 */
export async function runScheduledStarts(deps: Deps): Promise<{ started: number }> {
  let started = 0;
  for (;;) {
    const n = await deps.database.scoped('system').transaction(async (tx) => {
      const now = deps.clock.now();
      const { rows } = await tx.query<EntitlementRow>(
        `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.status = 'active' AND e.start_notified_at IS NULL AND e.starts_at <= $1
          ORDER BY e.starts_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`,
        [now],
      );
      for (const row of rows) {
        const ctx = { ...systemCtx(deps, modeOf(row.test_mode)), db: tx, now };
        const users = await affectedUsers(tx, row);
        const before = await resolveBefore(tx, users, row.application_id, row.starts_at);
        await tx.query('UPDATE entitlements SET start_notified_at = $2 WHERE id = $1', [row.id, now]);
        const after = await resolveAccess(tx, users, now, [row.application_id]);
        await emitFlips(tx, ctx, before, after, 'entitlement_started', 'granted');
      }
      return rows.length;
    });
    started += n;
    if (n < BATCH) return { started };
  }
}

