// AZ-4 (security catalog 2.5): test/live isolation, property-tested. Mirrored data is seeded in
// both modes (az-4-seed.ts); fast-check then generates GET calls over every GET operation of
// /v1/openapi.json, by a credential of either mode, with path ids and query filters drawn from both
// modes (ids of the other mode, include_inactive, status, email, q, cursors of the other mode…).
// No response may contain a row (an id) of the other mode. Webhooks: a subscription of one mode
// receives no event of the other.
//
// Scope decisions (Part A convention 10 names users, entitlements, organizations and webhooks):
// - Applications and Tenants are shared catalog rows; their owner_user_id may name a user of
//   either mode and is not counted.
// - API keys carry a mode and are managed by users: a live credential may see test keys (the list
//   has a `mode` filter for that), but a test credential must never see a live key.
// - An id the caller sent and an error answer echoes back is not a leak; in a 2xx answer it is.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { buildTestApp, storageName, type TestApp } from '../../helpers/app.js';
import { call, sql } from '../../helpers/http.js';
import { Receiver } from '../../webhooks/support.js';
import type { Mode } from '../../../src/db/types.js';
import { idsByMode, seedBothModes, type Seeded } from './az-4-seed.js';

const SEED = Number(process.env.MODEL_SEED ?? 20260401);
const RUNS = Number(process.env.MODEL_RUNS ?? 10_000);
// Time: the whole file (boot and seed included) aims at FILE_S seconds; the calls get what is left
// (at least 10 s), or exactly MODEL_BUDGET_S when set. Each test file runs in its own process.
const FILE_S = Number(process.env.MODEL_FILE_BUDGET_S ?? 75);
const callBudgetMs = () => (process.env.MODEL_BUDGET_S ? Number(process.env.MODEL_BUDGET_S) * 1000 : Math.max(10_000, (FILE_S - process.uptime()) * 1000 - 5000));

let t: TestApp;
let receiver: Receiver;
let seeded: Seeded;
let ids: Map<string, { mode: Mode; table: string }>;

interface Operation {
  path: string;
  params: { name: string; in: 'path' | 'query'; schema: any }[];
}
let operations: Operation[] = [];
const cursors: string[] = [];
let auditActions: string[] = [];

before(async () => {
  const started = Date.now();
  t = await buildTestApp({ webhookAllowPrivateTargets: true });
  receiver = await Receiver.start();
  seeded = await seedBothModes(t, receiver);
  await t.deps.jobs.runNow('webhook-delivery');
  ids = await idsByMode(t);
  auditActions = (await sql<{ action: string }>(t, 'SELECT DISTINCT action FROM audit_events ORDER BY action')).map((r) => r.action);
  const doc = (await call(t, 'GET', '/v1/openapi.json', null)).json();
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    if (item.get && path.startsWith('/v1/') && path !== '/v1/openapi.json') operations.push({ path, params: item.get.parameters ?? [] });
  }
  // Cursors of both modes: the first page of each list, per caller, one row a page.
  for (const c of seeded.callers.filter((x) => x.label === 'platform key')) {
    for (const op of operations.filter((o) => o.params.some((p) => p.name === 'cursor') && !o.path.includes('{'))) {
      const res = await call(t, 'GET', `${op.path}?limit=1`, c.cred);
      if (res.statusCode === 200 && res.json().page?.next_cursor) cursors.push(res.json().page.next_cursor);
    }
  }
  console.log(`[AZ-4] boot and seed of both modes: ${((Date.now() - started) / 1000).toFixed(1)} s`);
});
after(async () => {
  await receiver.close();
  await t.close();
});

const POOLS: Record<string, string> = {
  users: 'users', entitlements: 'entitlements', organizations: 'organizations', 'audit-events': 'audit_events', webhooks: 'webhook_subscriptions',
  'api-keys': 'api_keys', deliveries: 'webhook_deliveries', sessions: 'sessions',
};

function pool(table: string | null): string[] {
  const all = [...ids].filter(([, v]) => table === null || v.table === table).map(([id]) => id);
  return all.length ? all : ['none'];
}

/** Values for one parameter: ids of both modes, the shared emails, prefixes, dates, enums, cursors. */
function valueArb(op: Operation, p: Operation['params'][number], index: number): fc.Arbitrary<string | string[]> {
  const s = p.schema ?? {};
  const enums: string[] | undefined = s.enum ?? s.anyOf?.flatMap((x: any) => x.enum ?? []);
  if (enums?.length) return fc.constantFrom(...enums);
  if (s.type === 'boolean') return fc.constantFrom('true', 'false');
  if (s.type === 'integer') return fc.integer({ min: s.minimum ?? 1, max: s.maximum ?? 100 }).map(String);
  if (s.format === 'date-time') return fc.constantFrom(new Date(0).toISOString(), t.clock.now().toISOString(), new Date(t.clock.now().getTime() + 86400_000).toISOString());
  if (s.type === 'array') return fc.subarray(auditActions, { minLength: 1, maxLength: 3 });
  const emails = Object.values(seeded.emails);
  const apps = seeded.apps.map((a) => a.id);
  switch (p.name) {
    case 'cursor':
      return fc.constantFrom(...(cursors.length ? cursors : ['x']));
    case 'email':
      return fc.constantFrom(...emails, ...emails.map((e) => e.toUpperCase()));
    case 'q':
      return fc.constantFrom('az4', 'AZ4', 'az4-', ...emails.map((e) => e.slice(0, 9)), 'Alice', '%%%', '___', 'az4%');
    case 'target_type':
      return fc.constantFrom('user', 'entitlement', 'organization', 'webhook', 'api_key', 'application', 'session');
    case 'application_id':
    case 'scope':
      return fc.constantFrom(...apps, 'platform');
  }
  if (p.in === 'path') {
    const parts = op.path.split('/');
    const before = parts[parts.indexOf(`{${p.name}}`) - 1];
    if (before === 'applications' || before === 'apps') return fc.constantFrom(...apps);
    if (before === 'users') return fc.oneof({ weight: 1, arbitrary: fc.constant('me') }, { weight: 6, arbitrary: fc.constantFrom(...pool('users')) });
    if (POOLS[before]) return fc.constantFrom(...pool(POOLS[before]));
    return fc.constantFrom(...pool(null), `${before}_${index}`);
  }
  return fc.constantFrom(...pool(null), ...apps, 'me');
}

interface Call {
  caller: number;
  url: string;
}

/** One GET call: an operation of the OpenAPI document (known once the app runs), a caller, its parameters. */
const callArb = (): fc.Arbitrary<Call> =>
  fc.integer({ min: 0, max: operations.length - 1 }).chain((n) => {
    const op = operations[n];
    const pathArbs = op.params.filter((p) => p.in === 'path').map((p, i) => valueArb(op, p, i).map((v) => [p.name, v as string] as const));
    const queryArbs = op.params.filter((p) => p.in === 'query').map((p, i) => fc.option(valueArb(op, p, i).map((v) => [p.name, v] as const), { freq: 2 }));
    return fc.record({ caller: fc.integer({ min: 0, max: seeded.callers.length - 1 }), path: fc.tuple(...pathArbs), query: fc.tuple(...queryArbs) }).map(({ caller, path, query }) => {
      let url = op.path;
      for (const [name, v] of path) url = url.replace(`{${name}}`, encodeURIComponent(v));
      const qs = query.flatMap((q) => (q === null ? [] : [q[1]].flat().map((v) => `${q[0]}=${encodeURIComponent(v)}`)));
      return { caller, url: qs.length ? `${url}?${qs.join('&')}` : url };
    });
  });

/** Every string of a JSON value with its path (`data.created_by.id`); cursors are opened too. */
function strings(value: unknown, path = '', out: [string, string][] = []): [string, string][] {
  if (typeof value === 'string') {
    out.push([path, value]);
    if (path.endsWith('next_cursor')) {
      try {
        strings(JSON.parse(Buffer.from(value, 'base64url').toString('utf8')), `${path}(decoded)`, out);
      } catch {
        /* not a cursor we know */
      }
    }
  } else if (Array.isArray(value)) for (const v of value) strings(v, path, out);
  else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) strings(v, path ? `${path}.${k}` : k, out);
  return out;
}

/** The rows of the other mode in one answer (see the scope decisions at the top). */
function crossModeRows(mode: Mode, url: string, status: number, body: unknown): string[] {
  const shared = url.startsWith('/v1/applications') || url.startsWith('/v1/tenants');
  const keys = url.startsWith('/v1/api-keys');
  const found = new Set<string>();
  for (const [path, s] of strings(body)) {
    const row = ids.get(s);
    if (!row || row.mode === mode) continue;
    if (shared && path.endsWith('owner_user_id')) continue;
    // A live credential may see test keys, and with them the test user who created each.
    if (mode === 'live' && (row.table === 'api_keys' || (keys && path.endsWith('created_by.id')))) continue;
    if (status >= 400 && decodeURIComponent(url).includes(s)) continue;
    found.add(`${row.table}:${s} (at ${path})`);
  }
  return [...found];
}

test('AZ-4 the same email is allowed in both modes, and each mode finds only its own user by it', async () => {
  for (const mode of ['live', 'test'] as const) {
    const admin = seeded.callers.find((c) => c.mode === mode && c.label === 'platform key')!;
    for (const email of Object.values(seeded.emails)) {
      const rows = await sql(t, 'SELECT id, test_mode FROM users WHERE lower(email) = lower($1) AND status <> $2', [email, 'deleted']);
      if (rows.length === 0) continue;
      const res = await call(t, 'GET', `/v1/users?email=${encodeURIComponent(email.toUpperCase())}&include_inactive=true`, admin.cred);
      assert.equal(res.statusCode, 200, res.body);
      const expected = rows.filter((r) => r.test_mode === (mode === 'test')).map((r) => r.id).sort();
      assert.deepEqual(res.json().data.map((u: any) => u.id).sort(), expected, `${mode} lookup of ${email}`);
    }
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) = $1', [seeded.emails.alice]))[0].n, 2, 'one alice per mode');
  }
});

test('AZ-4 webhooks: a subscription receives only events of its own mode (test subscriptions get 0 live events and vice versa)', async () => {
  const eventMode = new Map((await sql<{ id: string; test_mode: boolean }>(t, 'SELECT id, test_mode FROM outbox_events')).map((r) => [r.id, r.test_mode ? 'test' : 'live']));
  let cross = 0;
  for (const sub of seeded.subscriptions) {
    const got = receiver.at(sub.path);
    assert.ok(got.length > 1, `${sub.path} received its own events`);
    for (const r of got) {
      const mode = r.body.type === 'webhook.test' ? (r.body.test_mode ? 'test' : 'live') : eventMode.get(r.body.id);
      if (mode !== sub.mode || r.body.test_mode !== (sub.mode === 'test')) cross++;
    }
  }
  console.log(`[AZ-4] webhook deliveries across modes: ${cross} of ${receiver.received.length} (storage=${storageName})`);
  assert.equal(cross, 0);
});

test('AZ-4 test/live isolation: no GET answer ever contains a row of the other mode', { timeout: 600_000 }, async () => {
  const started = Date.now();
  const BUDGET_MS = callBudgetMs();
  console.log(`[AZ-4] seed=${SEED} calls<=${RUNS} budget=${(BUDGET_MS / 1000).toFixed(0)}s operations=${operations.length} callers=${seeded.callers.length} rows=${ids.size} cursors=${cursors.length} storage=${storageName}`);
  let calls = 0;
  let run = -1;
  const statuses = new Map<number, number>();
  const leaks: { run: number; call: string; rows: string[] }[] = [];
  const check = async (c: Call) => {
    const caller = seeded.callers[c.caller];
    const res = await call(t, 'GET', c.url, caller.cred);
    let body: unknown = null;
    try {
      body = res.json();
    } catch {
      /* not JSON */
    }
    return { caller, res, rows: crossModeRows(caller.mode, c.url, res.statusCode, body) };
  };
  await fc.assert(
    fc.asyncProperty(callArb(), async (c) => {
      run++;
      if (Date.now() - started > BUDGET_MS) return true;
      calls++;
      const { caller, res, rows } = await check(c);
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      if (rows.length) leaks.push({ run, call: `${caller.mode} ${caller.label}: GET ${c.url} → ${res.statusCode}`, rows });
      return true;
    }),
    { seed: SEED, numRuns: RUNS },
  );
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`[AZ-4] cross-mode rows over ${calls} calls: ${leaks.length}`);
  console.log(`[AZ-4] statuses ${JSON.stringify(Object.fromEntries(statuses))}, ${seconds} s`);
  if (leaks.length === 0) return;
  const kinds = new Map<string, number>();
  for (const l of leaks) {
    const k = `${l.call.split(':')[0]} GET ${l.call.split(' GET ')[1].replace(/ → \d+$/, '').split('?')[0].replace(/\/(usr|ent|org|evt|whk|key|dlv|ses)_[0-9A-Z]+/g, '/{id}')}`;
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  for (const [k, n] of [...kinds].sort((x, y) => y[1] - x[1])) console.log(`[AZ-4]   ${n} call(s): ${k}`);
  // Let fast-check shrink the first leaking call (cheap: one request per candidate).
  const details = await fc.check(
    fc.asyncProperty(callArb(), async (c) => (await check(c)).rows.length === 0),
    { seed: SEED, numRuns: RUNS, path: String(leaks[0].run) },
  );
  const shrunk = details.counterexample?.[0];
  if (shrunk) {
    const { caller, res, rows } = await check(shrunk);
    console.log(`[AZ-4] shrunk counterexample (MODEL_SEED=${SEED}, path ${details.counterexamplePath}): ${caller.mode} ${caller.label}: GET ${shrunk.url} → ${res.statusCode}\n[AZ-4]   other-mode rows: ${rows.join(', ')}`);
  }
  for (const l of leaks.slice(0, 5)) console.log(`[AZ-4] leak: ${l.call}\n[AZ-4]   ${l.rows.slice(0, 6).join(', ')}`);
  assert.fail(`${leaks.length} of ${calls} calls returned rows of the other mode (seed ${SEED})`);
});
