// Catalog AZ-1 and AZ-6 (security-test-catalog.md §2.5), generated from GET /v1/openapi.json on one
// service instance and one set of fixtures (world.ts):
//   AZ-1: the API9 inventory (the router serves exactly the documented operations) and the
//         authorization matrix (every operation × every caller class of callers.ts gets the outcome of
//         the one table, expectations.ts);
//   AZ-6: restrict_destructive (every operation marked x-platform-destructive, destructive.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { call } from '../../helpers/http.js';
import { createUser } from '../../helpers/fixtures.js';
import { CALLERS } from './callers.js';
import { RULES, UNDOCUMENTED_ALLOWED, type Outcome } from './expectations.js';
import { expectedOutcome, seesFixtures, type DocOp } from './derive.js';
import { CALLS, type Pick } from './operations.js';
import { CASES, specClass } from './destructive.js';
import { buildWorld, sessionOf, type World } from './world.js';
import { docOperations, outcomeOf, servedRoutes, writtenSince, type DocOperation } from './support.js';

let w: World;
let ops: DocOperation[];
before(async () => {
  w = await buildWorld();
  const res = await w.t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(res.statusCode, 200);
  ops = docOperations(res.json());
});
after(() => w.t.close());

const describe = (o: Outcome) => `${o.status}${o.code ? ` ${o.code}` : ''}`;

test('AZ-1 inventory: the router serves exactly the documented operations (API9); undocumented routes only from the listed non-/v1 exceptions', () => {
  const documented = new Set(ops.map((o) => o.key));
  const served = servedRoutes(w.t.app);
  const undocumented: string[] = [];
  const allowedHidden: string[] = [];
  for (const r of served) {
    const key = `${r.method} ${r.path}`;
    if (documented.has(key)) continue;
    const allowed = !r.path.startsWith('/v1/') && UNDOCUMENTED_ALLOWED.some((a) => a.pattern.test(r.path));
    (allowed ? allowedHidden : undocumented).push(key);
  }
  const servedKeys = new Set(served.map((r) => `${r.method} ${r.path}`));
  const notServed = [...documented].filter((k) => !servedKeys.has(k));
  console.log(
    `[AZ-1] inventory: routes served ${served.length} (/v1 ${served.filter((r) => r.path.startsWith('/v1/')).length}), ` +
      `operations documented ${documented.size} (/v1 ${ops.filter((o) => o.path.startsWith('/v1/')).length}); undocumented routes ${undocumented.length}; ` +
      `documented but not served ${notServed.length}; allowed undocumented ${allowedHidden.length} (${allowedHidden.join(', ')})`,
  );
  assert.deepEqual(undocumented, [], 'routes the document does not describe');
  assert.deepEqual(notServed, [], 'documented operations the router does not serve');
});

test('AZ-1 the expectations table, the call table and the document name the same operations and agree on credentials', () => {
  const documented = ops.map((o) => o.key).sort();
  assert.deepEqual(Object.keys(RULES).sort(), documented, 'RULES (expectations.ts) = documented operations');
  assert.deepEqual(Object.keys(CALLS).sort(), documented, 'CALLS (operations.ts) = documented operations');
  const problems: string[] = [];
  for (const o of ops) {
    const rule = RULES[o.key];
    const isPublic = !o.op.security?.length;
    if (isPublic !== !!rule.public) problems.push(`${o.key}: document security ${isPublic ? 'none' : 'bearer'}, table ${rule.public ? 'public' : 'credential'}`);
    if (rule.user && !/user_token_required/.test(o.op.responses?.['400']?.description ?? '')) problems.push(`${o.key}: User-token only, but the document's 400 does not name user_token_required`);
    if (!isPublic && !o.op.responses?.['401']) problems.push(`${o.key}: no documented 401`);
  }
  assert.deepEqual(problems, []);
});

test('AZ-1 authorization matrix: every documented operation × every caller class gets the outcome of the one table', async (t) => {
  const total = ops.length * CALLERS.length;
  let covered = 0;
  let mismatches = 0;
  // Statuses an operation answered without documenting them (reported, checked by IV-1, not failed here).
  const undocumented = new Set<string>();
  const started = Date.now();
  for (const o of ops) {
    await t.test(`AZ-1 ${o.key}`, async () => {
      const found: string[] = [];
      const spec = CALLS[o.key];
      let decoy: { value: unknown } | null = null;
      for (const caller of CALLERS) {
        const { outcome: expected, source, reason } = expectedOutcome(o.key, o.op as DocOp, caller, !!spec.destructiveNow);
        const reach = source === 'public' || !source.startsWith('gate:');
        // Targets that a call may change: fresh for expected successes, one decoy per operation for
        // refusals by the service, a ghost id for refusals by the gate (operations.ts, Pick).
        const mode = !reach ? 'ghost' : expected.status < 400 ? 'fresh' : 'decoy';
        const pick: Pick = async (make, ghost) => {
          if (mode === 'ghost') return ghost;
          if (mode === 'fresh') return make();
          decoy ??= { value: await make() };
          return decoy.value as Awaited<ReturnType<typeof make>>;
        };
        const req = await spec.arrange(w, caller, pick, reach);
        const refused = expected.status >= 400 && source !== 'public';
        const callStart = w.t.clock.now();
        const res = await call(w.t, o.method, req.url, req.cred !== undefined ? req.cred : w.cred[caller.id], req.body, req.headers);
        covered++;
        const got = outcomeOf(res);
        if (!o.op.responses?.[String(got.status)]) undocumented.add(`${o.key} → ${describe(got)}`);
        if (refused && got.status < 300) decoy = null; // it got through and may have changed the decoy
        const notes: string[] = [];
        // A refusal past the gate must write nothing (the gate itself runs before any handler).
        if (refused && reach && got.status === expected.status && (await writtenSince(w.t, callStart)) > 0) notes.push('the refused call wrote an audit row, outbox event or email');
        if (RULES[o.key].blind && source === 'deny' && expected.status === 403 && got.status === 403) {
          // The same request on a ghost target must be refused alike, or the 403 is an existence oracle.
          const ghostReq = await spec.arrange(w, caller, async (_make, ghost) => ghost, reach);
          const ghost = outcomeOf(await call(w.t, o.method, ghostReq.url, ghostReq.cred !== undefined ? ghostReq.cred : w.cred[caller.id], ghostReq.body, ghostReq.headers));
          if (ghost.status !== got.status || ghost.code !== got.code) notes.push(`on a ghost target it answers ${describe(ghost)}: the 403 tells that the target exists`);
        }
        const sees = source === 'allow' && got.status === 200 && spec.listed ? seesFixtures(o.key, caller) : null;
        if (sees !== null) {
          const wanted = spec.listed!(w);
          const shown = wanted.filter((id) => res.body.includes(id));
          if (sees && shown.length !== wanted.length) notes.push(`the list misses fixture rows this caller may see (${wanted.join(', ')})`);
          if (!sees && shown.length) notes.push(`the list shows fixture rows this caller may not see (${shown.join(', ')})`);
        }
        if (got.status !== expected.status || (expected.code !== undefined && got.code !== expected.code) || notes.length) {
          found.push(`${caller.id}: expected ${describe(expected)} (${source}${reason ? `: ${reason}` : ''}), got ${describe(got)}${notes.length ? ` — ${notes.join('; ')}` : ''}`);
        }
      }
      mismatches += found.length;
      assert.deepEqual(found, [], `${o.key} (${RULES[o.key].why})`);
    });
  }
  console.log(`[AZ-1] cells covered ${covered} / ${total} (${ops.length} operations × ${CALLERS.length} caller classes); mismatches ${mismatches}; ${Date.now() - started} ms`);
  console.log(`[AZ-1] answered statuses the operation does not document: ${undocumented.size}${undocumented.size ? ` (${[...undocumented].join('; ')})` : ''}`);
  assert.equal(covered, total);
});

test('AZ-6 the destructive marks: every DELETE is tagged always, and the tagged set is exactly Part A convention 11', () => {
  const deletes = ops.filter((o) => o.method === 'DELETE');
  const untaggedDeletes = deletes.filter((o) => o.op['x-platform-destructive'] !== 'always').map((o) => o.key);
  const wrong = ops
    .filter((o) => o.op['x-platform-destructive'] !== specClass(o.key))
    .map((o) => `${o.key}: document ${o.op['x-platform-destructive'] ?? 'untagged'}, spec ${specClass(o.key) ?? 'untagged'}`);
  const conditionalWithoutWhen = ops.filter((o) => o.op['x-platform-destructive'] === 'conditional' && !o.op['x-platform-destructive-when']).map((o) => o.key);
  const tagged = ops.filter((o) => o.op['x-platform-destructive']);
  const always = tagged.filter((o) => o.op['x-platform-destructive'] === 'always').length;
  console.log(
    `[AZ-6] DELETE operations ${deletes.length}, untagged DELETE ${untaggedDeletes.length}; tagged operations ${tagged.length} ` +
      `(always ${always}, conditional ${tagged.length - always}); disagreements with convention 11: ${wrong.length}`,
  );
  assert.deepEqual(untaggedDeletes, [], 'untagged DELETE operations');
  assert.deepEqual(wrong, [], 'marks that differ from Part A convention 11');
  assert.deepEqual(conditionalWithoutWhen, [], 'conditional marks without x-platform-destructive-when');
});

test('AZ-6 a fully permitted restrict_destructive key is refused every destructive operation, exactly when its condition holds, with details.key_id', async (t) => {
  const tagged = ops.filter((o) => o.op['x-platform-destructive']);
  assert.deepEqual(tagged.map((o) => o.key).filter((k) => !CASES[k]), [], 'every tagged operation has an AZ-6 case (destructive.ts)');
  let exercised = 0;
  let refusals = 0;
  let userOnly = 0;
  // The user of the User-token variants (logout with all_sessions ends every session of its own).
  const person = await createUser(w.t, { roles: ['superadmin'] });
  for (const o of tagged) {
    await t.test(`AZ-6 ${o.key}`, async () => {
      const problems: string[] = [];
      for (const v of CASES[o.key]) {
        const req = await v.arrange(w);
        const since = w.t.clock.now();
        const res = await call(w.t, o.method, req.url, w.cred.restrictKey, req.body);
        const got = outcomeOf(res);
        if (v.userOnly) {
          // No key reaches a User-token operation: the caller-type check precedes the destructive gate.
          const twin = outcomeOf(await call(w.t, o.method, req.url, w.cred.platformKey, req.body));
          for (const [who, o2] of [['restricted', got], ['unrestricted', twin]] as const) {
            if (o2.status !== 400 || o2.code !== 'user_token_required') problems.push(`${v.label}: ${who} key got ${describe(o2)}, expected 400 user_token_required`);
          }
          // Users are never restricted: a superadmin's fresh session makes the same call.
          const user = outcomeOf(await call(w.t, o.method, req.url, (await sessionOf(w.t, person)).token, req.body));
          if (user.status !== v.ok) problems.push(`${v.label}: a user got ${describe(user)}, expected ${v.ok}`);
          userOnly++;
        } else if (v.destructive) {
          if (got.status !== 403 || got.code !== 'destructive_operation_restricted') problems.push(`${v.label}: restricted key got ${describe(got)}, expected 403 destructive_operation_restricted`);
          else if (res.json().error.details?.key_id !== w.restrictKeyId) problems.push(`${v.label}: details ${JSON.stringify(res.json().error.details)}, expected key_id ${w.restrictKeyId}`);
          else refusals++;
          if ((await writtenSince(w.t, since)) > 0) problems.push(`${v.label}: the refused call wrote an audit row, outbox event or email`);
          const twin = outcomeOf(await call(w.t, o.method, req.url, w.cred.platformKey, req.body));
          if (twin.status !== v.ok) problems.push(`${v.label}: the unrestricted twin key got ${describe(twin)}, expected ${v.ok} (target intact, permissions sufficient)`);
        } else if (got.status !== v.ok) {
          problems.push(`${v.label}: restricted key got ${describe(got)}, expected ${v.ok} (the condition does not hold)`);
        }
      }
      exercised++;
      const when = o.op['x-platform-destructive-when'] ? `, when ${o.op['x-platform-destructive-when']}` : '';
      assert.deepEqual(problems, [], `${o.key} (x-platform-destructive ${o.op['x-platform-destructive']}${when})`);
    });
  }
  console.log(
    `[AZ-6] tagged ops exercised ${exercised} / ${tagged.length}; destructive requests refused as specified ${refusals} / ${Object.values(CASES).flat().filter((v) => v.destructive && !v.userOnly).length}; ` +
      `variants on User-token operations, which no key reaches (400 user_token_required) ${userOnly}`,
  );
  assert.equal(exercised, tagged.length);
});
