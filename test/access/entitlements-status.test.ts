// Entitlements (Part B): the status table and the other PATCH fields, with their events and audit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, type TestApp } from '../helpers/app.js';
import {
  accessEvents, assertError, assertInvalid, assertStatus, auditOf, call, createOrg, DAY, entitlementEvents, entRow, grant, HOUR, inSeconds, newApp,
  orgGrant, outbox, patchEnt, person, platformKey, sql, type AppFixture,
} from './support.js';
import { expiredRowOf } from './entitlements-support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const expiredRow = expiredRowOf(() => ({ t, admin, app }));

// ---- the status table ----------------------------------------------------------------------------

test('disabled_reason is 1–255 characters, counted in code points: 255 (emoji) are accepted on disable and revoke; 256 are 422 validation_failed naming disabled_reason and change nothing', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: E.repeat(256) }), 'disabled_reason');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  const disabled = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: E.repeat(255) }), 200);
  assert.equal(disabled.disabled_reason, E.repeat(255));
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'r'.repeat(256) }), 'disabled_reason');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled');
  const revoked = assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'r'.repeat(255) }), 200);
  assert.deepEqual([revoked.status, revoked.disabled_reason], ['revoked', 'r'.repeat(255)]);
});

test('active → disabled needs disabled_reason (422 disabled_reason_required); then entitlement.disabled, audit, access.revoked (entitlement_disabled)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled' }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: '' }), 422, 'disabled_reason_required');
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x'.repeat(256) }), 'disabled_reason');
  // White space alone is no reason, as for review_notes: on the move, and when rewording a disabled row.
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: ' \t\n ' }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: '   ' }), 422, 'disabled_reason_required');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.disabled_reason, 'chargeback');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled']);
  const audit = await auditOf(t, ent.id, 'entitlement.disabled');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.status, 'active');
  assert.equal(audit[0].after.status, 'disabled');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('disabled → active clears disabled_reason, emits entitlement.granted and access.granted (entitlement_enabled)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.disabled_reason, null);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.granted')).length, 2);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.granted', 'entitlement_enabled', 'active']);
});

test('active → revoked needs disabled_reason; revoked is terminal: entitlement.revoked, audit, access.revoked (entitlement_revoked, status revoked)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  assert.equal(body.status, 'revoked');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.revoked']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.revoked')).length, 1);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.revoked', 'entitlement_revoked', 'revoked']);
});

test('disabled → revoked needs disabled_reason and emits entitlement.revoked but no access event (access was already off)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'fraud' }), 200);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.revoked']);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('expired → active only with ends_at in the future or null (409 invalid_status_transition otherwise); renewal grants access again', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition');
  assertError(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, -10) }), 409, 'invalid_status_transition');
  // "In the future": an ends_at equal to now is not.
  await atOneInstant(t, async () => assertError(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, 0) }), 409, 'invalid_status_transition'));
  assert.equal((await entRow(t, ent.id))!.status, 'expired');
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: ends }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.ends_at, ends);
  assert.equal((await accessEvents(t, user.id, app.id)).at(-1)![0], 'access.granted');
  assert.equal((await entitlementEvents(t, ent.id)).at(-1), 'entitlement.granted');

  const other = await person(t);
  const second = await expiredRow(other.id);
  // A trial always ends: renewing it without an end is 422 ends_at_required, unless it becomes a purchase.
  assertError(await patchEnt(t, admin, second.id, { status: 'active', ends_at: null }), 422, 'ends_at_required');
  assert.equal((await entRow(t, second.id))!.status, 'expired');
  const renewed = assertStatus(await patchEnt(t, admin, second.id, { status: 'active', ends_at: null, source: 'purchase' }), 200);
  assert.equal(renewed.ends_at, null);
  assert.equal(renewed.status, 'active');
  assert.equal(renewed.source, 'purchase');
});

test('ends_at_required ("Trial without ends_at") also holds on PATCH: a trial\'s ends_at set to null is 422 and changes nothing; converting to purchase in the same PATCH may drop it', async () => {
  const user = await person(t);
  const ends = inSeconds(t, 7 * DAY);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: ends });
  assertError(await patchEnt(t, admin, trial.id, { ends_at: null }), 422, 'ends_at_required');
  const row = assertStatus(await call(t, 'GET', `/v1/entitlements/${trial.id}`, admin), 200);
  assert.deepEqual([row.source, row.ends_at, row.status], ['trial', ends, 'active']);
  assert.deepEqual(await entitlementEvents(t, trial.id), ['entitlement.granted'], 'the refused PATCH wrote no event');
  const converted = assertStatus(await patchEnt(t, admin, trial.id, { source: 'purchase', ends_at: null }), 200);
  assert.deepEqual([converted.source, converted.ends_at], ['purchase', null]);
});

test('a disabled row whose ends_at passed is expired before the sweep: PATCH status active is the expired → active move (409 without a future ends_at; with one, renewed after entitlement.expired)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { ends_at: inSeconds(t, HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Paused' }), 200);
  t.clock.advance(HOUR + 5);
  assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled', 'a refused PATCH changes nothing; the sweep expires the row');
  const renewed = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, DAY) }), 200);
  assert.equal(renewed.status, 'active');
  assert.deepEqual((await entitlementEvents(t, ent.id)).slice(-2), ['entitlement.expired', 'entitlement.granted']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.expired')).length, 1);
});

test('expired → active is 409 entitlement_already_exists when a newer live row exists', async () => {
  const user = await person(t);
  const old = await expiredRow(user.id);
  const newer = await grant(t, admin, user.id, app.id);
  const err = assertError(await patchEnt(t, admin, old.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, newer.id);
  assert.equal((await entRow(t, old.id))!.status, 'expired');
});

test('expired → active of an org-wide grant is 409 entitlement_already_exists with details.existing_entitlement_id when a newer live org grant exists, active or disabled ("an existing active or disabled one"); the old row stays expired', async () => {
  for (const status of ['active', 'disabled'] as const) {
    const member = await person(t);
    const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
    const target = await newApp(t, admin);
    const old = await orgGrant(t, org, target.id, { status: 'expired' });
    const live = await orgGrant(t, org, target.id);
    if (status === 'disabled') assertStatus(await patchEnt(t, admin, live, { status: 'disabled', disabled_reason: 'paused' }), 200);
    const err = assertError(await patchEnt(t, admin, old, { status: 'active', ends_at: null }), 409, 'entitlement_already_exists');
    assert.deepEqual(err.details, { existing_entitlement_id: live, status });
    assert.equal((await entRow(t, old))!.status, 'expired');
    assert.deepEqual(await entitlementEvents(t, old), []);
  }
});

test('expired → active (renewal) grants access again with access.granted reason entitlement_granted (docs/decisions.md), not entitlement_enabled, which names disabled → active', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 200);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.granted', 'entitlement_granted', 'active']);
});

test('disabled → active and expired → active of a personal row on a restricted Tenant give 402 subscription_required (a new seat) and change nothing', async () => {
  const target = await newApp(t, admin);
  const disabledHolder = await person(t);
  const disabled = await grant(t, admin, disabledHolder.id, target.id);
  assertStatus(await patchEnt(t, admin, disabled.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const expiredHolder = await person(t);
  const expired = await expiredRow(expiredHolder.id, target.id);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [target.tenant_id]);
  try {
    assertError(await patchEnt(t, admin, disabled.id, { status: 'active' }), 402, 'subscription_required');
    assertError(await patchEnt(t, admin, expired.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 402, 'subscription_required');
    assert.equal((await entRow(t, disabled.id))!.status, 'disabled');
    assert.equal((await entRow(t, expired.id))!.status, 'expired');
    assert.deepEqual(await entitlementEvents(t, disabled.id), ['entitlement.granted', 'entitlement.disabled']);
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [target.tenant_id]);
  }
  assert.equal(assertStatus(await patchEnt(t, admin, disabled.id, { status: 'active' }), 200).status, 'active');
});

test('expired → revoked needs disabled_reason and emits entitlement.revoked', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'closed' }), 200).status, 'revoked');
  assert.equal((await entitlementEvents(t, ent.id)).at(-1), 'entitlement.revoked');
});

test('revoked → anything is 409 invalid_status_transition (grant a new Entitlement instead)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  for (const body of [
    { status: 'active' }, { status: 'disabled', disabled_reason: 'x' }, { status: 'expired' }, { ends_at: inSeconds(t, DAY) }, { order_id: 'late' },
    // Naming the row's own status does not open it: nothing else may change either.
    { status: 'revoked', ends_at: inSeconds(t, DAY) }, { status: 'revoked', order_id: 'late' }, { disabled_reason: 'other' },
    // Another reason would reword a terminal row: refused, not silently dropped.
    { status: 'revoked', disabled_reason: 'again' },
  ]) {
    assertError(await patchEnt(t, admin, ent.id, body), 409, 'invalid_status_transition');
  }
  const row = (await entRow(t, ent.id))!;
  assert.equal(row.status, 'revoked');
  assert.equal(row.order_id, null);
  assert.equal(row.ends_at, null);
  // Repeating the revoke, without a reason or with the same one, is a no-op: 200, no event.
  for (const body of [{ status: 'revoked' }, { status: 'revoked', disabled_reason: 'refund' }]) {
    assert.equal(assertStatus(await patchEnt(t, admin, ent.id, body), 200).disabled_reason, 'refund');
  }
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'refund');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.revoked']);
});

test('invalid_status_transition on a revoked row names from and to, whether or not the PATCH sends a status', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'active' });
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, DAY) }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'revoked' });
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'again' }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'revoked' });
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
});

test('→ expired by PATCH is 409 invalid_status_transition (only the system expires rows); so is expired → disabled', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'expired' }), 409, 'invalid_status_transition');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assertError(await patchEnt(t, admin, ent.id, { status: 'expired' }), 409, 'invalid_status_transition');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled');
  const other = await person(t);
  const expired = await expiredRow(other.id);
  assertError(await patchEnt(t, admin, expired.id, { status: 'disabled', disabled_reason: 'x' }), 409, 'invalid_status_transition');
});

// ---- other PATCH fields --------------------------------------------------------------------------

test('disabled_reason: a disabled row can have it reworded (audit entitlement.updated, changed_fields disabled_reason; no webhook: entitlement.updated fires when "ends_at, source or order_id changed"); on a row that is not disabled it is refused (422) and nothing changes', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const err = assertError(await patchEnt(t, admin, ent.id, { disabled_reason: 'why' }), 422, 'validation_failed');
  assert.deepEqual(err.details.fields.map((f: any) => f.path), ['disabled_reason']);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'first' }), 200);
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'reworded' }), 200).disabled_reason, 'reworded');
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: '  ' }), 422, 'disabled_reason_required');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'again' }), 200).disabled_reason, 'again');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'again' }), 200).status, 'disabled', 'the same reason is a no-op');
  assert.deepEqual(await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] }), []);
  const audited = await auditOf(t, ent.id, 'entitlement.updated');
  assert.equal(audited.length, 2);
  // With a field Part B names, the webhook carries every changed field.
  const ends = inSeconds(t, 30 * DAY);
  assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'third', ends_at: ends }), 200);
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.deepEqual(events.map((e) => [...e.data.changed_fields].sort()), [['disabled_reason', 'ends_at']]);
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: null }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: '' }), 422, 'disabled_reason_required');
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'third');
  assert.equal((await accessEvents(t, user.id, app.id)).length, 2, 'granted, then revoked by the disable; rewording flips nothing');
});

test('ends_at is changeable on an active row: entitlement.updated with changed_fields, audit entitlement.updated, no access event', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const ends = inSeconds(t, 90 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: ends }), 200);
  assert.equal(body.ends_at, ends);
  assert.equal(body.status, 'active');
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].data.changed_fields, ['ends_at']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 1, 'only the grant');
  assertInvalid(await patchEnt(t, admin, ent.id, { ends_at: new Date(Date.parse(ent.starts_at) - 1000).toISOString() }), 'ends_at');
  // ends_at must stay strictly after starts_at: equal to it is refused as well.
  assertInvalid(await patchEnt(t, admin, ent.id, { ends_at: ent.starts_at }), 'ends_at');
  assert.equal((await entRow(t, ent.id))!.ends_at.toISOString(), ends);
});

test('"entitlement.updated | ends_at, source or order_id changed without status change": a move to disabled that also sets ends_at writes the target status event alone (entitlement.disabled, its audit row) and keeps the new ends_at', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'on hold', ends_at: ends }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.ends_at, ends);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled']);
  assert.deepEqual((await auditOf(t, ent.id)).map((a) => a.action), ['entitlement.granted', 'entitlement.disabled']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.disabled'))[0].after.ends_at, ends);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('source: only trial → purchase (trial conversion with order_id and ends_at null); other changes are 422 immutable_field', async () => {
  const user = await person(t);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 7 * DAY) });
  assertError(await patchEnt(t, admin, trial.id, { source: 'admin_grant' }), 422, 'immutable_field');
  const body = assertStatus(await patchEnt(t, admin, trial.id, { source: 'purchase', order_id: 'ord_77', ends_at: null }), 200);
  assert.equal(body.source, 'purchase');
  assert.equal(body.order_id, 'ord_77');
  assert.equal(body.ends_at, null);
  const [event] = await outbox(t, { entitlementId: trial.id, types: ['entitlement.updated'] });
  assert.deepEqual([...event.data.changed_fields].sort(), ['ends_at', 'order_id', 'source']);
  assertError(await patchEnt(t, admin, trial.id, { source: 'trial' }), 422, 'immutable_field');

  const other = await person(t);
  const purchase = await grant(t, admin, other.id, app.id, { source: 'admin_grant' });
  assertError(await patchEnt(t, admin, purchase.id, { source: 'purchase' }), 422, 'immutable_field');
  assertError(await patchEnt(t, admin, purchase.id, { source: 'trial' }), 422, 'immutable_field');
  assert.equal((await entRow(t, purchase.id))!.source, 'admin_grant');
});

test('order_id is settable while null (entitlement.updated, changed_fields order_id, webhook and audit); changing a set order_id is 422 immutable_field', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { order_id: 'ord_1' }), 200).order_id, 'ord_1');
  // "entitlement.updated | ends_at, source or order_id changed without status change": order_id alone fires it.
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.deepEqual(events.map((e) => e.data.changed_fields), [['order_id']]);
  assert.equal(events[0]!.data.entitlement.order_id, 'ord_1');
  const audit = await auditOf(t, ent.id, 'entitlement.updated');
  assert.deepEqual(audit.map((a) => [a.before.order_id, a.after.order_id]), [[null, 'ord_1']]);
  assertError(await patchEnt(t, admin, ent.id, { order_id: 'ord_2' }), 422, 'immutable_field');
  assertError(await patchEnt(t, admin, ent.id, { order_id: null }), 422, 'immutable_field');
  assert.equal((await entRow(t, ent.id))!.order_id, 'ord_1');
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] })).length, 1);
});

test('source trial → purchase alone (ends_at kept) is an entitlement.updated change: webhook with changed_fields source, and its audit row', async () => {
  const user = await person(t);
  const ends = inSeconds(t, 7 * DAY);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: ends });
  const body = assertStatus(await patchEnt(t, admin, trial.id, { source: 'purchase' }), 200);
  assert.deepEqual([body.source, body.ends_at], ['purchase', ends]);
  const events = await outbox(t, { entitlementId: trial.id, types: ['entitlement.updated'] });
  assert.deepEqual(events.map((e) => e.data.changed_fields), [['source']]);
  const audit = await auditOf(t, trial.id, 'entitlement.updated');
  assert.deepEqual(audit.map((a) => [a.before.source, a.after.source]), [['trial', 'purchase']]);
});

test('starts_at, user_id, organization_id and application_id are read-only (422 read_only_field)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const other = await newApp(t, admin);
  for (const body of [{ starts_at: inSeconds(t, HOUR) }, { user_id: (await person(t)).id }, { application_id: other.id }, { organization_id: 'org_x' }]) {
    assertError(await patchEnt(t, admin, ent.id, body), 422, 'read_only_field');
  }
  const row = (await entRow(t, ent.id))!;
  assert.equal(row.user_id, user.id);
  assert.equal(row.application_id, app.id);
});

test('member_scope or member_overrides on a personal row is 422 not_an_org_grant', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { member_scope: 'allowlist' }), 422, 'not_an_org_grant');
  assertError(await patchEnt(t, admin, ent.id, { member_overrides: [user.id] }), 422, 'not_an_org_grant');
});

test('org grant: member_scope change emits entitlement.member_scope_changed and access flips for the members it excludes', async () => {
  const a = await person(t);
  const b = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  const stranger = await person(t);
  assertError(await patchEnt(t, admin, id, { member_scope: 'allowlist', member_overrides: [stranger.id] }), 422, 'member_override_not_a_member');
  const body = assertStatus(await patchEnt(t, admin, id, { member_scope: 'allowlist', member_overrides: [a.id] }), 200);
  assert.equal(body.member_scope, 'allowlist');
  assert.deepEqual(body.member_overrides, [a.id]);
  const events = await outbox(t, { entitlementId: id });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
  assert.deepEqual(await accessEvents(t, b.id, target.id), [['access.revoked', 'org_grant_changed', 'none']]);
  assert.deepEqual(await accessEvents(t, a.id, target.id), []);
  // Members of the holding Organization may fetch the row; others may not.
  assertStatus(await call(t, 'GET', `/v1/entitlements/${id}`, b.token), 200);
  assertError(await call(t, 'GET', `/v1/entitlements/${id}`, stranger.token), 404, 'entitlement_not_found');
});

test('org grant: member_overrides shortened to a subset of the stored list is a change ("member_scope or member_overrides changed"): 200 with the new list, entitlement.member_scope_changed and its audit row, access.revoked for the member it drops', async () => {
  const a = await person(t);
  const b = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id, { memberScope: 'allowlist', overrides: [a.id, b.id] });
  const body = assertStatus(await patchEnt(t, admin, id, { member_overrides: [a.id] }), 200);
  assert.deepEqual(body.member_overrides, [a.id]);
  assert.deepEqual((await entRow(t, id))!.member_overrides, [a.id]);
  assert.deepEqual(await entitlementEvents(t, id), ['entitlement.member_scope_changed']);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
  assert.deepEqual(await accessEvents(t, b.id, target.id), [['access.revoked', 'org_grant_changed', 'none']]);
  assert.deepEqual(await accessEvents(t, a.id, target.id), []);
});

test('org grant: member_scope and member_overrides sent as they are is no change ("member_scope or member_overrides changed"): 200, no entitlement.member_scope_changed, no audit row', async () => {
  const a = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  const before = assertStatus(await call(t, 'GET', `/v1/entitlements/${id}`, admin), 200);
  assert.equal(before.member_scope, 'all_members');
  assert.deepEqual(assertStatus(await patchEnt(t, admin, id, { member_scope: 'all_members' }), 200), before);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [a.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [a.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { member_overrides: [a.id] }), 200);
  assert.deepEqual((await outbox(t, { entitlementId: id })).map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
});

test('"member_overrides | array of user ids or null", "member_scope | enum or null": on an org grant a PATCH sending null clears them to their defaults (no overrides, all_members): 200, entitlement.member_scope_changed with its audit row, access.granted for the member the denylist left out; on a personal row null is still 422 not_an_org_grant', async () => {
  const a = await person(t);
  const b = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id, { memberScope: 'denylist', overrides: [b.id] });
  const body = assertStatus(await patchEnt(t, admin, id, { member_scope: null, member_overrides: null }), 200);
  assert.deepEqual([body.member_scope, body.member_overrides], ['all_members', []]);
  assert.deepEqual([(await entRow(t, id))!.member_scope, (await entRow(t, id))!.member_overrides], ['all_members', []]);
  assert.deepEqual(await entitlementEvents(t, id), ['entitlement.member_scope_changed']);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
  assert.deepEqual(await accessEvents(t, b.id, target.id), [['access.granted', 'org_grant_changed', 'active']]);
  // Null again is the defaults as they are: no change.
  assert.deepEqual(assertStatus(await patchEnt(t, admin, id, { member_overrides: null }), 200), body);
  assert.deepEqual(await entitlementEvents(t, id), ['entitlement.member_scope_changed']);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { member_overrides: null }), 422, 'not_an_org_grant');
  assertError(await patchEnt(t, admin, ent.id, { member_scope: null }), 422, 'not_an_org_grant');
});

test('org grant: removing a member listed in member_overrides ("their id is removed from member_overrides") is a member_overrides change: entitlement.member_scope_changed and its audit row, with the new list; a grant not naming them gets none', async () => {
  const a = await person(t);
  const listed = await person(t);
  const unlisted = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: listed.id }, { userId: unlisted.id }]);
  const [x, y] = [await newApp(t, admin), await newApp(t, admin)];
  const naming = await orgGrant(t, org, x.id, { memberScope: 'allowlist', overrides: [a.id, listed.id] });
  const other = await orgGrant(t, org, y.id, { memberScope: 'denylist', overrides: [unlisted.id] });
  const before = assertStatus(await call(t, 'GET', `/v1/entitlements/${naming}`, admin), 200);

  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org}/members/${listed.id}`, admin)).statusCode, 204);
  const after = assertStatus(await call(t, 'GET', `/v1/entitlements/${naming}`, admin), 200);
  assert.deepEqual(after.member_overrides, [a.id]);
  assert.equal(after.member_scope, 'allowlist');
  const events = await outbox(t, { entitlementId: naming });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.deepEqual(events[0].data.entitlement, after);
  assert.equal(events[0].application_id, x.id);
  const audit = await auditOf(t, naming, 'entitlement.member_scope_changed');
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].before.member_overrides, before.member_overrides);
  assert.deepEqual(audit[0].after.member_overrides, [a.id]);
  assert.equal(audit[0].application_id, x.id);
  assert.equal(audit[0].target_user_id, null);
  assert.deepEqual((await outbox(t, { entitlementId: other })).map((e) => e.type), []);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/entitlements/${other}`, admin), 200).member_overrides, [unlisted.id]);
});

test('PATCH of an entitlement the caller cannot see is 404 entitlement_not_found, also with read-only fields in the body', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const stranger = await person(t);
  assertError(await patchEnt(t, stranger.token, ent.id, { starts_at: inSeconds(t, DAY) }), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, admin, 'ent_01JAAAAAAAAAAAAAAAAAAAAAAA', { starts_at: inSeconds(t, DAY) }), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, admin, ent.id, { starts_at: inSeconds(t, DAY) }), 422, 'read_only_field');
});

// ---- the status table and PATCH fields: further cases --------------------------------------------

test('a move not in the status table is 409 invalid_status_transition also without disabled_reason (expired → disabled), not 422 disabled_reason_required; nothing changes', async () => {
  const user = await person(t);
  const expired = await expiredRow(user.id);
  const error = assertError(await patchEnt(t, admin, expired.id, { status: 'disabled' }), 409, 'invalid_status_transition');
  assert.deepEqual(error.details, { from: 'expired', to: 'disabled' });
  assert.equal((await entRow(t, expired.id))!.status, 'expired');
  assert.deepEqual(await entitlementEvents(t, expired.id), ['entitlement.granted', 'entitlement.expired']);
});

test('source of an org grant (org_seat) cannot change: 422 immutable_field, the row stays org_seat', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const other = await newApp(t, admin);
  const rowId = await orgGrant(t, org, other.id);
  for (const source of ['purchase', 'admin_grant', 'trial']) {
    const error = assertError(await patchEnt(t, admin, rowId, { source }), 422, 'immutable_field');
    assert.equal(error.details.field, 'source');
  }
  assert.equal((await entRow(t, rowId))!.source, 'org_seat');
  assert.deepEqual(await entitlementEvents(t, rowId), []);
});

test('expired → active blocked by a newer live row: details.existing_entitlement_id and details.status name that row (disabled too)', async () => {
  const user = await person(t);
  const old = await expiredRow(user.id);
  const newer = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, newer.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const err = assertError(await patchEnt(t, admin, old.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 409, 'entitlement_already_exists');
  assert.deepEqual(err.details, { existing_entitlement_id: newer.id, status: 'disabled' });
  assert.equal((await entRow(t, old.id))!.status, 'expired');
});

test('"disabled_reason cleared" only on disabled → active: an ends_at change on a disabled row (entitlement.updated) keeps its disabled_reason, in the answer, the row, the webhook and the audit row\'s after', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'on hold' }), 200);
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: ends }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.ends_at, ends);
  assert.equal(body.disabled_reason, 'on hold');
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'on hold');
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].data.changed_fields, ['ends_at']);
  assert.equal(events[0].data.entitlement.disabled_reason, 'on hold');
  const audit = await auditOf(t, ent.id, 'entitlement.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.disabled_reason, 'on hold');
  assert.equal(audit[0].after.disabled_reason, 'on hold');
});

test('"entitlement.updated | ends_at, source or order_id changed": a PATCH sending ends_at, source and order_id as they already are changes nothing: 200 with the row, no entitlement.updated webhook, no audit row, the same ETag', async () => {
  const user = await person(t);
  const ends = inSeconds(t, 30 * DAY);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', order_id: 'ord_same', ends_at: ends });
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag;
  const res = await patchEnt(t, admin, ent.id, { ends_at: ends, source: 'purchase', order_id: 'ord_same' });
  assert.deepEqual(assertStatus(res, 200), ent);
  assert.equal(res.headers.etag, etag);
  assert.deepEqual(await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] }), []);
  assert.deepEqual(await auditOf(t, ent.id, 'entitlement.updated'), []);
});
