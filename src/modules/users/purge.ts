import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import type { Tx } from '../../db/types.js';
import { withAccessFlips } from '../../access/flips.js';
import { ENT_COLUMNS, nextUpdatedAt, type EntitlementRow } from '../entitlements/store.js';
import { announceEntitlementDeleted, announceScopeChanges } from '../entitlements/grant.js';
import { pathApplicationIds } from '../../outbox/emit.js';
import { memberEvent } from '../organizations/events.js';
import { announceRoleChange } from '../roles/assignments.js';
import { MEMBER_ROLE_ID } from './service.js';

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
    await lockUsers(tx, cutoff, staying);
    await deleteUserRows(tx, cutoff);
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

// Owners of catalog rows stay: Applications and Tenants are shared by both modes and are not
// purged, so a test User or Organization that owns one (and the active org admins of such an
// Organization: a pending invitee owns nothing, src/access/ownership.ts) is kept rather than
// leaving the Application or Tenant with an owner that is gone.
const KEPT_ORGS = `SELECT owner_organization_id FROM applications WHERE owner_organization_id IS NOT NULL
                      UNION SELECT owner_organization_id FROM tenants WHERE owner_organization_id IS NOT NULL`;
const OLD_ORGS = `SELECT o.id FROM organizations o WHERE o.test_mode AND o.created_at < $1 AND o.id NOT IN (${KEPT_ORGS})`;
const OLD_USERS = `SELECT u.id FROM users u WHERE u.test_mode AND u.created_at < $1
                        AND NOT EXISTS (SELECT 1 FROM applications a WHERE a.owner_user_id = u.id)
                        AND NOT EXISTS (SELECT 1 FROM tenants n WHERE n.owner_user_id = u.id)
                        AND NOT EXISTS (SELECT 1 FROM organization_members m WHERE m.user_id = u.id AND m.role = 'org_admin' AND m.membership_status = 'active'
                                     AND m.organization_id IN (${KEPT_ORGS}))`;

type Membership = { organization_id: string; user_id: string; role: string; membership_status: string };
type Assignment = { user_id: string; role_id: string; application_id: string | null };

/**
 * Locked before the first delete, in the order of src/access/locks.ts: the Organizations whose
 * memberships or grants go (a member or grant write locks its Organization, then reads the row:
 * it waits for this run and finds the row gone, instead of deleting it a second time, announcing
 * the removal again, or holding the user this run deletes while it waits for the membership, a
 * deadlock), then the Entitlements that go or lose a purged member; the users last (lockUsers).
 */
async function lockOrganizationsAndGrants(tx: Tx, cutoff: Date): Promise<void> {
  await tx.query(
    `SELECT 1 FROM organizations WHERE id IN (${OLD_ORGS})
          OR id IN (SELECT organization_id FROM organization_members WHERE user_id IN (${OLD_USERS}))
          OR id IN (SELECT organization_id FROM entitlements WHERE test_mode AND created_at < $1)
        ORDER BY id FOR UPDATE`,
    [cutoff],
  );
  await tx.query(
    `SELECT 1 FROM entitlements e WHERE e.test_mode AND (e.created_at < $1 OR e.user_id IN (${OLD_USERS}) OR e.organization_id IN (${OLD_ORGS})
          OR e.member_overrides && ARRAY(${OLD_USERS})) ORDER BY e.id FOR UPDATE`,
    [cutoff],
  );
}

/**
 * Test users who stay (younger, or kept owners) may reach an Application through a row that goes
 * (an old entitlement, an old Organization's membership or grant): their access flips like any
 * other hard delete, so access.revoked (entitlement_deleted) goes out for each pair that flips.
 */
async function findStayingUsers(tx: Tx, cutoff: Date): Promise<string[]> {
  // One set of the users those rows reach (UNION) joined to the test users, less the purged (an anti-join):
  // an OR of three EXISTS was three hashed subqueries over every test user, estimated so high
  // (600k) that PostgreSQL compiled it with JIT, 1-4 s of a 70 ms statement (docs/conventions.md, Queries at scale).
  const { rows: staying } = await tx.query<{ id: string }>(
    `SELECT u.id FROM users u WHERE u.test_mode AND NOT EXISTS (SELECT 1 FROM (${OLD_USERS}) old WHERE old.id = u.id)
          AND u.id IN (SELECT e.user_id FROM entitlements e WHERE e.test_mode AND e.created_at < $1
                       UNION SELECT m.user_id FROM organization_members m WHERE m.organization_id IN (${OLD_ORGS})
                       UNION SELECT m.user_id FROM organization_members m JOIN entitlements e ON e.organization_id = m.organization_id
                              WHERE e.test_mode AND e.created_at < $1)`,
    [cutoff],
  );
  return staying.map((r) => r.id);
}

/**
 * The users last, before their links, sessions and identities go: the purged (whom a password
 * reset or a forgot-password request takes before their links) and those whose access flips.
 */
async function lockUsers(tx: Tx, cutoff: Date, staying: string[]): Promise<void> {
  await tx.query(`SELECT 1 FROM users WHERE id IN (${OLD_USERS}) OR id = ANY($2::text[]) ORDER BY id FOR UPDATE`, [cutoff, staying]);
}

async function deleteUserRows(tx: Tx, cutoff: Date): Promise<void> {
  for (const table of ['access_states', 'recovery_codes', 'one_time_tokens', 'identities', 'sessions', 'app_profiles', 'app_settings', 'profiles', 'settings', 'erasure_requests']) {
    await tx.query(`DELETE FROM ${table} WHERE user_id IN (${OLD_USERS})`, [cutoff]);
  }
}

/**
 * Role assignments of the purged users: each hard delete is announced as DELETE
 * /v1/users/{id}/roles/{roleId} and the erasure cascade announce theirs (role.removed), by the run
 * that deletes it (RETURNING), so an Application mirroring its Roles does not keep them for ever.
 * Returns those to announce (not the platform member Role: part of the user record, it is not
 * announced on its own; announceRoleChange).
 */
async function deleteRoleAssignments(tx: Tx, cutoff: Date): Promise<Assignment[]> {
  const { rows: assignments } = await tx.query<Assignment>(
    `DELETE FROM role_assignments WHERE user_id IN (${OLD_USERS}) RETURNING user_id, role_id, application_id`,
    [cutoff],
  );
  return assignments.filter((a) => a.role_id !== MEMBER_ROLE_ID);
}

/**
 * The purged memberships (of purged users, and every member of a purged Organization): each is
 * announced as a DELETE of the member and the erasure cascade announce theirs, routed to the
 * Applications the member reached before (read before the delete).
 */
async function readFormerPaths(tx: Tx, cutoff: Date): Promise<Map<string, string[]>> {
  const { rows: leaving } = await tx.query<{ user_id: string }>(
    `SELECT DISTINCT user_id FROM organization_members WHERE membership_status = 'active' AND (user_id IN (${OLD_USERS}) OR organization_id IN (${OLD_ORGS})) ORDER BY user_id`,
    [cutoff],
  );
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
    ({ rows: memberships } = await tx.query(
      `DELETE FROM organization_members WHERE user_id IN (${OLD_USERS}) OR organization_id IN (${OLD_ORGS})
          RETURNING organization_id, user_id, role, membership_status`,
      [cutoff],
    ));
    const { rows } = await tx.query<EntitlementRow>(
      `DELETE FROM entitlements e WHERE e.test_mode AND (e.created_at < $1 OR e.user_id IN (${OLD_USERS}) OR e.organization_id IN (${OLD_ORGS}))
          RETURNING ${ENT_COLUMNS}`,
      [cutoff],
    );
    return rows.sort((a, b) => (a.id < b.id ? -1 : 1));
  });
  return { memberships, purged };
}

/**
 * Grants that stay lose the purged users from their member_overrides (current members only), each
 * change announced as a member's removal announces it (entitlement.member_scope_changed).
 */
async function dropPurgedFromOverrides(tx: Tx, ctx: Ctx, cutoff: Date): Promise<void> {
  const { rows: scopedBefore } = await tx.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.test_mode AND e.member_overrides && ARRAY(${OLD_USERS}) ORDER BY e.id FOR UPDATE`,
    [cutoff],
  );
  const { rows: scopedAfter } = await tx.query<EntitlementRow>(
    `UPDATE entitlements e SET member_overrides = ARRAY(SELECT o FROM unnest(e.member_overrides) WITH ORDINALITY x(o, n) WHERE o NOT IN (${OLD_USERS}) ORDER BY n),
              updated_at = ${nextUpdatedAt('$2')}
        WHERE e.id = ANY($3::text[]) RETURNING ${ENT_COLUMNS}`,
    [cutoff, ctx.now, scopedBefore.map((r) => r.id)],
  );
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

/** The purged Organizations, users and what is left of them; the count of each table the job reports. */
async function deleteRemainingRows(tx: Tx, cutoff: Date): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  const run = async (name: string, sql: string) => {
    counts[name] = (await tx.query(sql, [cutoff])).rowCount;
  };
  await run('organizations', `DELETE FROM organizations WHERE id IN (${OLD_ORGS})`);
  await run('webhook_subscriptions', `DELETE FROM webhook_subscriptions WHERE test_mode AND created_at < $1`);
  // Test mails past the 30 days, and every mail of a purged user, as the erasure cascade's: one queued
  // since (a reset asked yesterday) carries a link whose token went above, to an account that goes now.
  await run('emails', `DELETE FROM emails WHERE (test_mode AND created_at < $1) OR user_id IN (${OLD_USERS})`);
  // Stored Idempotency-Key answers about the purged users (an admin's Profile write in their last
  // 24 hours), as the erasure cascade drops them: a retry runs again (404) instead of replaying them.
  await tx.query(`DELETE FROM idempotency_keys WHERE subject_user_id IN (${OLD_USERS})`, [cutoff]);
  await run('users', `DELETE FROM users WHERE id IN (${OLD_USERS})`);
  await run('audit_events', `DELETE FROM audit_events WHERE test_mode AND created_at < $1`);
  await run('outbox_events', `DELETE FROM outbox_events WHERE test_mode AND created_at < $1`);
  return counts;
}
