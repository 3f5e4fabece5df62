import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { withAccessFlips, type AccessReason } from '../../access/flips.js';
import { applicationTenant, releaseSeatLimits, withoutNewSeatsIfRestricted, withSeatCap } from '../tenancy/seats.js';
import { assertIfMatch, etagOf, ifNoneMatchHolds, findLiveOrgGrant, findLivePersonal, toEntitlement, updateEntitlement, type EntitlementRow } from './store.js';
import { findOrganizationStatus, listActiveMembers, listActiveMembersAmong } from './members-store.js';
import { expireIfEnded } from './jobs.js';
import { visibleEntitlement } from './read.js';
import { assertSeatAvailable, emitEntitlementEvent } from './grant.js';
import { findApplicationRow } from '../applications/store.js';
import { ENTITLEMENT_READ_ONLY, type Entitlement, type PatchEntitlementBody } from './schemas.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import { lockEntitlementScope } from '../../access/locks.js';


type Move = { event: string; reason: AccessReason; needsReason?: boolean };

/** The status table of Part B: from → to, and the event and access reason each move carries. */
const MOVES: Record<string, Record<string, Move>> = {
  active: { disabled: { event: 'entitlement.disabled', reason: 'entitlement_disabled', needsReason: true }, revoked: { event: 'entitlement.revoked', reason: 'entitlement_revoked', needsReason: true } },
  disabled: { active: { event: 'entitlement.granted', reason: 'entitlement_enabled' }, revoked: { event: 'entitlement.revoked', reason: 'entitlement_revoked', needsReason: true } },
  expired: { active: { event: 'entitlement.granted', reason: 'entitlement_granted' }, revoked: { event: 'entitlement.revoked', reason: 'entitlement_revoked', needsReason: true } },
  revoked: {},
};

/**
 * Users whose access the row can change: its holder, or the active members of its Organization.
 * Callers lock that Organization first (src/access/locks.ts), so no member joins or leaves meanwhile.
 */
export async function affectedUsers(tx: Tx, row: EntitlementRow): Promise<string[]> {
  if (row.user_id) return [row.user_id];
  const rows = await listActiveMembers(tx, row.organization_id);
  return rows.map((r) => r.user_id);
}

/** A write's If-Match and If-None-Match against the row's current ETag: 412 precondition_failed naming it when either is false. */
export function assertPreconditions(row: EntitlementRow, ifMatch: string | undefined, ifNoneMatch: string | undefined): void {
  const etag = etagOf(row);
  assertIfMatch(ifMatch, etag);
  if (ifNoneMatch !== undefined && !ifNoneMatchHolds(ifNoneMatch, etag)) throw new ApiError('precondition_failed', { details: { etag } });
}

/** What a PATCH makes of the row: its status move, the fields it changes and their new values. */
interface EntitlementChange {
  status: string;
  move: Move | undefined;
  changed: string[];
  reworded: string | null;
  endsAt: Date | null;
  source: EntitlementRow['source'];
  orderId: string | null;
  scopeChange: boolean;
}

/** The PATCH body with member_scope and member_overrides sent as null read as an org grant's defaults: all_members, no overrides. */
type EntitlementPatch = Omit<PatchEntitlementBody, 'member_scope' | 'member_overrides'> & { member_scope?: NonNullable<PatchEntitlementBody['member_scope']>; member_overrides?: string[] };

const withScopeDefaults = ({ member_scope, member_overrides, ...rest }: PatchEntitlementBody): EntitlementPatch => ({
  ...rest,
  ...(member_scope !== undefined && { member_scope: member_scope ?? 'all_members' }),
  ...(member_overrides !== undefined && { member_overrides: member_overrides ?? [] }),
});

/** PATCH /v1/entitlements/{id}: status moves, term, trial conversion, order id, member scope. */
export async function patchEntitlement(ctx: Ctx, id: string, input: PatchEntitlementBody, ifMatch: string | undefined, ifNoneMatch?: string): Promise<{ entitlement: Entitlement; etag: string }> {
  const body = withScopeDefaults(input);
  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    const row = await admitEntitlementPatch(tx, ctx, id, body, ifMatch, ifNoneMatch);
    const change = planEntitlementChange(row, body);
    if (body.member_scope !== undefined || body.member_overrides !== undefined) await assertMemberScope(tx, row, body);
    await assertReactivation(tx, ctx, row, change);
    if (!change.move && change.changed.length === 0 && !change.scopeChange) return { entitlement: toEntitlement(row), etag: etagOf(row) };
    const updated = await writeEntitlementChange(tx, c, row, body, change);
    await recordEntitlementChange(tx, c, row, updated, change);
    return { entitlement: toEntitlement(updated), etag: etagOf(updated) };
  });
}

/** Locks and reads the row, then refuses a caller who may not make this change; returns the row, expired if its term ended. */
async function admitEntitlementPatch(tx: Tx, ctx: Ctx, id: string, body: EntitlementPatch, ifMatch: string | undefined, ifNoneMatch: string | undefined): Promise<EntitlementRow> {
  await lockEntitlementScope(tx, id);
  // Existence first: a caller who cannot see the row learns nothing from the body's faults.
  const visible = await visibleEntitlement(inTx(ctx, tx), id, true);
  const { rights, orgAdmin } = visible;
  let row = visible.row;
  assertNoReadOnlyFields(body, ENTITLEMENT_READ_ONLY);
  await assertHoldingOrgActive(tx, row);
  const full = rights.platform || rights.appKey || rights.owner;
  const limitedFields = Object.keys(body).every((k) => ['status', 'disabled_reason', 'member_scope', 'member_overrides'].includes(k));
  const orgAdminRow = orgAdmin && row.source === 'org_seat';
  // RFC 9110 §13.2.1: preconditions are ignored when the request without them would not succeed, so
  // a caller who may not make this change (the holder, a plain member, an org admin sending a field
  // beyond status and scope) is 403 whatever its If-Match, never 412 with the row's current ETag.
  if (!full && !(orgAdminRow && limitedFields)) throw new ApiError('forbidden');
  // Only a write the caller may make waits for a migration: anyone else is refused as at any time
  // (403, not 503 with a Retry-After whose retry would be refused).
  await assertAppTenantWritable(tx, row.application_id);
  assertPreconditions(row, ifMatch, ifNoneMatch);
  // A row whose ends_at passed is expired already (resolution says so before the sweep): the sweep's
  // work is done first, in this transaction, and the request moves the expired row.
  row = await expireIfEnded(tx, ctx, row);
  // Org admins only toggle between active and disabled (an expired or revoked row is not theirs to move).
  const toggle = (s: string) => s === 'active' || s === 'disabled';
  const orgAdminMove = orgAdminRow && limitedFields && (body.status === undefined || body.status === row.status || (toggle(body.status) && toggle(row.status)));
  if (!full && !orgAdminMove) throw new ApiError('forbidden');
  return row;
}

/** The change the body asks for, checked against the row alone (no query): the status move first, then the fields. */
function planEntitlementChange(row: EntitlementRow, body: EntitlementPatch): EntitlementChange {
  const { status, move } = planStatusMove(row, body);
  const fields = planFieldChanges(row, body, status, move);
  // member_scope and member_overrides sent as they already are change nothing (no event, no audit).
  const scopeChange =
    (body.member_scope !== undefined && body.member_scope !== row.member_scope) ||
    (body.member_overrides !== undefined && !sameMembers(body.member_overrides, row.member_overrides));
  return { status, move, ...fields, scopeChange };
}

function planStatusMove(row: EntitlementRow, body: EntitlementPatch): { status: string; move: Move | undefined } {
  const status = body.status ?? row.status;
  const move = status !== row.status ? MOVES[row.status]?.[status] : undefined;
  if (status !== row.status && !move) throw new ApiError('invalid_status_transition', { details: { from: row.status, to: status } });
  // Revoked is terminal: nothing on the row changes any more. Repeating the revoke (status revoked,
  // without a reason or with the row's own) is a no-op 200; another reason, or any other field, would
  // change the row and is refused rather than dropped.
  const repeatRevoke =
    body.status === 'revoked' &&
    Object.keys(body).every((k) => k === 'status' || k === 'disabled_reason') &&
    (body.disabled_reason === undefined || body.disabled_reason === row.disabled_reason);
  if (row.status === 'revoked' && Object.keys(body).length > 0 && !repeatRevoke) {
    throw new ApiError('invalid_status_transition', { details: { from: 'revoked', to: status } });
  }
  // A reason of white space only is no reason (as review_notes and a cancel's notes).
  if (move?.needsReason && !body.disabled_reason?.trim()) throw new ApiError('disabled_reason_required');
  return { status, move };
}

function planFieldChanges(row: EntitlementRow, body: EntitlementPatch, status: string, move: Move | undefined): Pick<EntitlementChange, 'changed' | 'reworded' | 'endsAt' | 'source' | 'orderId'> {
  const changed: string[] = [];
  // disabled_reason goes with a move to disabled or revoked; a disabled row that stays disabled can
  // have it reworded (entitlement.updated). A reason for a row that is not disabled is refused.
  let reworded: string | null = null;
  if (body.disabled_reason != null && !move?.needsReason && row.status !== 'revoked') {
    if (status !== 'disabled') {
      throw invalidField('disabled_reason', 'is set with status disabled or revoked, or on a disabled row');
    }
    if (!body.disabled_reason.trim()) throw new ApiError('disabled_reason_required');
    if (body.disabled_reason !== row.disabled_reason) {
      reworded = body.disabled_reason;
      changed.push('disabled_reason');
    }
  } else if (body.disabled_reason === null && status === 'disabled' && !move) {
    throw new ApiError('disabled_reason_required');
  }
  let endsAt = row.ends_at;
  if ('ends_at' in body) {
    endsAt = body.ends_at ? new Date(body.ends_at) : null;
    if (endsAt && endsAt <= row.starts_at) throw invalidField('ends_at', 'must be after starts_at');
    if (String(endsAt?.getTime()) !== String(row.ends_at?.getTime())) changed.push('ends_at');
  }
  let source = row.source;
  if (body.source !== undefined && body.source !== row.source) {
    if (!(row.source === 'trial' && body.source === 'purchase')) throw new ApiError('immutable_field', { details: { field: 'source' } });
    source = body.source;
    changed.push('source');
  }
  // A trial always ends (Part B Errors: ends_at_required, "Trial without ends_at"): ends_at goes to
  // null only together with the conversion to purchase.
  if (source === 'trial' && endsAt === null) throw new ApiError('ends_at_required');
  let orderId = row.order_id;
  if ('order_id' in body && body.order_id !== row.order_id) {
    if (row.order_id !== null) throw new ApiError('immutable_field', { details: { field: 'order_id' } });
    orderId = body.order_id ?? null;
    changed.push('order_id');
  }
  return { changed, reworded, endsAt, source, orderId };
}

/** A row returning to active: a renewal must end in the future and find no newer grant; the Application must take grants. */
async function assertReactivation(tx: Tx, ctx: Ctx, row: EntitlementRow, { status, endsAt }: EntitlementChange): Promise<void> {
  if (status === 'active' && row.status === 'expired') {
    if (endsAt && endsAt <= ctx.now) throw new ApiError('invalid_status_transition', { message: 'Renew with ends_at in the future or null.', details: { from: 'expired', to: 'active' } });
    const newer = row.user_id ? await findLivePersonal(tx, row.user_id, row.application_id) : await findLiveOrgGrant(tx, row.organization_id!, row.application_id);
    if (newer) throw new ApiError('entitlement_already_exists', { details: { existing_entitlement_id: newer.id, status: newer.status } });
  }
  if (status === 'active' && row.status !== 'active') {
    const app = (await findApplicationRow(tx, row.application_id))!;
    // Returning a row to active grants again (entitlement.granted): an Application that is not
    // approved takes no new grants (Part B review_status), 409 as the POST answers.
    if (app.review_status !== 'approved') throw new ApiError('application_not_available', { details: { review_status: app.review_status } });
    // Re-enabling or renewing a personal row gives its holder a seat again: 402 on a restricted Tenant,
    // 409 at Starter's cap, as a new grant would (org rows are capped per member below).
    if (row.user_id) await assertSeatAvailable(tx, ctx, app, [row.user_id]);
  }
}

/** The UPDATE, inside the access flips and seat checks it causes; returns the updated row. */
async function writeEntitlementChange(tx: Tx, c: Ctx, row: EntitlementRow, body: EntitlementPatch, change: EntitlementChange): Promise<EntitlementRow> {
  const { status, move, changed, reworded, endsAt, source, orderId, scopeChange } = change;
  const reason: AccessReason = move?.reason ?? (scopeChange ? 'org_grant_changed' : changed.includes('ends_at') && endsAt && endsAt <= c.now ? 'entitlement_expired' : 'entitlement_granted');
  const disabledReason = status === 'active' ? null : move?.needsReason ? body.disabled_reason! : reworded ?? row.disabled_reason;
  const users = await affectedUsers(tx, row);
  const tenantId = await applicationTenant(tx, row.application_id);
  const capped = row.organization_id && tenantId ? [tenantId] : [];
  // An org row on a restricted Tenant may not seat anyone new (scope widened, re-enabled, renewed).
  const restrictedCheck = row.organization_id ? tenantId : null;
  return withAccessFlips(tx, c, { userIds: users, applicationIds: [row.application_id] }, reason, async () => {
    const updated = await withoutNewSeatsIfRestricted(tx, restrictedCheck, users, c.now, () => withSeatCap(tx, c, capped, users, () =>
      updateEntitlement(
        tx,
        row.id,
        { status, disabledReason, endsAt, source, orderId, memberScope: body.member_scope ?? null, memberOverrides: body.member_overrides ?? null },
        c.now,
      ),
    ));
    // The seats it frees go back in the same change: a holder who takes back the seat they freed
    // (through a marked organization grant) never lost access, and no event says they did.
    if (tenantId) await releaseSeatLimits(tx, c, tenantId);
    return updated;
  });
}

/** The audit rows and events of the change: the move's, the fields' and the member scope's, in that order. */
async function recordEntitlementChange(tx: Tx, c: Ctx, row: EntitlementRow, updated: EntitlementRow, { move, changed, scopeChange }: EntitlementChange): Promise<void> {
  const audit = { target: { type: 'entitlement', id: row.id }, targetUserId: row.user_id, organizationId: row.organization_id, applicationId: row.application_id, before: toEntitlement(row), after: toEntitlement(updated) };
  if (move) {
    await recordAudit(tx, c, { action: move.event, ...audit });
    await emitEntitlementEvent(tx, c, move.event, updated);
  } else if (changed.length) {
    await recordAudit(tx, c, { action: 'entitlement.updated', ...audit });
    // The webhook fires for what Part B names (ends_at, source, order_id); a reworded disabled_reason
    // alone is audited only.
    if (changed.some((f) => UPDATED_EVENT_FIELDS.has(f))) await emitEntitlementEvent(tx, c, 'entitlement.updated', updated, { changed_fields: changed });
  }
  if (scopeChange) {
    await recordAudit(tx, c, { action: 'entitlement.member_scope_changed', ...audit });
    await emitEntitlementEvent(tx, c, 'entitlement.member_scope_changed', updated);
  }
}

const UPDATED_EVENT_FIELDS = new Set(['ends_at', 'source', 'order_id']);

/** The same set of user ids (order is not meaningful). */
function sameMembers(sent: readonly string[], stored: readonly string[] | null): boolean {
  const have = new Set(stored ?? []);
  return sent.length === have.size && sent.every((id) => have.has(id));
}

/** Entitlement writes under a suspended Organization: 403 organization_suspended. */
export async function assertHoldingOrgActive(tx: Tx, row: EntitlementRow): Promise<void> {
  if (!row.organization_id) return;
  const org = await findOrganizationStatus(tx, row.organization_id);
  if (org?.status === 'suspended') throw new ApiError('organization_suspended');
}

async function assertMemberScope(tx: Tx, row: EntitlementRow, body: EntitlementPatch): Promise<void> {
  if (row.source !== 'org_seat' || !row.organization_id) throw new ApiError('not_an_org_grant');
  if (!body.member_overrides?.length) return;
  const rows = await listActiveMembersAmong(tx, row.organization_id, body.member_overrides);
  const members = new Set(rows.map((r) => r.user_id));
  const strangers = body.member_overrides.filter((u) => !members.has(u));
  if (strangers.length) throw new ApiError('member_override_not_a_member', { details: { user_ids: strangers } });
}
