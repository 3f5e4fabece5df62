// Database statements per request on the platform's hottest calls (catalog LD-2's "DB queries per
// request"; the load part is `BENCH_CONNECTIONS=50 npm run bench users-me effective-permissions
// app-tokens`, see bench/README.md). Every statement the service sends is counted, on every scope's
// handle, BEGIN and COMMIT included, from the request until its after-answer work has settled. The
// figures are the design (docs/decisions.md "Performance"): the caller's session is read in the same
// statement as what the route needs; a regression that adds a round trip to these routes fails here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import type { Database, Db, Scope, Tx } from '../../src/db/types.js';
import { assertStatus, call, grant, newApp, person, platformKey } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  // The signing keys' background reload (one statement a minute) is no request's work: off here.
  t.deps.keys.stop();
});
after(() => t.close());

/** Records every statement sent through `database` (queries, and BEGIN/COMMIT of outermost transactions). */
function recordStatements(database: Database) {
  const original = database.scoped;
  let sent: string[] = [];
  let running: Promise<unknown>[] = [];
  const wrap = <D extends Db>(db: D): D =>
    new Proxy(db, {
      get(target, prop) {
        if (prop === 'query') {
          return (text: string, params?: unknown[]) => {
            sent.push(text.trim().split(/\s+/).slice(0, 4).join(' '));
            const result = target.query(text, params);
            running.push(result.catch(() => undefined));
            return result;
          };
        }
        if (prop === 'transaction') {
          return async <T>(fn: (tx: Tx) => Promise<T>) => {
            const outermost = !target.inTransaction;
            if (outermost) sent.push('BEGIN');
            try {
              return await target.transaction((tx) => fn(wrap(tx)));
            } finally {
              if (outermost) sent.push('COMMIT');
            }
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  database.scoped = (scope: Scope) => wrap(original.call(database, scope));
  return {
    /** The statements of one request (and of whatever it left running after its answer). */
    async during(send: () => Promise<unknown>): Promise<string[]> {
      sent = [];
      running = [];
      await send();
      // After the answer: until 50 ms pass in which no statement starts, every one started having settled.
      for (let seen = -1; seen !== sent.length; ) {
        seen = sent.length;
        await sleep(50);
        await Promise.all(running);
      }
      return sent;
    },
    restore: () => {
      database.scoped = original;
    },
  };
}

test("LD-2 hot paths: GET /v1/users/me, effective-permissions and POST /v1/auth/app-tokens take one statement each (the caller's session with the user, or with the access check), nothing after the answer", async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const requests = {
    'GET /v1/users/me': () => call(t, 'GET', '/v1/users/me', user.token),
    'GET effective-permissions': () => call(t, 'GET', `/v1/users/me/apps/${app.id}/effective-permissions`, user.token),
    'POST /v1/auth/app-tokens': () => call(t, 'POST', '/v1/auth/app-tokens', user.token, { application_id: app.id }),
  };
  // Once each first: the first presentation of a token verifies its signature (no statement either way).
  for (const send of Object.values(requests)) assertStatus(await send(), 200);
  const recorder = recordStatements(t.database);
  try {
    const counted: Record<string, string[]> = {};
    for (const [name, send] of Object.entries(requests)) {
      counted[name] = await recorder.during(async () => assertStatus(await send(), 200));
    }
    const figures = Object.fromEntries(Object.entries(counted).map(([name, s]) => [name, s.length]));
    console.log(`LD-2 statements per request: ${JSON.stringify(figures)}`);
    assert.deepEqual(figures, { 'GET /v1/users/me': 1, 'GET effective-permissions': 1, 'POST /v1/auth/app-tokens': 1 }, JSON.stringify(counted, null, 1));
  } finally {
    recorder.restore();
  }
});

test('"Login is two statements" (docs/decisions.md, Performance): one finds the user and takes the attempt slot, one after Argon2id starts the session; a token refresh ("one statement and one signature") is one', async () => {
  const user = await person(t);
  const recorder = recordStatements(t.database);
  try {
    let session: { refresh_token: string } | undefined;
    const login = await recorder.during(async () => {
      session = assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 200);
    });
    const refresh = await recorder.during(async () => assertStatus(await call(t, 'POST', '/v1/auth/token/refresh', null, { refresh_token: session!.refresh_token }), 200));
    assert.deepEqual({ login: login.length, refresh: refresh.length }, { login: 2, refresh: 1 }, JSON.stringify({ login, refresh }, null, 1));
  } finally {
    recorder.restore();
  }
});

test('LD-2 the statement count above is real: a request that writes (PATCH /v1/users/me/profile) is counted with its transaction', async () => {
  const user = await person(t);
  const recorder = recordStatements(t.database);
  try {
    const sent = await recorder.during(async () => assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', user.token, { display_name: 'Counted' }), 200));
    assert.ok(sent.includes('BEGIN') && sent.includes('COMMIT') && sent.length > 3, sent.join(' | '));
  } finally {
    recorder.restore();
  }
});
