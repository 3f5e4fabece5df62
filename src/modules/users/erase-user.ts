import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { pathApplicationIds } from '../../outbox/emit.js';
import { announceRoleChange } from '../roles/assignments.js';
import { dropStoredAnswersAbout } from '../../http/idempotency.js';
import { memberEvent } from '../organizations/events.js';
import { ENT_COLUMNS, nextUpdatedAt, type EntitlementRow } from '../entitlements/store.js';
import { announceEntitlementDeleted, announceScopeChanges } from '../entitlements/grant.js';
import type { UserRow } from './store.js';
import { MEMBER_ROLE_ID } from './service.js';

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
  await tx.query(`UPDATE audit_events SET before = CASE WHEN before IS NULL THEN NULL ELSE $2::jsonb END, after = CASE WHEN after IS NULL THEN NULL ELSE $2::jsonb END WHERE target_user_id = $1`, [id, REDACTED]);
  await scrubUserRow(tx, ctx, id);
  await recordAudit(tx, ctx, { action: 'user.erased', target: { type: 'user', id }, targetUserId: id });
}

interface RemovedLinks {
  memberships: { organization_id: string; role: string; membership_status: string }[];
  formerPaths: string[];
  grants: EntitlementRow[];
  assignments: { role_id: string; application_id: string | null }[];
}

/** What the cascade removes and announces, read before the deletes. */
async function readRemovedLinks(tx: Tx, id: string): Promise<RemovedLinks> {
  // Memberships go with the cascade, each removal announced as a DELETE of the member would
  // (organization.member_removed; a pending one audited only), routed to the Applications they reached.
  const { rows: memberships } = await tx.query<RemovedLinks['memberships'][number]>(
    'SELECT organization_id, role, membership_status FROM organization_members WHERE user_id = $1 ORDER BY organization_id',
    [id],
  );
  const formerPaths = memberships.some((m) => m.membership_status === 'active') ? await pathApplicationIds(tx, id) : [];
  // Personal grants and Role assignments are hard-deleted too: each announced as DELETE
  // /v1/entitlements/{id} and DELETE /v1/users/{id}/roles/{roleId} announce theirs (Part B Resource
  // events: entitlement.deleted "hard-deleted", role.removed "assignment deleted"), so a receiver
  // mirroring them does not keep the erased user's grants and Roles for ever.
  const { rows: grants } = await tx.query<EntitlementRow>(`SELECT ${ENT_COLUMNS} FROM entitlements e WHERE e.user_id = $1 ORDER BY e.id`, [id]);
  // (Not the platform member Role: part of the user record, it goes with user.erased; announceRoleChange.)
  const { rows: assignments } = await tx.query<RemovedLinks['assignments'][number]>(
    'SELECT role_id, application_id FROM role_assignments WHERE user_id = $1 AND role_id <> $2 ORDER BY role_id',
    [id, MEMBER_ROLE_ID],
  );
  return { memberships, formerPaths, grants, assignments };
}

async function deleteUserData(tx: Tx, id: string): Promise<void> {
  for (const sql of [
    'DELETE FROM recovery_codes WHERE user_id = $1',
    'DELETE FROM one_time_tokens WHERE user_id = $1',
    'DELETE FROM identities WHERE user_id = $1',
    'DELETE FROM sessions WHERE user_id = $1',
    'DELETE FROM role_assignments WHERE user_id = $1',
    'DELETE FROM organization_members WHERE user_id = $1',
    'DELETE FROM org_seat_limits WHERE user_id = $1',
    'DELETE FROM app_profiles WHERE user_id = $1',
    'DELETE FROM app_settings WHERE user_id = $1',
    'DELETE FROM entitlements WHERE user_id = $1',
    'DELETE FROM access_states WHERE user_id = $1',
    'DELETE FROM profiles WHERE user_id = $1',
  ]) {
    await tx.query(sql, [id]);
  }
}

/**
 * Org grants whose member_overrides name the user lose the entry, announced as a DELETE of the
 * member would (entitlement.member_scope_changed, Part B Resource events).
 */
async function dropFromMemberOverrides(tx: Tx, ctx: Ctx, id: string): Promise<{ before: EntitlementRow; after: EntitlementRow }[]> {
  const { rows: scopedBefore } = await tx.query<EntitlementRow>(
    `SELECT ${ENT_COLUMNS} FROM entitlements e WHERE $1 = ANY(e.member_overrides) ORDER BY e.id FOR UPDATE`,
    [id],
  );
  const { rows: scopedAfter } = await tx.query<EntitlementRow>(
    `UPDATE entitlements e SET member_overrides = array_remove(member_overrides, $1), updated_at = ${nextUpdatedAt('$2')} WHERE $1 = ANY(e.member_overrides) RETURNING ${ENT_COLUMNS}`,
    [id, ctx.now],
  );
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

/**
 * The user's own mails, to every address they had; not those of another account that reused the
 * address (mails queued before user_id was recorded: by address, in the user's mode, up to deletion).
 */
async function deleteUserMails(tx: Tx, user: UserRow): Promise<void> {
  await tx.query(
    `DELETE FROM emails WHERE user_id = $1
        OR (user_id IS NULL AND lower(to_address) = lower($2) AND test_mode = $3 AND created_at <= COALESCE($4, created_at))`,
    [user.id, user.email, user.test_mode, user.deleted_at],
  );
}

/** The user row becomes a tombstone, and the erasure request its record. */
async function scrubUserRow(tx: Tx, ctx: Ctx, id: string): Promise<void> {
  await tx.query(
    `UPDATE users SET email = $2, pending_email = NULL, signup_application_id = NULL, last_login_at = NULL, erased_at = $3, updated_at = $3 WHERE id = $1`,
    [id, `erased+${id.toLowerCase()}@erased.invalid`, ctx.now],
  );
  // The request stays as the record that the erasure was done; its free-text reason, written by the
  // user or an admin about the user, goes with the rest.
  await tx.query(`UPDATE erasure_requests SET status = 'completed', completed_at = $2, reason = NULL WHERE user_id = $1`, [id, ctx.now]);
}
