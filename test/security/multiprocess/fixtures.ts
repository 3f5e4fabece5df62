// Fixtures for the [MP] tests, made the way a client would (HTTP) or, for credentials the API
// cannot mint for a test (a platform key holding every permission), with the owner's SQL.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { hashSecret, newId, newSecret } from '../../../src/ids.js';
import type { Cluster, Reply, ServerProcess } from './cluster.js';

export const PASSWORD = 'violet-harbor-cinnamon-42';
export const WRONG_PASSWORD = 'wrong-harbor-cinnamon-41';
export const REDIRECT = 'https://app.example.com/callback';
export const ALL_PERMISSIONS = [
  'users.list', 'users.manage', 'entitlements.manage', 'applications.manage', 'roles.manage', 'organizations.manage',
  'billing.manage', 'billing.refund', 'audit.view', 'webhooks.manage', 'api_keys.manage', 'tenants.manage',
];

export const rand = (bytes = 5) => randomBytes(bytes).toString('hex');
export const uniqueEmail = (label = 'mp') => `${label}-${rand()}@example.com`;

/** Asserts the status and returns the parsed body (null when empty). */
export function expectStatus(res: Reply, status: number): any {
  assert.equal(res.status, status, `expected ${status} from ${res.node}, got ${res.status} ${res.text}`);
  return res.text ? res.json() : null;
}

/**
 * Sends a setup request until it gets something other than 503 (at most 8 tries): a busy database
 * server can make a fresh process's first connections time out, which the service rightly answers
 * 503 with Retry-After. Measured requests never go through this.
 */
export async function settled(send: () => Promise<Reply>): Promise<Reply> {
  for (let attempt = 1; ; attempt++) {
    const res = await send();
    if (res.status !== 503 || attempt === 8) return res;
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The error code of an envelope or OAuth body, or null. */
export function errorCode(res: Reply): string | null {
  try {
    const body = res.json();
    return body?.error?.code ?? (typeof body?.error === 'string' ? body.error : null);
  } catch {
    return null;
  }
}

/** "201", "409 idempotency_key_in_flight", … : what a burst's answers are tallied by. */
export const outcome = (res: Reply) => (res.status < 300 ? String(res.status) : `${res.status} ${errorCode(res)}`);

export function tally(replies: Reply[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of replies) counts[outcome(r)] = (counts[outcome(r)] ?? 0) + 1;
  return counts;
}

/** A platform API key holding every permission (live unless testMode), inserted as the API keys module stores it. */
export async function adminKey(cluster: Cluster, permissions = ALL_PERMISSIONS, { testMode = false } = {}): Promise<string> {
  const secret = newSecret(testMode ? 'plat_test_' : 'plat_live_');
  await cluster.sql(
    `INSERT INTO api_keys (id, name, scope, permissions, test_mode, intended_use, restrict_destructive, secret_hash,
       secret_hint, expires_at, created_by_user_id, created_at, updated_at)
     VALUES ($1, 'mp admin', 'platform', $2, $5, 'service', false, $3, $4, NULL, 'usr_fixture', now(), now())`,
    [newId('key'), permissions, hashSecret(secret), secret.slice(-4), testMode],
  );
  return secret;
}

export interface Account {
  id: string;
  email: string;
  password: string;
  access_token: string;
  refresh_token: string;
  session_id: string;
}

/** POST /v1/auth/signup: an active live user with a password and a first session. */
export async function signup(node: ServerProcess, email = uniqueEmail()): Promise<Account> {
  const body = expectStatus(await settled(() => node.call('POST', '/v1/auth/signup', { body: { email, password: PASSWORD } })), 201);
  return { id: body.user_id, email, password: PASSWORD, access_token: body.access_token, refresh_token: body.refresh_token, session_id: body.session_id };
}

export const login = (node: ServerProcess, email: string, password = PASSWORD) =>
  node.call('POST', '/v1/auth/login', { body: { email, password } });

/** A login that is set-up, not measured: 503s are retried. */
export const loginSettled = (node: ServerProcess, email: string, password = PASSWORD) => settled(() => login(node, email, password));

/** POST /v1/applications owned by `ownerId` (a Starter Tenant of their own); approved, public. */
export async function newApp(node: ServerProcess, admin: string, ownerId: string, extra: Record<string, unknown> = {}): Promise<{ id: string; tenant_id: string }> {
  const slug = `mp${rand(4)}`;
  const send = () =>
    node.call('POST', '/v1/applications', {
      token: admin,
      body: { slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com/`, owner_user_id: ownerId, visibility: 'public', ...extra },
    });
  return expectStatus(await settled(send), 201);
}

/** Runs fn over items with at most `limit` in flight. */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i], i);
      }
    }),
  );
  return out;
}

export const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** The test runner times out a whole file after 120 s (scripts/test.mjs): budgets end well before. */
const FILE_STARTED = Date.now();
const FILE_BUDGET_MS = Number(process.env.MP_FILE_BUDGET_S ?? 75) * 1000;

/**
 * How many iterations to run: the catalog's `target`, but stop once `seconds` have passed, or the
 * file has run FILE_BUDGET_MS (after at least `minimum`), so a file stays well inside the runner's
 * per-file timeout on a busy machine. MP_NO_BUDGET=1 always runs the full target. The count reached
 * is part of every printed figure.
 */
export class Budget {
  private readonly started = Date.now();
  constructor(
    readonly target: number,
    readonly minimum: number,
    readonly seconds: number,
  ) {}

  /** True while another iteration should run, given `done` so far. */
  more(done: number): boolean {
    if (done >= this.target) return false;
    if (done < this.minimum || process.env.MP_NO_BUDGET === '1') return true;
    return Date.now() - this.started < this.seconds * 1000 && Date.now() - FILE_STARTED < FILE_BUDGET_MS;
  }

  /** "200" or "137 of 200 (time budget 30 s)". */
  describe(done: number): string {
    return done >= this.target ? String(done) : `${done} of ${this.target} (time budget reached)`;
  }
}
