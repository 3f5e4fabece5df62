// IC-1 [MP]: 50 concurrent POSTs with one Idempotency-Key, 25 on each of two server processes.
// docs/conventions.md "Idempotency-Key": records live in PostgreSQL per (credential, operation, key);
// a retry while the first runs gets 409 idempotency_key_in_flight; a retry after completion replays
// the stored status and body (Idempotent-Replayed: true). So: one row, one audit event, one outbox
// event, every answer the identical 2xx or 409 in flight, and byte-identical replays afterwards.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, type Reply } from './cluster.js';
import { adminKey, Budget, errorCode, expectStatus, newApp, rand, seconds, settled, signup, tally, uniqueEmail, type Account } from './fixtures.js';

const BURST = 50;
/** Catalog: 100 runs. Org grants and checkouts need an Organization or Tenant each, so fewer. */
const GRANT_RUNS = Number(process.env.MP_IC1_RUNS ?? 100);
const ORG_RUNS = 10;
const CHECKOUT_RUNS = 10;

let cluster: Cluster;
let admin: string;
let owner: Account;
let app: { id: string; tenant_id: string };
before(async () => {
  cluster = await Cluster.start();
  admin = await adminKey(cluster);
  owner = await signup(cluster.a);
  app = await newApp(cluster.a, admin, owner.id);
  await cluster.warm(BURST / 2, owner.access_token);
});
after(() => cluster?.close());

interface RunResult {
  /** The first 2xx answer: what every later retry must reproduce byte for byte. */
  first: Reply | null;
  problems: string[];
  answers: Record<string, number>;
}

/**
 * Fires BURST copies of one request (alternating processes) at once, then one retry on each process
 * after all have answered. Problems: a 2xx that differs from another, an answer that is neither the
 * 2xx nor 409 idempotency_key_in_flight, a retry that is not a byte-identical replay.
 */
async function burst(c: Cluster, send: (node: number) => Promise<Reply>): Promise<RunResult> {
  const requests = Array.from({ length: BURST }, (_, i) => () => send(i));
  const replies = await Promise.all(requests.map((r) => r()));
  const problems: string[] = [];
  const ok = replies.filter((r) => r.status >= 200 && r.status < 300);
  const first = ok[0] ?? null;
  const distinct = new Set(ok.map((r) => `${r.status} ${r.text}`));
  if (distinct.size !== 1) problems.push(`${distinct.size} distinct 2xx answers`);
  for (const r of replies) {
    if (r.status >= 300 && !(r.status === 409 && errorCode(r) === 'idempotency_key_in_flight')) problems.push(`unexpected ${r.status} ${r.text}`);
  }
  if (first) {
    for (const node of c.nodes.keys()) {
      const again = await send(node);
      if (again.status !== first.status || again.text !== first.text) problems.push(`retry on ${again.node}: ${again.status} ${again.text}`);
      else if (again.headers['idempotent-replayed'] !== 'true') problems.push(`retry on ${again.node} not marked Idempotent-Replayed`);
    }
  }
  return { first, problems, answers: tally(replies) };
}

const count = async (c: Cluster, text: string, params: unknown[]) => (await c.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${text}`, params))[0].n;

function report(id: string, what: string, runs: number | string, bad: string[], answers: Record<string, number>, figures: Record<string, number>, ms: number) {
  console.log(`[${id}] ${what}: ${runs} runs × ${BURST} requests (${BURST / 2} per process) in ${seconds(ms)} s; runs with a problem: ${bad.length}`);
  for (const [name, value] of Object.entries(figures)) console.log(`[${id}] ${what}: ${name}: ${value}`);
  console.log(`[${id}] ${what}: answers over all runs: ${JSON.stringify(answers)}`);
  for (const line of bad.slice(0, 10)) console.log(`[${id}]   ${line}`);
}

const addAnswers = (into: Record<string, number>, from: Record<string, number>) => {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
};

test(`IC-1 ${BURST} concurrent personal grants with one Idempotency-Key on two processes: 1 row, 1 audit event, 1 outbox event, one 2xx body (up to ${GRANT_RUNS} runs)`, async () => {
  const c = cluster;
  const budget = new Budget(GRANT_RUNS, 5, 20);
  const newUser = async (i: number) =>
    expectStatus(await settled(() => c.node(i).call('POST', '/v1/users', { token: admin, body: { email: uniqueEmail('ic1'), status: 'active', send_invitation: false } })), 201);
  const started = Date.now();
  let runs = 0;
  const bad: string[] = [];
  const answers: Record<string, number> = {};
  const figures = { 'runs with rows ≠ 1': 0, 'runs with distinct 2xx bodies ≠ 1': 0, 'runs with entitlement.granted audit events ≠ 1': 0, 'runs with entitlement.granted outbox events ≠ 1': 0 };
  while (budget.more(runs)) {
    const i = runs++;
    const user = await newUser(i);
    const key = `ic1-${rand(8)}`;
    const run = await burst(c, (node) =>
      c.node(node).call('POST', `/v1/users/${user.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: { 'idempotency-key': key } }),
    );
    addAnswers(answers, run.answers);
    const rows = await count(c, 'entitlements WHERE user_id = $1 AND application_id = $2', [user.id, app.id]);
    const entId = run.first?.json().id ?? null;
    const audits = await count(c, `audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [entId]);
    const events = await count(c, `outbox_events WHERE type = 'entitlement.granted' AND data->'entitlement'->>'id' = $1`, [entId]);
    if (rows !== 1) figures['runs with rows ≠ 1']++;
    if (run.problems.some((p) => p.includes('distinct')) || !run.first) figures['runs with distinct 2xx bodies ≠ 1']++;
    if (audits !== 1) figures['runs with entitlement.granted audit events ≠ 1']++;
    if (events !== 1) figures['runs with entitlement.granted outbox events ≠ 1']++;
    if (run.problems.length || rows !== 1 || audits !== 1 || events !== 1) bad.push(`run ${i}: rows ${rows}, audit ${audits}, outbox ${events}; ${run.problems.join('; ')}`);
  }
  report('IC-1', 'personal grants', budget.describe(runs), bad, answers, figures, Date.now() - started);
  assert.deepEqual(bad, []);
});

test(`IC-1 ${BURST} concurrent organization grants with one Idempotency-Key on two processes: 1 row, 1 audit event, 1 outbox event (up to ${ORG_RUNS} runs)`, async () => {
  const c = cluster;
  // Organization creation is limited per user per day: two creators, five Organizations each.
  const creators = [await signup(c.a), await signup(c.b)];
  const budget = new Budget(ORG_RUNS, 3, 10);
  const started = Date.now();
  const bad: string[] = [];
  const answers: Record<string, number> = {};
  const figures = { 'runs with rows ≠ 1': 0, 'runs with entitlement.granted audit events ≠ 1': 0, 'runs with entitlement.granted outbox events ≠ 1': 0 };
  let runs = 0;
  while (budget.more(runs)) {
    const i = runs++;
    const org = expectStatus(await settled(() => c.node(i).call('POST', '/v1/organizations', { token: creators[i % 2].access_token, body: { name: `IC-1 org ${i}` } })), 201);
    const key = `ic1-org-${rand(8)}`;
    const run = await burst(c, (node) =>
      c.node(node).call('POST', `/v1/organizations/${org.id}/entitlements`, { token: admin, body: { application_id: app.id }, headers: { 'idempotency-key': key } }),
    );
    addAnswers(answers, run.answers);
    const rows = await count(c, 'entitlements WHERE organization_id = $1 AND application_id = $2', [org.id, app.id]);
    const entId = run.first?.json().id ?? null;
    const audits = await count(c, `audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [entId]);
    const events = await count(c, `outbox_events WHERE type = 'entitlement.granted' AND data->'entitlement'->>'id' = $1`, [entId]);
    if (rows !== 1) figures['runs with rows ≠ 1']++;
    if (audits !== 1) figures['runs with entitlement.granted audit events ≠ 1']++;
    if (events !== 1) figures['runs with entitlement.granted outbox events ≠ 1']++;
    if (run.problems.length || rows !== 1 || audits !== 1 || events !== 1) bad.push(`run ${i}: rows ${rows}, audit ${audits}, outbox ${events}; ${run.problems.join('; ')}`);
  }
  report('IC-1', 'organization grants', budget.describe(runs), bad, answers, figures, Date.now() - started);
  assert.deepEqual(bad, []);
});

test(`IC-1 ${BURST} concurrent checkout sessions (local processor simulator) with one Idempotency-Key on two processes: 1 session row, one 2xx body (up to ${CHECKOUT_RUNS} runs)`, async () => {
  const c = cluster;
  const started = Date.now();
  const bad: string[] = [];
  const answers: Record<string, number> = {};
  const figures = { 'runs with new checkout rows ≠ 1': 0 };
  const body = { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing/cancel' };
  const budget = new Budget(CHECKOUT_RUNS, 3, 10);
  let runs = 0;
  while (budget.more(runs)) {
    const i = runs++;
    const before = await count(c, `billing_simulator_sessions WHERE tenant_id = $1 AND kind = 'checkout'`, [app.tenant_id]);
    const key = `ic1-checkout-${rand(8)}`;
    const run = await burst(c, (node) =>
      c.node(node).call('POST', `/v1/tenants/${app.tenant_id}/billing/checkout-sessions`, { token: owner.access_token, body, headers: { 'idempotency-key': key } }),
    );
    addAnswers(answers, run.answers);
    const created = (await count(c, `billing_simulator_sessions WHERE tenant_id = $1 AND kind = 'checkout'`, [app.tenant_id])) - before;
    if (created !== 1) figures['runs with new checkout rows ≠ 1']++;
    if (run.problems.length || created !== 1) bad.push(`run ${i}: new rows ${created}; ${run.problems.join('; ')}`);
  }
  report('IC-1', 'checkout sessions', budget.describe(runs), bad, answers, figures, Date.now() - started);
  assert.deepEqual(bad, []);
});
