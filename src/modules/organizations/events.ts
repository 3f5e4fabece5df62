import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { emit } from '../../outbox/emit.js';

/**
 * organization.member_added / member_removed: "an active membership begins or is removed" (Part B
 * Resource events). Audited always; the webhook is left out only where the caller says so (a pending
 * invitation withdrawn). formerPathApplicationIds routes a removal to the Applications the membership
 * used to reach.
 */
export async function memberEvent(
  tx: Tx,
  ctx: Ctx,
  type: 'organization.member_added' | 'organization.member_removed',
  m: { organization_id: string; user_id: string; role: string; membership_status?: string },
  webhook = true,
  formerPathApplicationIds: string[] = [],
): Promise<void> {
  const data = { organization_id: m.organization_id, user_id: m.user_id, role: m.role };
  // The audit row shows the membership as it was before a removal (a withdrawn invitation says it
  // was pending) and as it is after an addition, like every other removal and creation.
  const snapshot = m.membership_status ? { ...data, membership_status: m.membership_status } : data;
  const [before, after] = type === 'organization.member_removed' ? [snapshot, null] : [null, snapshot];
  await recordAudit(tx, ctx, { action: type, target: { type: 'organization', id: m.organization_id }, organizationId: m.organization_id, targetUserId: m.user_id, before, after });
  if (webhook) await emit(tx, ctx, { type, data, formerPathApplicationIds });
}
