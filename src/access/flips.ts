import type { Ctx } from '../context.js';
import type { Tx } from '../db/types.js';
import { emitMany, type OutboundEvent } from '../outbox/emit.js';
import { accessKey, resolveAccess, type ResolvedAccess } from './resolve.js';

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
  const keys = [...new Set([...before.keys(), ...after.keys()])];
  if (keys.length === 0) return 0;
  const pairs = keys.map((k) => (after.get(k) ?? before.get(k))!);
  // Compare against what subscribers were last told for each pair (a pair never announced falls
  // back to the resolution before the change), so no flip is announced twice.
  const { rows } = await tx.query<{ user_id: string; application_id: string; allowed: boolean }>(
    `SELECT s.user_id, s.application_id, s.allowed FROM access_states s
       JOIN unnest($1::text[], $2::text[]) AS p(user_id, application_id) ON p.user_id = s.user_id AND p.application_id = s.application_id`,
    [pairs.map((p) => p.user_id), pairs.map((p) => p.application_id)],
  );
  const announced = new Map(rows.map((r) => [accessKey(r.user_id, r.application_id), r.allowed]));
  const events: OutboundEvent[] = [];
  const changed: { user_id: string; application_id: string; allowed: boolean }[] = [];
  for (const [i, key] of keys.entries()) {
    const was = announced.get(key) ?? before.get(key)?.allowed ?? false;
    const now = after.get(key);
    const is = now?.allowed ?? false;
    if (was === is || (only && only !== (is ? 'granted' : 'revoked'))) continue;
    const pair = pairs[i];
    changed.push({ user_id: pair.user_id, application_id: pair.application_id, allowed: is });
    events.push({
      type: is ? 'access.granted' : 'access.revoked',
      applicationId: pair.application_id,
      data: { user_id: pair.user_id, application_id: pair.application_id, reason, entitlement_status: now?.entitlement_status ?? 'none' },
    });
  }
  if (changed.length) {
    await tx.query(
      `INSERT INTO access_states (user_id, application_id, allowed, updated_at)
       SELECT u, a, al, $4 FROM unnest($1::text[], $2::text[], $3::boolean[]) AS t(u, a, al)
       ON CONFLICT (user_id, application_id) DO UPDATE SET allowed = EXCLUDED.allowed, updated_at = EXCLUDED.updated_at`,
      [changed.map((p) => p.user_id), changed.map((p) => p.application_id), changed.map((p) => p.allowed), ctx.now],
    );
  }
  await emitMany(tx, ctx, events);
  return events.length;
}
