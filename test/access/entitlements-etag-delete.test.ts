// Entitlements (Part B): ETag / If-Match and Idempotency-Key on PATCH and DELETE, DELETE, and the
// audit rows of a DELETE.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';
import {
  accessEvents, appKey, assertError, assertStatus, auditOf, call, createOrg, DAY, entitlementEvents, entRow, grant, inSeconds, newApp, orgGrant,
  outbox, patchEnt, person, platformKey, sql, type AppFixture,
} from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

// ---- ETag / If-Match -----------------------------------------------------------------------------

test('GET and PATCH return an ETag; PATCH with a stale If-Match is 412 precondition_failed and changes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const got = await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin);
  assertStatus(got, 200);
  const etag = got.headers.etag as string;
  assert.ok(etag, 'GET carries an ETag');
  t.clock.advance(1);
  const first = await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, 10 * DAY) }, { 'if-match': etag });
  assertStatus(first, 200);
  const newTag = first.headers.etag as string;
  assert.ok(newTag, 'newTag');
  assert.notEqual(newTag, etag);
  // A second operator still holding the old ETag.
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': etag }), 412, 'precondition_failed');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag, newTag);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': newTag }), 200);
});

test('If-Match is a list (RFC 9110 §13.1.1): a list or two If-Match headers naming the current ETag among others are honoured; a list of stale tags or a weak W/ tag is 412 precondition_failed and changes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const endsIn = (days: number) => ({ ends_at: inSeconds(t, days * DAY) });
  assertError(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-match': '"stale-1", "stale-2"' }), 412, 'precondition_failed');
  assertError(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-match': `W/${etag}` }), 412, 'precondition_failed');
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
  const listed = await patchEnt(t, admin, ent.id, endsIn(10), { 'if-match': `"stale", ${etag}` });
  assertStatus(listed, 200);
  const twice = await t.app.inject({
    method: 'PATCH', url: `/v1/entitlements/${ent.id}`, payload: endsIn(20),
    // Sent as two header lines (the inject types take one string per name).
    headers: { authorization: `Bearer ${admin}`, 'if-match': ['"stale"', listed.headers.etag as string] } as unknown as Record<string, string>,
  });
  assertStatus(twice, 200);
  assert.equal(new Date((await entRow(t, ent.id))!.ends_at).toISOString(), twice.json().ends_at);
  assert.notEqual(twice.json().ends_at, listed.json().ends_at);
});

test('RFC 9110 §13.1.2 If-None-Match "An origin server MUST NOT perform the requested method if the condition evaluates to false": a GET naming the current ETag (as sent, as W/, in a list, or `*`) is 304 with the ETag and no body, a stale tag 200; a PATCH naming the current ETag or `*` is 412 precondition_failed and changes nothing, a stale tag lets it go on', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const get = (ifNoneMatch: string) => t.app.inject({ method: 'GET', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, 'if-none-match': ifNoneMatch } });
  for (const tag of [etag, `W/${etag}`, `"stale", ${etag}`, '*']) {
    const res = await get(tag);
    assert.equal(res.statusCode, 304, `${tag}: ${res.body}`);
    assert.equal(res.body, '', tag);
    assert.equal(res.headers['content-length'], undefined, tag);
    assert.equal(res.headers.etag, etag, tag);
    assert.equal(res.headers['cache-control'], 'no-store');
  }
  const stale = await get('"stale"');
  assert.equal(stale.statusCode, 200);
  assert.equal(stale.json().id, ent.id);

  const endsIn = (days: number) => ({ ends_at: inSeconds(t, days * DAY) });
  for (const tag of [etag, `W/${etag}`, '*']) {
    const res = await patchEnt(t, admin, ent.id, endsIn(5), { 'if-none-match': tag });
    assertError(res, 412, 'precondition_failed');
    assert.equal(res.json().error.details.etag, etag);
  }
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 0, 'nothing written');
  assertStatus(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-none-match': '"stale"' }), 200);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1);
});

test('RFC 9110 §13.2.2 "When If-Match is present … if false, respond 412 (Precondition Failed)", on a GET too: a GET under an If-Match naming no current ETag (a stale tag, a weak W/ tag of the current one) is 412 precondition_failed (details.etag) without the row; the current tag, in a list or `*`, is 200 with it', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const get = (ifMatch: string) => t.app.inject({ method: 'GET', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, 'if-match': ifMatch } });
  for (const tag of ['"stale"', `W/${etag}`]) {
    const error = assertError(await get(tag), 412, 'precondition_failed');
    assert.equal(error.details.etag, etag, tag);
  }
  for (const tag of [etag, `"stale", ${etag}`, '*']) {
    const res = await get(tag);
    assert.equal(assertStatus(res, 200).id, ent.id, tag);
    assert.equal(res.headers.etag, etag, tag);
  }
});

test('"A retry with the same key returns the original result": a PATCH replayed under its Idempotency-Key carries the ETag it first answered, so the client\'s next If-Match still holds', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = { 'idempotency-key': `etag-${ent.id}` };
  const first = await patchEnt(t, admin, ent.id, body, key);
  assertStatus(first, 200);
  const etag = first.headers.etag as string;
  assert.ok(etag, 'the PATCH carries an ETag');
  const again = await patchEnt(t, admin, ent.id, body, key);
  assert.equal(again.statusCode, 200);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(again.body, first.body);
  assert.equal(again.headers.etag, etag, 'the replay carries the original ETag');
  assert.equal((await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag, etag);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1, 'one write');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': again.headers.etag as string }), 200);
});

test('Idempotency-Key: "A retry with the same key returns the original result", and a PATCH under other preconditions is another request: after a 412 precondition_failed, the fresh If-Match sent under the same key is 422 idempotency_key_reused, never the old 412 replayed', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const stale = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  assertStatus(await patchEnt(t, admin, ent.id, { order_id: 'ord-first' }), 200);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = `pre-${ent.id}`;
  const refused = await patchEnt(t, admin, ent.id, body, { 'if-match': stale, 'idempotency-key': key });
  const current = assertError(refused, 412, 'precondition_failed').details.etag as string;
  assert.notEqual(current, stale);
  // The very same request again is the original result.
  const replayed = await patchEnt(t, admin, ent.id, body, { 'if-match': stale, 'idempotency-key': key });
  assert.equal(replayed.statusCode, 412);
  assert.equal(replayed.headers['idempotent-replayed'], 'true');
  assert.equal(replayed.body, refused.body);
  // The client read the current ETag and sent it under the same key: another request, not a retry.
  for (const headers of [{ 'if-match': current }, { 'if-none-match': stale }, {}] as Record<string, string>[]) {
    const other = await patchEnt(t, admin, ent.id, body, { ...headers, 'idempotency-key': key });
    assertError(other, 422, 'idempotency_key_reused');
    assert.equal(other.headers['idempotent-replayed'], undefined);
  }
  assert.equal((await entRow(t, ent.id))!.ends_at, null, 'nothing written');
  // Under a key of its own the fresh precondition holds and the change is made once.
  const fresh = await patchEnt(t, admin, ent.id, body, { 'if-match': current, 'idempotency-key': `${key}-2` });
  assertStatus(fresh, 200);
  const again = await patchEnt(t, admin, ent.id, body, { 'if-match': current, 'idempotency-key': `${key}-2` });
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(again.body, fresh.body);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 2, 'the order_id write and this one');
});

test('Idempotency-Key: "the same key with a different request gets 422 idempotency_key_reused" (docs/conventions.md: the preconditions If-Match and If-None-Match it is sent under): a PATCH sent under If-None-Match and then under the same key without it, or with another tag, is 422, never the first 200 replayed', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = `inm-${ent.id}`;
  // A tag that is not the current one: the PATCH goes on and changes the row.
  const first = await patchEnt(t, admin, ent.id, body, { 'if-none-match': '"not-the-current-tag"', 'idempotency-key': key });
  assertStatus(first, 200);
  const replayed = await patchEnt(t, admin, ent.id, body, { 'if-none-match': '"not-the-current-tag"', 'idempotency-key': key });
  assert.equal(replayed.statusCode, 200);
  assert.equal(replayed.headers['idempotent-replayed'], 'true');
  assert.equal(replayed.body, first.body);
  for (const headers of [{}, { 'if-none-match': '"another-tag"' }] as Record<string, string>[]) {
    const other = await patchEnt(t, admin, ent.id, body, { ...headers, 'idempotency-key': key });
    assertError(other, 422, 'idempotency_key_reused');
    assert.equal(other.headers['idempotent-replayed'], undefined);
  }
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1, 'one write');
});

test('RFC 9110 §13.2.1 "A server MUST ignore all received preconditions if its response to the same request without those conditions … would have been a status code other than a 2xx": a caller who may see the row but not change it (the holder, a plain member, an org admin sending ends_at) gets 403 forbidden with a stale If-Match too, never 412 with the current ETag; nothing changes', async () => {
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const orgAdmin = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id }]);
  const orgRow = await orgGrant(t, org, (await newApp(t, admin)).id);
  const cases: [string, string, Record<string, unknown>][] = [
    [holder.token, ent.id, { status: 'disabled', disabled_reason: 'mine' }],
    [member.token, orgRow, { status: 'disabled', disabled_reason: 'ours' }],
    [orgAdmin.token, orgRow, { ends_at: inSeconds(t, DAY) }],
  ];
  for (const [token, id, body] of cases) {
    for (const headers of [{}, { 'if-match': '"stale"' }, { 'if-none-match': '*' }] as Record<string, string>[]) {
      const res = await patchEnt(t, token, id, body, headers);
      assertError(res, 403, 'forbidden');
      assert.equal(res.json().error.details.etag, undefined);
    }
  }
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await entRow(t, orgRow))!.status, 'active');
  assert.equal((await entRow(t, orgRow))!.ends_at, null);
});

test('the ETag changes with every write, even two writes within one millisecond: the older If-Match is 412 precondition_failed', async () => {
  const user = await person(t);
  await atOneInstant(t, async () => {
    const ent = await grant(t, admin, user.id, app.id);
    const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
    const first = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, 10 * DAY) }, { 'if-match': etag }), 200);
    // Within one millisecond the second write is dated 1 ms after the first (Part B delivery semantics 4: receivers drop older updated_at).
    assert.equal(Date.parse(first.updated_at) - Date.parse(ent.updated_at), 1);
    assertError(await patchEnt(t, admin, ent.id, { order_id: 'ord-late' }, { 'if-match': etag }), 412, 'precondition_failed');
    assert.equal((await entRow(t, ent.id))!.order_id, null);
  });
});

// ---- DELETE --------------------------------------------------------------------------------------

test('DELETE hard-removes a fresh grant made in error: 204, entitlement.deleted, access.revoked (entitlement_deleted)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  assert.equal(await entRow(t, ent.id), undefined);
  const deleted = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.equal(deleted.length, 1);
  assert.equal(deleted[0].data.entitlement.id, ent.id);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.revoked', 'entitlement_deleted', 'none']);
  assertError(await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin), 404, 'entitlement_not_found');
});

test('RFC 9110 §13.1.1 "An origin server MUST NOT perform the requested method if a received If-Match condition evaluates to false" (§13.1.2 likewise for If-None-Match): a DELETE under a stale If-Match, a weak W/ tag of the current one, or an If-None-Match naming the current ETag or `*` is 412 precondition_failed (details.etag) and removes nothing; the current ETag, alone or in a list, lets it go on (204)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const del = (headers: Record<string, string>) =>
    t.app.inject({ method: 'DELETE', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, ...headers } });
  for (const headers of [{ 'if-match': '"stale"' }, { 'if-match': `W/${etag}` }, { 'if-none-match': etag }, { 'if-none-match': '*' }] as Record<string, string>[]) {
    const error = assertError(await del(headers), 412, 'precondition_failed');
    assert.equal(error.details.etag, etag, JSON.stringify(headers));
  }
  assert.equal((await entRow(t, ent.id))!.status, 'active', 'nothing removed');
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 0);
  assert.equal((await auditOf(t, ent.id, 'entitlement.deleted')).length, 0);
  assert.equal((await del({ 'if-match': `"stale", ${etag}`, 'if-none-match': '"stale"' })).statusCode, 204);
  assert.equal(await entRow(t, ent.id), undefined);
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 1);
});

test('"entitlement.expired | ends_at passed": DELETE of a row whose ends_at passed before the sweep expires it first (entitlement.expired, its audit row, access.revoked entitlement_expired), then entitlement.deleted carries that last state, expired', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 30) });
  t.clock.advance(31);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired', 'entitlement.deleted']);
  const [deleted] = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.equal(deleted.data.entitlement.status, 'expired');
  const expiry = (await auditOf(t, ent.id)).find((a) => a.action === 'entitlement.expired');
  assert.equal(expiry?.actor_type, 'system');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_expired', 'expired'],
  ]);
});

test('DELETE of an order-linked row is 409 entitlement_order_linked for every caller and regardless of restrict_destructive, even a superadmin', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', order_id: 'ord_del' });
  const superadmin = await person(t, { roles: ['superadmin'] });
  const key = await appKey(t, app.id, ['entitlements.manage']);
  const restricted = [
    (await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' })).secret,
    (await createApiKey(t, { scope: app.id, permissions: ['entitlements.manage'], restrictDestructive: true })).secret,
  ];
  for (const cred of [admin, superadmin.token, key, ...restricted]) {
    const error = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, cred), 409, 'entitlement_order_linked');
    assert.equal(error.details.order_id, 'ord_del');
  }
  assert.ok(await entRow(t, ent.id), 'await entRow(t, ent.id)');
});

test('DELETE of a row without order_id by a restrict_destructive key is 403 destructive_operation_restricted and removes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' });
  const error = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, restricted.secret), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, restricted.id);
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 0);
});

test('docs/decisions.md "Entitlement DELETE", the order of the refusals: 403 destructive_operation_restricted comes before entitlement_too_old, so a restrict_destructive key deleting a row older than 24 hours (no order_id) is 403, and removes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' });
  const createdAt = (await entRow(t, ent.id))!.created_at as Date;
  const later = new Date(createdAt.getTime() + DAY * 1000 + 1000);
  const error = assertError(await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, restricted.secret), later), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, restricted.id);
  assertError(await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), later), 409, 'entitlement_too_old');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
});

test('DELETE of a row older than 24 hours is 409 entitlement_too_old; a row just under 24 hours old may still be deleted', async () => {
  const user = await person(t);
  const young = await grant(t, admin, user.id, app.id);
  const other = await person(t);
  const ent = await grant(t, admin, other.id, app.id);
  t.clock.advance(DAY - 60);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${young.id}`, admin)).statusCode, 204);
  t.clock.advance(61);
  const tooOld = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), 409, 'entitlement_too_old');
  // The refusal names the window it applies (docs/decisions.md: 24 hours).
  assert.equal(tooOld.details.max_age_seconds, DAY);
  assert.ok(await entRow(t, ent.id), 'await entRow(t, ent.id)');
});

test('DELETE is refused 409 entitlement_too_old only once the row is "older than 24 hours" (docs/decisions.md): a row exactly 24 hours old may still be deleted (204, entitlement.deleted)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const createdAt = (await entRow(t, ent.id))!.created_at as Date;
  const res = await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), new Date(createdAt.getTime() + DAY * 1000));
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(await entRow(t, ent.id), undefined);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.deleted']);
});

test("DELETE needs entitlements.manage: the owner gets 403 forbidden; the app's own key with entitlements.manage may delete", async () => {
  const target = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, target.id);
  assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, target.owner!.token), 403, 'forbidden');
  const key = await appKey(t, target.id, ['entitlements.manage']);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, key)).statusCode, 204);
});

// ---- audit rows ----------------------------------------------------------------------------------

test('"entitlement.deleted | hard-deleted" with its last state: the audit row of a DELETE names the holder (target_user_id) and the Application, its before is the row as it was (after null), and the webhook carries the same state', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const last = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'made in error' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  const audit = await auditOf(t, ent.id, 'entitlement.deleted');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_type, 'entitlement');
  assert.equal(audit[0].target_user_id, user.id);
  assert.equal(audit[0].application_id, app.id);
  assert.deepEqual(audit[0].before, last);
  assert.equal(audit[0].after, null);
  const deleted = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.deepEqual(deleted.map((e) => e.data.entitlement), [last]);
});

test('audit rows about an organization-wide grant name its Organization (organization_id) and no holder: a member_scope change, a disable and the DELETE alike', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [orgAdmin.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { status: 'disabled', disabled_reason: 'org audit' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${id}`, admin)).statusCode, 204);
  const rows = await sql(t, 'SELECT action, organization_id, target_user_id, application_id FROM audit_events WHERE target_id = $1 ORDER BY created_at, id', [id]);
  assert.deepEqual(rows.map((r: any) => r.action), ['entitlement.member_scope_changed', 'entitlement.disabled', 'entitlement.deleted']);
  for (const r of rows) {
    assert.equal(r.organization_id, org, r.action);
    assert.equal(r.target_user_id, null, r.action);
    assert.equal(r.application_id, target.id, r.action);
  }
});
