import type { Queryable } from '../../db/types.js';
import { ENT_COLUMNS, nextUpdatedAt, type EntitlementRow } from '../entitlements/store.js';

// The test purge's statements (purgeTestData, purge.ts): test-mode rows older than the cutoff ($1).

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

export type Membership = { organization_id: string; user_id: string; role: string; membership_status: string };
export type Assignment = { user_id: string; role_id: string; application_id: string | null };

/**
 * Locked before the first delete, in the order of src/access/locks.ts: the Organizations whose
 * memberships or grants go (a member or grant write locks its Organization, then reads the row:
 * it waits for this run and finds the row gone, instead of deleting it a second time, announcing
 * the removal again, or holding the user this run deletes while it waits for the membership, a
 * deadlock), then the Entitlements that go or lose a purged member; the users last (lockPurgeUsers).
 */
export async function lockOrganizationsAndGrants(db: Queryable, cutoff: Date): Promise<void> {
  await db.query(
    `SELECT 1 FROM organizations WHERE id IN (${OLD_ORGS})
          OR id IN (SELECT organization_id FROM organization_members WHERE user_id IN (${OLD_USERS}))
          OR id IN (SELECT organization_id FROM entitlements WHERE test_mode AND created_at < $1)
        ORDER BY id FOR UPDATE`,
    [cutoff],
  );
  await db.query(
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
export async function findStayingUsers(db: Queryable, cutoff: Date): Promise<string[]> {
  // One set of the users those rows reach (UNION) joined to the test users, less the purged (an anti-join):
  // an OR of three EXISTS was three hashed subqueries over every test user, estimated so high
  // (600k) that PostgreSQL compiled it with JIT, 1-4 s of a 70 ms statement (docs/conventions.md, Queries at scale).
  const { rows: staying } = await db.query<{ id: string }>(
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
export async function lockPurgeUsers(db: Queryable, cutoff: Date, staying: string[]): Promise<void> {
  await db.query(`SELECT 1 FROM users WHERE id IN (${OLD_USERS}) OR id = ANY($2::text[]) ORDER BY id FOR UPDATE`, [cutoff, staying]);
}

/** The purged users' own rows (all but the user row, Role assignments and memberships). */
export async function deletePurgedUserRows(db: Queryable, cutoff: Date): Promise<void> {
  for (const table of ['access_states', 'recovery_codes', 'one_time_tokens', 'identities', 'sessions', 'app_profiles', 'app_settings', 'profiles', 'settings', 'erasure_requests']) {
    await db.query(`DELETE FROM ${table} WHERE user_id IN (${OLD_USERS})`, [cutoff]);
  }
}

/** The purged users' Role assignments, each row deleted (RETURNING). */
export async function deletePurgedRoleAssignments(db: Queryable, cutoff: Date): Promise<Assignment[]> {
  const { rows: assignments } = await db.query<Assignment>(
    `DELETE FROM role_assignments WHERE user_id IN (${OLD_USERS}) RETURNING user_id, role_id, application_id`,
    [cutoff],
  );
  return assignments;
}

/** The active members whose memberships go (of purged users, or of a purged Organization), in user order. */
export async function listLeavingMembers(db: Queryable, cutoff: Date): Promise<{ user_id: string }[]> {
  const { rows: leaving } = await db.query<{ user_id: string }>(
    `SELECT DISTINCT user_id FROM organization_members WHERE membership_status = 'active' AND (user_id IN (${OLD_USERS}) OR organization_id IN (${OLD_ORGS})) ORDER BY user_id`,
    [cutoff],
  );
  return leaving;
}

/** The memberships of purged users and of purged Organizations, each row deleted (RETURNING). */
export async function deletePurgedMemberships(db: Queryable, cutoff: Date): Promise<Membership[]> {
  const { rows } = await db.query(
    `DELETE FROM organization_members WHERE user_id IN (${OLD_USERS}) OR organization_id IN (${OLD_ORGS})
          RETURNING organization_id, user_id, role, membership_status`,
    [cutoff],
  );
  return rows as Membership[];
}

/** The old test Entitlements, those of purged users and of purged Organizations, each row deleted (RETURNING). */
export async function deletePurgedEntitlements(db: Queryable, cutoff: Date): Promise<EntitlementRow[]> {
  const { rows } = await db.query<EntitlementRow>(
    `DELETE FROM entitlements e WHERE e.test_mode AND (e.created_at < $1 OR e.user_id IN (${OLD_USERS}) OR e.organization_id IN (${OLD_ORGS}))
          RETURNING ${ENT_COLUMNS}`,
    [cutoff],
  );
  return rows;
}

/** The test grants whose member_overrides name a purged user, locked, in id order. */
export async function lockGrantsNamingPurged(db: Queryable, cutoff: Date): Promise<EntitlementRow[]> {
  const { rows: scopedBefore } = await db.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.test_mode AND e.member_overrides && ARRAY(${OLD_USERS}) ORDER BY e.id FOR UPDATE`,
    [cutoff],
  );
  return scopedBefore;
}

/** The grants `ids` without the purged users in member_overrides (order kept): the rows as they are now. */
export async function removePurgedFromOverrides(db: Queryable, cutoff: Date, now: Date, ids: string[]): Promise<EntitlementRow[]> {
  const { rows: scopedAfter } = await db.query<EntitlementRow>(
    `UPDATE entitlements e SET member_overrides = ARRAY(SELECT o FROM unnest(e.member_overrides) WITH ORDINALITY x(o, n) WHERE o NOT IN (${OLD_USERS}) ORDER BY n),
              updated_at = ${nextUpdatedAt('$2')}
        WHERE e.id = ANY($3::text[]) RETURNING ${ENT_COLUMNS}`,
    [cutoff, now, ids],
  );
  return scopedAfter;
}

/** The purged Organizations, users and what is left of them; the count of each table the job reports. */
export async function deleteRemainingRows(db: Queryable, cutoff: Date): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  const run = async (name: string, sql: string) => {
    counts[name] = (await db.query(sql, [cutoff])).rowCount;
  };
  await run('organizations', `DELETE FROM organizations WHERE id IN (${OLD_ORGS})`);
  await run('webhook_subscriptions', `DELETE FROM webhook_subscriptions WHERE test_mode AND created_at < $1`);
  // Test mails past the 30 days, and every mail of a purged user, as the erasure cascade's: one queued
  // since (a reset asked yesterday) carries a link whose token went above, to an account that goes now.
  await run('emails', `DELETE FROM emails WHERE (test_mode AND created_at < $1) OR user_id IN (${OLD_USERS})`);
  // Stored Idempotency-Key answers about the purged users (an admin's Profile write in their last
  // 24 hours), as the erasure cascade drops them: a retry runs again (404) instead of replaying them.
  await db.query(`DELETE FROM idempotency_keys WHERE subject_user_id IN (${OLD_USERS})`, [cutoff]);
  await run('users', `DELETE FROM users WHERE id IN (${OLD_USERS})`);
  await run('audit_events', `DELETE FROM audit_events WHERE test_mode AND created_at < $1`);
  await run('outbox_events', `DELETE FROM outbox_events WHERE test_mode AND created_at < $1`);
  return counts;
}
