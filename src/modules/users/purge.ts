import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import type { Tx } from '../../db/types.js';
import { withAccessFlips } from '../../access/flips.js';
import type { EntitlementRow } from '../entitlements/store.js';
import { announceEntitlementDeleted, announceScopeChanges } from '../entitlements/grant.js';
import { pathApplicationIds } from '../../outbox/emit.js';
import { memberEvent } from '../organizations/events.js';
import { announceRoleChange } from '../roles/assignments.js';
import { MEMBER_ROLE_ID } from './service.js';
import {
  deletePurgedEntitlements, deletePurgedMemberships, deletePurgedRoleAssignments, deletePurgedUserRows, deleteRemainingRows, findStayingUsers,
  listLeavingMembers, lockGrantsNamingPurged, lockOrganizationsAndGrants, lockPurgeUsers, removePurgedFromOverrides, type Assignment, type Membership,
} from './purge-store.js';

export const TEST_RETENTION_SECONDS = 30 * 24 * 3600;

/**
 * The test-purge job (Part A convention 10): test-mode rows older than 30 days go, with everything
 * that hangs off them. Live rows are never touched (every statement filters test_mode).
 */
export async function purgeTestData(deps: Deps): Promise<Record<string, number>> {
  const cutoff = addSeconds(deps.clock.now(), -TEST_RETENTION_SECONDS);
  return deps.database.scoped('system').transaction(async (tx) => {
    await lockOrganizationsAndGrants(tx, cutoff);
    const staying = await findStayingUsers(tx, cutoff);
    await lockPurgeUsers(tx, cutoff, staying);
    await deletePurgedUserRows(tx, cutoff);
    const assignments = await deleteRoleAssignments(tx, cutoff);
    const ctx = { ...systemCtx(deps, 'test'), db: tx, now: deps.clock.now() };
    const formerPaths = await readFormerPaths(tx, cutoff);
    const { memberships, purged } = await deleteMembershipsAndGrants(tx, ctx, cutoff, staying);
    // Each purged Entitlement is a hard delete, announced as DELETE /v1/entitlements/{id} and the
    // erasure cascade announce theirs (Part B Resource events: entitlement.deleted "hard-deleted", with
    // its last state; audited as the system), so a test receiver mirroring grants does not keep them.
    for (const row of purged) await announceEntitlementDeleted(tx, ctx, row);
    await dropPurgedFromOverrides(tx, ctx, cutoff);
    await announceRemovals(tx, ctx, memberships, formerPaths, assignments);
    return { entitlements: purged.length, ...(await deleteRemainingRows(tx, cutoff)) };
  });
}

/**
 * Role assignments of the purged users: each hard delete is announced as DELETE
 * /v1/users/{id}/roles/{roleId} and the erasure cascade announce theirs (role.removed), by the run
 * that deletes it (RETURNING), so an Application mirroring its Roles does not keep them for ever.
 * Returns those to announce (not the platform member Role: part of the user record, it is not
 * announced on its own; announceRoleChange).
 */
async function deleteRoleAssignments(tx: Tx, cutoff: Date): Promise<Assignment[]> {
  const assignments = await deletePurgedRoleAssignments(tx, cutoff);
  return assignments.filter((a) => a.role_id !== MEMBER_ROLE_ID);
}

/**
 * The purged memberships (of purged users, and every member of a purged Organization): each is
 * announced as a DELETE of the member and the erasure cascade announce theirs, routed to the
 * Applications the member reached before (read before the delete).
 */
async function readFormerPaths(tx: Tx, cutoff: Date): Promise<Map<string, string[]>> {
  const leaving = await listLeavingMembers(tx, cutoff);
  const formerPaths = new Map<string, string[]>();
  for (const { user_id } of leaving) formerPaths.set(user_id, await pathApplicationIds(tx, user_id));
  return formerPaths;
}

async function deleteMembershipsAndGrants(
  tx: Tx,
  ctx: Ctx,
  cutoff: Date,
  staying: string[],
): Promise<{ memberships: Membership[]; purged: EntitlementRow[] }> {
  let memberships: Membership[] = [];
  const purged = await withAccessFlips(tx, ctx, { userIds: staying }, 'entitlement_deleted', async () => {
    memberships = await deletePurgedMemberships(tx, cutoff);
    const rows = await deletePurgedEntitlements(tx, cutoff);
    return rows.sort((a, b) => (a.id < b.id ? -1 : 1));
  });
  return { memberships, purged };
}

/**
 * Grants that stay lose the purged users from their member_overrides (current members only), each
 * change announced as a member's removal announces it (entitlement.member_scope_changed).
 */
async function dropPurgedFromOverrides(tx: Tx, ctx: Ctx, cutoff: Date): Promise<void> {
  const scopedBefore = await lockGrantsNamingPurged(tx, cutoff);
  const scopedAfter = await removePurgedFromOverrides(tx, cutoff, ctx.now, scopedBefore.map((r) => r.id));
  await announceScopeChanges(tx, ctx, scopedBefore.map((before) => ({ before, after: scopedAfter.find((r) => r.id === before.id)! })));
}

/** Announced by the run that deleted each row (RETURNING): an overlapping run deleted nothing and says nothing. */
async function announceRemovals(tx: Tx, ctx: Ctx, memberships: Membership[], formerPaths: Map<string, string[]>, assignments: Assignment[]): Promise<void> {
  const byKey = <T>(key: (r: T) => string) => (a: T, b: T) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);
  for (const m of memberships.sort(byKey((r) => `${r.organization_id} ${r.user_id}`))) {
    await memberEvent(tx, ctx, 'organization.member_removed', m, m.membership_status === 'active', formerPaths.get(m.user_id) ?? []);
  }
  for (const a of assignments.sort(byKey((r) => `${r.user_id} ${r.role_id}`))) await announceRoleChange(tx, ctx, 'role.removed', a);
}
