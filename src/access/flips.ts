import type { Ctx } from '../context.js';
import type { Tx } from '../db/types.js';
import { emitMany, type OutboundEvent } from '../outbox/emit.js';
import { resolveAccess, type ResolvedAccess } from './resolve.js';

export type AccessReason =
  | 'entitlement_granted' | 'entitlement_started' | 'entitlement_enabled' | 'entitlement_disabled' | 'entitlement_revoked'
  | 'entitlement_expired' | 'entitlement_deleted' | 'org_grant_changed' | 'org_member_added' | 'org_member_removed'
  | 'user_suspended' | 'user_reactivated' | 'user_deleted';

/**
 * Every mutation that can change access runs inside this: it resolves the affected users before and
 * after (in the same transaction, at the same instant) and writes access.granted / access.revoked to
 * the outbox exactly once per (user, Application) pair whose access flipped, and never when another
 * active path remains.
 */
export async function withAccessFlips<T>(
  tx: Tx,
  ctx: Ctx,
  scope: { userIds: string[]; applicationIds?: string[] | null },
  reason: AccessReason,
  mutate: () => Promise<T>,
): Promise<T> {
  const apps = scope.applicationIds ?? null;
  const before = await resolveAccess(tx, scope.userIds, ctx.now, apps);
  const result = await mutate();
  const after = await resolveAccess(tx, scope.userIds, ctx.now, apps);
  await emitFlips(tx, ctx, before, after, reason);
  return result;
}

/**
 * Writes access.granted / access.revoked for each pair whose `allowed` differs between the two
 * resolutions; `only` limits it to one direction (time-driven sweeps).
 */
export async function emitFlips(
  tx: Tx,
  ctx: Ctx,
  before: Map<string, ResolvedAccess>,
  after: Map<string, ResolvedAccess>,
  reason: AccessReason,
  only?: 'granted' | 'revoked',
): Promise<number> {
  const events: OutboundEvent[] = [];
  for (const key of new Set([...before.keys(), ...after.keys()])) {
    const was = before.get(key)?.allowed ?? false;
    const now = after.get(key);
    const is = now?.allowed ?? false;
    if (was === is || (only && only !== (is ? 'granted' : 'revoked'))) continue;
    const pair = (now ?? before.get(key))!;
    events.push({
      type: is ? 'access.granted' : 'access.revoked',
      applicationId: pair.application_id,
      data: { user_id: pair.user_id, application_id: pair.application_id, reason, entitlement_status: now?.entitlement_status ?? 'none' },
    });
  }
  await emitMany(tx, ctx, events);
  return events.length;
}
