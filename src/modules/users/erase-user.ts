import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { pathApplicationIds } from '../../outbox/emit.js';
import { announceRoleChange } from '../roles/assignments.js';
import { dropStoredAnswersAbout } from '../../http/idempotency.js';
import { memberEvent } from '../organizations/events.js';
import type { EntitlementRow } from '../entitlements/store.js';
import { announceEntitlementDeleted, announceScopeChanges } from '../entitlements/grant.js';
import type { UserRow } from './store.js';
import { MEMBER_ROLE_ID } from './service.js';
import {
  completeErasureRequest, deleteUserData, deleteUserMails, listMemberships, listPersonalGrants, listRoleAssignments, lockGrantsNamingMember,
  redactAuditSnapshots, removeMemberFromOverrides, scrubUserRow, type ErasedMembership,
} from './erasure-store.js';

const REDACTED = JSON.stringify({ redacted: true });

/**
 * One user's erasure (the erasure-cascade job, runErasureCascade), under the locks of lockForErasure:
 * clears everything the export holds except global Settings, redacts the user's audit snapshots and
 * scrubs the user row to a tombstone.
 */
export async function eraseUser(tx: Tx, ctx: Ctx, user: UserRow): Promise<void> {
  const id = user.id;
  const removed = await readRemovedLinks(tx, id);
  await deleteUserData(tx, id);
  const scopeChanges = await dropFromMemberOverrides(tx, ctx, id);
  await announceRemovedLinks(tx, ctx, id, removed, scopeChanges);
  await deleteUserMails(tx, user);
  // Idempotency-Key answers about the user (an admin's write to the soft-deleted user in the last 24
  // hours) would replay the erased Profile or address after the cascade.
  await dropStoredAnswersAbout(tx, id);
  await redactAuditSnapshots(tx, id, REDACTED);
  await scrubUser(tx, ctx, id);
  await recordAudit(tx, ctx, { action: 'user.erased', target: { type: 'user', id }, targetUserId: id });
}

interface RemovedLinks {
  memberships: ErasedMembership[];
  formerPaths: string[];
  grants: EntitlementRow[];
  assignments: { role_id: string; application_id: string | null }[];
}

/** What the cascade removes and announces, read before the deletes. */
async function readRemovedLinks(tx: Tx, id: string): Promise<RemovedLinks> {
  // Memberships go with the cascade, each removal announced as a DELETE of the member would
  // (organization.member_removed; a pending one audited only), routed to the Applications they reached.
  const memberships = await listMemberships(tx, id);
  const formerPaths = memberships.some((m) => m.membership_status === 'active') ? await pathApplicationIds(tx, id) : [];
  // Personal grants and Role assignments are hard-deleted too: each announced as DELETE
  // /v1/entitlements/{id} and DELETE /v1/users/{id}/roles/{roleId} announce theirs (Part B Resource
  // events: entitlement.deleted "hard-deleted", role.removed "assignment deleted"), so a receiver
  // mirroring them does not keep the erased user's grants and Roles for ever.
  const grants = await listPersonalGrants(tx, id);
  // (Not the platform member Role: part of the user record, it goes with user.erased; announceRoleChange.)
  const assignments = await listRoleAssignments(tx, id, MEMBER_ROLE_ID);
  return { memberships, formerPaths, grants, assignments };
}

/**
 * Org grants whose member_overrides name the user lose the entry, announced as a DELETE of the
 * member would (entitlement.member_scope_changed, Part B Resource events).
 */
async function dropFromMemberOverrides(tx: Tx, ctx: Ctx, id: string): Promise<{ before: EntitlementRow; after: EntitlementRow }[]> {
  const scopedBefore = await lockGrantsNamingMember(tx, id);
  const scopedAfter = await removeMemberFromOverrides(tx, id, ctx.now);
  return scopedBefore.map((before) => ({ before, after: scopedAfter.find((r) => r.id === before.id)! }));
}

async function announceRemovedLinks(
  tx: Tx,
  ctx: Ctx,
  id: string,
  { memberships, formerPaths, grants, assignments }: RemovedLinks,
  scopeChanges: { before: EntitlementRow; after: EntitlementRow }[],
): Promise<void> {
  for (const m of memberships) {
    await memberEvent(tx, ctx, 'organization.member_removed', { organization_id: m.organization_id, user_id: id, role: m.role, membership_status: m.membership_status }, m.membership_status === 'active', formerPaths);
  }
  await announceScopeChanges(tx, ctx, scopeChanges);
  for (const row of grants) await announceEntitlementDeleted(tx, ctx, row);
  for (const a of assignments) await announceRoleChange(tx, ctx, 'role.removed', { user_id: id, role_id: a.role_id, application_id: a.application_id });
}

/** The user row becomes a tombstone, and the erasure request its record. */
async function scrubUser(tx: Tx, ctx: Ctx, id: string): Promise<void> {
  await scrubUserRow(tx, id, `erased+${id.toLowerCase()}@erased.invalid`, ctx.now);
  // The request stays as the record that the erasure was done; its free-text reason, written by the
  // user or an admin about the user, goes with the rest.
  await completeErasureRequest(tx, id, ctx.now);
}
