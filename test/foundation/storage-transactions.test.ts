// Storage: transactions and scopes: row-level security per mode, the transaction guard, deadlock victims
// run again, prepared statements and JIT on PostgreSQL, each handle's scope, asModeWithin. Starts are in
// storage-starts.test.ts; connections and /health in storage-connections.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { buildTestApp, dropSchema, storageName, TEST_DATABASE_URL, type TestApp } from '../helpers/app.js';
import { createApiKey, uniqueEmail } from '../helpers/fixtures.js';
import { openPg } from '../../src/db/pg.js';
import { asModeWithin, inSubjectMode } from '../../src/db/roles.js';
import type { Database } from '../../src/db/types.js';
import { newId } from '../../src/ids.js';
import { freshSchemaName } from './support/ops.js';
import { blockedBy, client } from '../helpers/locks.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

test('mode isolation is enforced by the database itself (row-level security)', async () => {
  const insert = (scope: 'live' | 'test', testMode: boolean) => {
    const id = newId('usr');
    const now = new Date();
    return {
      id,
      run: () =>
        t.database
          .scoped(scope)
          .query(`INSERT INTO users (id, email, status, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', $3, $4, $4)`, [
            id,
            uniqueEmail('rls'),
            testMode,
            now,
          ]),
    };
  };
  const visible = async (scope: 'live' | 'test' | 'system', id: string) =>
    (await t.database.scoped(scope).query('SELECT id FROM users WHERE id = $1', [id])).rows.length === 1;

  const testRow = insert('test', true);
  await testRow.run();
  assert.equal(await visible('live', testRow.id), false, 'a test row is invisible through the live handle');
  assert.equal(await visible('test', testRow.id), true);
  assert.equal(await visible('system', testRow.id), true, 'the system handle sees every mode');
  const upd = await t.database.scoped('live').query(`UPDATE users SET status = 'suspended' WHERE id = $1`, [testRow.id]);
  assert.equal(upd.rowCount, 0, 'the live handle cannot change a test row');
  const del = await t.database.scoped('live').query('DELETE FROM users WHERE id = $1', [testRow.id]);
  assert.equal(del.rowCount, 0, 'the live handle cannot delete a test row');
  assert.equal(await visible('test', testRow.id), true);

  const liveRow = insert('live', true);
  await assert.rejects(liveRow.run(), (err: any) => err.code === '42501', 'the live handle may not write a test row');
  const leaked = insert('test', false);
  await assert.rejects(leaked.run(), (err: any) => err.code === '42501' && /row-level security/.test(err.message), 'the test handle may not write a live row');
  assert.equal(await visible('system', leaked.id), false);
  assert.equal(await visible('system', liveRow.id), false);
});

test('a query on a root handle inside a transaction throws (pass the transaction handle instead)', async () => {
  const root = t.database.scoped('system');
  const result = await root.transaction(async (tx) => {
    await assert.rejects(async () => root.query('SELECT 1'), /inside a transaction/);
    await assert.rejects(async () => t.database.scoped('live').query('SELECT 1'), /inside a transaction/);
    await assert.rejects(async () => root.exec('SELECT 1'), /inside a transaction/);
    await assert.rejects(async () => root.transaction(async () => 1), /inside a transaction/);
    return (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0].one;
  });
  assert.equal(result, 1, 'the transaction handle keeps working');
  assert.equal((await root.query<{ one: number }>('SELECT 1 AS one')).rows[0].one, 1, 'root handles work again after the transaction');
});

// Four child processes and no storage of its own: run once, in the embedded pass.
if (storageName === 'pglite') test('"The transaction guard runs under npm test and NODE_ENV=development (or PLATFORM_TX_GUARD=1), not in production" (docs/decisions.md, Performance): a root query inside a transaction throws there, and passes in production', async () => {
  const probe = `const g = await import('./src/db/guard.ts'); const owner = {};
    try { await g.runInTransactionContext(owner, async () => g.assertNotInTransaction(owner)); console.log('off'); } catch { console.log('on'); }`;
  const guard = async (env: Record<string, string>) => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', probe], {
      env: { PATH: process.env.PATH ?? '', ...env },
    });
    return stdout.trim();
  };
  assert.deepEqual(
    [await guard({ NODE_ENV: 'test' }), await guard({ NODE_ENV: 'development' }), await guard({ NODE_ENV: 'production', PLATFORM_TX_GUARD: '1' }), await guard({ NODE_ENV: 'production' })],
    ['on', 'on', 'on', 'off'],
  );
});

test('two transactions taking the same two rows in opposite orders both commit: on PostgreSQL the deadlock victim runs again, on PGlite they run one after the other', async () => {
  const db = t.database.scoped('system');
  const ids = [newId('usr'), newId('usr')];
  const now = new Date();
  for (const id of ids) {
    await db.query(`INSERT INTO users (id, email, status, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', false, $3, $3)`, [id, uniqueEmail('dl'), now]);
  }
  // Each locks one row, waits until the other holds its row, then asks for the other's: a deadlock
  // where both run at once (PostgreSQL: however slow the machine, the barrier is met well within 30 s).
  // The victim's second attempt finds the barrier passed, and waits for the other to commit before it
  // takes its first row: the other, woken by the victim's rollback, still has to take the row it waited
  // for, and a retry taking its own row first (a loaded machine slow to schedule the other) would
  // deadlock with it once more (a victim running three times). PGlite runs one transaction at a time:
  // the first waits out the barrier alone (2 s) and commits, then the second.
  let arrived = 0;
  let release!: () => void;
  const barrier = new Promise<void>((r) => (release = r));
  const attempts = [0, 0];
  let deadlocks = 0;
  const runs: Promise<number>[] = [];
  const run = (i: number) =>
    db.transaction(async (tx) => {
      if (++attempts[i] > 1) await runs[1 - i];
      const update = (id: string) =>
        tx.query(`UPDATE users SET updated_at = $2 WHERE id = $1`, [id, new Date()]).catch((err) => {
          if (err.code === '40P01') deadlocks++;
          throw err;
        });
      await update(ids[i]);
      if (++arrived === 2) release();
      await Promise.race([barrier, new Promise((r) => setTimeout(r, t.database.kind === 'pg' ? 30_000 : 2000).unref())]);
      await update(ids[1 - i]);
      return i;
    });
  runs.push(run(0), run(1));
  assert.deepEqual(await Promise.all(runs), [0, 1]);
  const expected = t.database.kind === 'pg' ? [1, 2] : [1, 1];
  assert.deepEqual([...attempts].sort(), expected, t.database.kind === 'pg' ? 'the deadlock victim ran twice, the other once' : 'each ran once, in turn');
  assert.equal(deadlocks, t.database.kind === 'pg' ? 1 : 0, 'PostgreSQL aborted one statement as a deadlock victim');
});

if (TEST_DATABASE_URL) test('a single statement PostgreSQL aborts as a deadlock victim did nothing and runs again, as a transaction does: it succeeds once the other side commits', async () => {
  const db = t.database.scoped('system');
  const [a, b] = [newId('usr'), newId('usr')];
  for (const id of [a, b]) {
    await db.query(`INSERT INTO users (id, email, status, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', false, now(), now())`, [id, uniqueEmail('dl')]);
  }
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    // The holder never finds the deadlock itself: the backend that checks first is the victim, and the
    // statement's check (deadlock_timeout, 1 s after it waits) comes a few ms before the holder's would,
    // a margin a loaded machine, slow to run the statement's backend, can reverse.
    await holder.query(`SET LOCAL deadlock_timeout = '10s'`);
    await holder.query('UPDATE users SET updated_at = now() WHERE id = $1', [b]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    // One statement (as a sign-in's session statement is) locking `a`, then `b`, which the holder has.
    const statement = db.query(
      `WITH first AS (UPDATE users SET updated_at = now() WHERE id = $1 RETURNING id)
       UPDATE users SET updated_at = now() WHERE id = $2 AND EXISTS (SELECT 1 FROM first) RETURNING id`,
      [a, b],
    );
    const outcome = statement.then((r) => r.rows.map((row: any) => row.id), (err) => `failed: ${err.code ?? err}`);
    await blockedBy(watcher, rows[0].pid, 'the statement');
    // The holder asks for the table in a mode the statement's ROW EXCLUSIVE holds off: a cycle, which the
    // statement's backend finds (1 s after it waited) and aborts it. The lock is the holder's as the
    // statement rolls back, so its second run waits for the holder's commit. Asking for the row `a`
    // instead would close the same cycle, but a row the holder waits for is free once the victim rolls
    // back until the holder's backend, woken, takes it: a second run sent first takes it, and deadlocks
    // with the holder again (as the transactions of the test above did on a loaded machine).
    await holder.query('LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE');
    await holder.query('UPDATE users SET updated_at = now() WHERE id = $1', [a]);
    await holder.query('COMMIT');
    assert.deepEqual(await outcome, [b], 'the statement ran again after the deadlock and updated both rows');
  } finally {
    await holder.end();
    await watcher.end();
  }
});

/** Prepared statements whose text contains `fragment`, summed over every connection of the scope's pool (each is held at once). */
async function preparedOnEveryConnection(database: Database, scope: 'live' | 'system', connections: number, fragment: string): Promise<number> {
  let arrived = 0;
  let release!: () => void;
  const everyoneHere = new Promise<void>((resolve) => (release = resolve));
  const counts = await Promise.all(
    Array.from({ length: connections }, () =>
      database.scoped(scope).transaction(async (tx) => {
        const { rows } = await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_prepared_statements WHERE strpos(statement, $1) > 0', [fragment]);
        if (++arrived === connections) release();
        await everyoneHere;
        return rows[0].n;
      }),
    ),
  );
  return counts.reduce((a, b) => a + b, 0);
}

if (TEST_DATABASE_URL) test('a list prepares one statement whatever its limit: GET /v1/audit-events with the limits 1 to 100 leaves at most one prepared statement per connection, not one per limit', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['audit.view'] })).secret;
  for (let limit = 1; limit <= 100; limit++) {
    const res = await t.app.inject({ method: 'GET', url: `/v1/audit-events?actor_type=api_key&limit=${limit}`, headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.statusCode, 200, res.body);
  }
  const prepared = await preparedOnEveryConnection(t.database, 'live', 3, 'FROM audit_events e WHERE');
  assert.ok(prepared >= 1 && prepared <= 3, `${prepared} prepared statements for one list query`);
});

if (TEST_DATABASE_URL) test('a PostgreSQL connection holds a bounded number of prepared statements: beyond the bound, statements of new texts run unnamed and answer the same', async () => {
  const schema = freshSchemaName('prep');
  const database = await openPg({ url: TEST_DATABASE_URL!, schema, poolSize: 1, namedStatements: 5 });
  try {
    for (let i = 0; i < 20; i++) {
      const { rows } = await database.scoped('system').query<{ v: number }>(`SELECT $1::int + ${i} AS v /* bounded */`, [1]);
      assert.equal(rows[0].v, 1 + i);
    }
    assert.equal(await preparedOnEveryConnection(database, 'system', 1, '/* bounded */'), 5);
  } finally {
    await database.close();
    await dropSchema(schema);
  }
});

if (TEST_DATABASE_URL) test('the service\'s PostgreSQL connections run without JIT compilation, in every scope: a statement whose estimate crosses jit_above_cost (a batch job over a large table) is planned and run, not compiled first (the test purge spent 1-4 s compiling a 70 ms statement)', async () => {
  for (const scope of ['system', 'live', 'test'] as const) {
    const { rows } = await t.database.scoped(scope).query<{ jit: string }>('SELECT current_setting($1) AS jit', ['jit']);
    assert.equal(rows[0].jit, 'off', scope);
    const inTx = await t.database.scoped(scope).transaction((tx) => tx.query<{ jit: string }>('SELECT current_setting($1) AS jit', ['jit']));
    assert.equal(inTx.rows[0].jit, 'off', `${scope}, in a transaction`);
  }
});

test('every statement, exec and transaction runs in its handle\'s scope whatever ran before it on the connection: live and test as platform_app with app.test_mode off and on, system as the owner with no mode, all in the database\'s own schema', async () => {
  const scopes = ['system', 'live', 'test'] as const;
  // PostgreSQL: the schema the database was opened with (search_path), not public (tests share a server).
  const schema = t.schema ?? 'public';
  const expected = { system: { app: false, mode: '', schema }, live: { app: true, mode: 'off', schema }, test: { app: true, mode: 'on', schema } };
  const probe = `SELECT current_user = 'platform_app' AS app, coalesce(current_setting('app.test_mode', true), '') AS mode, current_schema() AS schema`;
  const check = (scope: (typeof scopes)[number]) => `DO $$ BEGIN
      IF (current_user = 'platform_app') IS DISTINCT FROM ${expected[scope].app} OR coalesce(current_setting('app.test_mode', true), '') <> '${expected[scope].mode}' OR current_schema() <> '${schema}' THEN
        RAISE EXCEPTION 'exec in the wrong scope: % %', current_user, current_setting('app.test_mode', true);
      END IF;
    END $$`;
  for (const before of scopes) {
    for (const scope of scopes) {
      for (const how of ['query', 'params', 'exec', 'transaction'] as const) {
        await t.database.scoped(before).query('SELECT 1');
        const db = t.database.scoped(scope);
        const what = `${how} on ${scope} after ${before}`;
        if (how === 'exec') {
          await db.exec(check(scope));
          continue;
        }
        const { rows } =
          how === 'query'
            ? await db.query<{ app: boolean; mode: string; schema: string }>(probe)
            : how === 'params'
              ? await db.query<{ app: boolean; mode: string; schema: string }>(`${probe} WHERE $1::int = 1`, [1])
              : await db.transaction((tx) => tx.query<{ app: boolean; mode: string; schema: string }>(probe));
        assert.deepEqual({ ...rows[0] }, expected[scope], what);
      }
    }
  }
});

// Deadlocks and serialization failures need two connections: PostgreSQL only (PGlite runs one statement at a time).
if (TEST_DATABASE_URL) test('decisions "a transaction aborted as a deadlock victim (or a serialization failure) runs again from the start, up to three times in all; so does a single statement": 40001 and 40P01 run again, three runs in all, any other error runs once', async () => {
  const db = t.database.scoped('system');
  const suffix = randomBytes(4).toString('hex');
  const seq = `retry_runs_${suffix}`;
  const fn = `retry_fails_${suffix}`;
  // The sequence counts the runs: nextval is not rolled back with the run that failed.
  await db.exec(`CREATE SEQUENCE ${seq};
    CREATE FUNCTION ${fn}(failures int, code text) RETURNS bigint LANGUAGE plpgsql AS $f$
    DECLARE n bigint := nextval('${seq}');
    BEGIN
      IF n <= failures THEN RAISE EXCEPTION 'conflict in run %', n USING ERRCODE = code; END IF;
      RETURN n;
    END $f$`);
  const runs = async () => (await db.query<{ n: number }>(`SELECT last_value::int AS n FROM ${seq}`)).rows[0].n;
  const restart = () => db.exec(`ALTER SEQUENCE ${seq} RESTART`);
  try {
    for (const code of ['40001', '40P01']) {
      for (const how of ['statement', 'transaction'] as const) {
        const call = (failures: number) =>
          how === 'statement'
            ? db.query<{ n: number }>(`SELECT ${fn}($1, $2)::int AS n`, [failures, code])
            : db.transaction((tx) => tx.query<{ n: number }>(`SELECT ${fn}($1, $2)::int AS n`, [failures, code]));
        await restart();
        assert.equal((await call(2)).rows[0].n, 3, `${how} ${code}: the third run succeeds`);
        await restart();
        await assert.rejects(call(3), (err: any) => err.code === code, `${how} ${code}: the third failure is reported`);
        assert.equal(await runs(), 3, `${how} ${code}: three runs in all`);
      }
    }
    for (const how of ['statement', 'transaction'] as const) {
      await restart();
      const call = how === 'statement' ? db.query(`SELECT ${fn}(5, '23505')`) : db.transaction((tx) => tx.query(`SELECT ${fn}(5, '23505')`));
      await assert.rejects(call, (err: any) => err.code === '23505');
      assert.equal(await runs(), 1, `${how}: a unique violation runs once`);
    }
  } finally {
    await db.exec(`DROP FUNCTION ${fn}(int, text); DROP SEQUENCE ${seq}`);
  }
});

test('asModeWithin runs its function as the mode\'s request (platform_app, app.test_mode) inside a system transaction and returns to the system after it; inSubjectMode switches only the mode and back to the transaction\'s own; nothing outlives the transaction', async () => {
  const probe = `SELECT current_user = 'platform_app' AS app, coalesce(current_setting('app.test_mode', true), '') AS mode`;
  type Seen = { app: boolean; mode: string };
  const seen = async (tx: { query: <R>(text: string) => Promise<{ rows: R[] }> }) => ({ ...(await tx.query<Seen>(probe)).rows[0] });
  const system = { app: false, mode: '' };
  for (const mode of ['live', 'test'] as const) {
    const within = await t.database.scoped('system').transaction(async (tx) => {
      const inside = await asModeWithin(tx, mode, () => seen(tx));
      return { inside, after: await seen(tx) };
    });
    assert.deepEqual(within, { inside: { app: true, mode: mode === 'test' ? 'on' : 'off' }, after: system }, `asModeWithin ${mode}`);
    assert.deepEqual(await seen(t.database.scoped('system')), system, `after asModeWithin ${mode}, the system handle is the system`);
  }
  for (const [own, other] of [['live', 'test'], ['test', 'live']] as const) {
    const subject = await t.database.scoped(own).transaction(async (tx) => {
      const inside = await inSubjectMode(tx, other, () => seen(tx));
      return { inside, after: await seen(tx) };
    });
    const flag = (m: string) => (m === 'test' ? 'on' : 'off');
    assert.deepEqual(subject, { inside: { app: true, mode: flag(other) }, after: { app: true, mode: flag(own) } }, `inSubjectMode ${other} in ${own}`);
    assert.deepEqual(await seen(t.database.scoped(own)), { app: true, mode: flag(own) }, `after inSubjectMode, the ${own} handle is ${own}`);
  }
});
