import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { buildTestApp, dropSchema, openTestDatabase, storageName, testConfig, TEST_DATABASE_URL, type TestApp } from '../helpers/app.js';
import { createApiKey, uniqueEmail } from '../helpers/fixtures.js';
import { SystemClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import { boot } from '../../src/boot.js';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import { openPg } from '../../src/db/pg.js';
import { openPglite } from '../../src/db/pglite.js';
import { asModeWithin, inSubjectMode } from '../../src/db/roles.js';
import { DatabaseBusyError, MAX_WAITING_FOR_CONNECTION, type Database } from '../../src/db/types.js';
import { newId } from '../../src/ids.js';
import { CuttableProxy, freshSchemaName } from './support/ops.js';
import { blockedBy, client } from '../helpers/locks.js';

const ADMIN_PASSWORD = 'granite-orchard-lantern-73';
/**
 * The nodes started at once below open their connections while the rest of the suite loads the
 * machine (both storage passes side by side on two cores): the driver's 3 s to open one ran out there
 * once. These tests are about what the starts do, not how fast a connection opens.
 */
const BOOT_CONNECT_TIMEOUT_MS = 30_000;

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const assertEnvelope = (body: any, code: string) => {
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.details, 'object');
};

type Booted = Awaited<ReturnType<typeof boot>>;

const bootstrapConfig = (email: string) => testConfig({ bootstrapAdminEmail: email, bootstrapAdminPassword: ADMIN_PASSWORD });

async function closeBooted(...booted: Booted[]) {
  for (const b of booted) {
    await b.app.close();
    await b.deps.jobs.stop();
  }
}

/** What a start must leave behind exactly once, however many nodes started. */
async function assertStartedOnce(database: Database, email: string) {
  const sys = database.scoped('system');
  const { rows: versions } = await sys.query<{ version: string; n: number }>(
    'SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version ORDER BY version',
  );
  assert.ok(versions.length > 0, 'versions.length > 0');
  assert.equal(versions[0].version, '0001_foundation');
  for (const v of versions) assert.equal(v.n, 1, `migration ${v.version} applied once`);

  const { rows: users } = await sys.query<{ id: string; status: string; email_verified: boolean; test_mode: boolean }>(
    'SELECT id, status, email_verified, test_mode FROM users WHERE lower(email) = lower($1)',
    [email],
  );
  assert.equal(users.length, 1, 'exactly one bootstrap admin');
  const { rows: audits } = await sys.query<{ actor_type: string; actor_id: string | null }>(
    `SELECT actor_type, actor_id FROM audit_events WHERE action = 'user.created' AND target_user_id = $1`,
    [users[0].id],
  );
  assert.equal(audits.length, 1, 'exactly one user.created audit row');
  assert.equal(audits[0].actor_type, 'system');
  return users[0];
}

test('migrations are applied once: the first run applies 0001_foundation, a second run applies nothing', async () => {
  const { database, drop } = await openTestDatabase();
  try {
    const first = await migrate(database);
    assert.equal(first[0], '0001_foundation');
    assert.deepEqual(await migrate(database), []);
    const { rows } = await database.scoped('system').query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(
      rows.map((r) => r.version),
      first,
    );
  } finally {
    await database.close();
    await drop();
  }
});

test('a migration that fails stops the start loudly, naming the migration and the database\'s reason, and applies nothing: the next run starts from scratch', async () => {
  const { database, drop } = await openTestDatabase();
  try {
    const [first] = loadMigrations();
    const broken = { version: '9998_broken', sql: 'CREATE TABLE broken_probe (id text PRIMARY KEY,);' };
    await assert.rejects(migrate(database, [first!, broken]), (err: Error) => {
      assert.match(err.message, /^migration 9998_broken failed: syntax error/);
      assert.ok(err.cause, 'the database error is kept as its cause');
      return true;
    });
    // One transaction: 0001 and the bookkeeping were rolled back with it.
    const { rows } = await database.scoped('system').query<{ name: string | null }>(`SELECT to_regclass('schema_migrations')::text AS name`);
    assert.equal(rows[0]!.name, null, 'no schema_migrations table is left behind');
    assert.deepEqual(await migrate(database, [first!]), [first!.version]);
  } finally {
    await database.close();
    await drop();
  }
});

if (TEST_DATABASE_URL) {
  test('"several processes starting at once apply each migration exactly once" (the advisory lock): two migrate calls at once on a fresh schema, one applies every migration, the other waits and applies none', async () => {
    const schema = freshSchemaName('migrate');
    const one = await openPg({ url: TEST_DATABASE_URL!, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
    const two = await openPg({ url: TEST_DATABASE_URL!, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
    try {
      const all = loadMigrations().map((m) => m.version);
      const results = await Promise.all([migrate(one), migrate(two)]);
      assert.deepEqual([...results].sort((a, b) => b.length - a.length), [all, []]);
      const { rows } = await one.scoped('system').query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY version');
      assert.deepEqual(rows.map((r) => r.version), all);
    } finally {
      await one.close();
      await two.close();
      await dropSchema(schema);
    }
  });
}

test('several nodes starting at once on one database apply each migration once and create one bootstrap admin audited with actor system', async (tc) => {
  const email = uniqueEmail('admin');
  const config = bootstrapConfig(email);
  if (!TEST_DATABASE_URL) {
    tc.diagnostic('embedded PGlite is a single in-process database: starting twice in sequence on it (concurrent starts run on PostgreSQL)');
    const { database, drop } = await openTestDatabase();
    try {
      const a = await boot({ config, database, clock: new SystemClock(), logger: false });
      const b = await boot({ config, database, clock: new SystemClock(), logger: false });
      await closeBooted(a, b);
      await assertStartedOnce(database, email);
    } finally {
      await database.close();
      await drop();
    }
    return;
  }
  const schema = freshSchemaName('boot');
  const one = await openPg({ url: TEST_DATABASE_URL, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
  const two = await openPg({ url: TEST_DATABASE_URL, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
  try {
    const booted = await Promise.all([
      boot({ config, database: one, clock: new SystemClock(), logger: false }),
      boot({ config, database: two, clock: new SystemClock(), logger: false }),
    ]);
    await closeBooted(...booted);
    await assertStartedOnce(one, email);
  } finally {
    await one.close();
    await two.close();
    await dropSchema(schema);
  }
});

test(
  'several starts, at once and one after another, leave exactly one unretired signing key',
  async () => {
    const config = testConfig();
    const unretired = async (database: Database) =>
      (await database.scoped('system').query<{ kid: string }>('SELECT kid FROM signing_keys WHERE retired_at IS NULL')).rows;
    if (!TEST_DATABASE_URL) {
      const { database } = await openTestDatabase();
      try {
        await closeBooted(await boot({ config, database, clock: new SystemClock(), logger: false }));
        const first = await unretired(database);
        assert.equal(first.length, 1, 'exactly one unretired signing key after a start');
        await closeBooted(await boot({ config, database, clock: new SystemClock(), logger: false }));
        assert.deepEqual(await unretired(database), first, 'a restart keeps the signing key');
      } finally {
        await database.close();
      }
      return;
    }
    const schema = freshSchemaName('keys');
    const one = await openPg({ url: TEST_DATABASE_URL, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
    const two = await openPg({ url: TEST_DATABASE_URL, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
    try {
      const booted = await Promise.all([
        boot({ config, database: one, clock: new SystemClock(), logger: false }),
        boot({ config, database: two, clock: new SystemClock(), logger: false }),
      ]);
      await closeBooted(...booted);
      const first = await unretired(one);
      assert.equal(first.length, 1, 'exactly one unretired signing key after two nodes started at once');
      await closeBooted(await boot({ config, database: one, clock: new SystemClock(), logger: false }));
      assert.deepEqual(await unretired(one), first, 'a restart keeps the signing key');
    } finally {
      await one.close();
      await two.close();
      await dropSchema(schema);
    }
  },
);

test('bootstrap admin is idempotent across restarts: one active, email_verified superadmin who can sign in, audited with actor system', async () => {
  const email = uniqueEmail('admin');
  const config = bootstrapConfig(email);
  const { database, drop } = await openTestDatabase();
  try {
    const first = await boot({ config, database, clock: new SystemClock(), logger: false });
    await closeBooted(first);
    const second = await boot({ config, database, clock: new SystemClock(), logger: false });
    try {
      const user = await assertStartedOnce(database, email);
      assert.equal(user.status, 'active');
      assert.equal(user.email_verified, true);
      assert.equal(user.test_mode, false, 'a live user');
      const { rows: roles } = await database.scoped('system').query<{ role_id: string }>('SELECT role_id FROM role_assignments WHERE user_id = $1', [user.id]);
      assert.ok(roles.some((r) => r.role_id === 'role_platform_superadmin'), 'holds the seed Role superadmin');

      await second.app.ready();
      const res = await second.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password: ADMIN_PASSWORD } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().user_id, user.id);
      assert.equal(typeof res.json().access_token, 'string');
    } finally {
      await closeBooted(second);
    }
  } finally {
    await database.close();
    await drop();
  }
});

test('BOOTSTRAP_ADMIN_PASSWORD is held to the Part A password policy: a start with a weak one (too_short, breached, matches_email) fails with 422 weak_password and creates no user', async () => {
  const email = uniqueEmail('weakadmin');
  const { database, drop } = await openTestDatabase();
  try {
    for (const [password, reason] of [['short-pw-11', 'too_short'], ['password1234', 'breached'], [email.toUpperCase(), 'matches_email']]) {
      const config = testConfig({ bootstrapAdminEmail: email, bootstrapAdminPassword: password });
      await assert.rejects(boot({ config, database, clock: new SystemClock(), logger: false, compileSchemas: 'on-first-use' }), (err: any) => {
        assert.equal(err.code, 'weak_password');
        assert.equal(err.status, 422);
        assert.deepEqual(err.details, { reason });
        return true;
      }, reason);
    }
    const { rows } = await database.scoped('system').query('SELECT id FROM users WHERE lower(email) = lower($1)', [email]);
    assert.deepEqual(rows, [], 'no user was created');
  } finally {
    await database.close();
    await drop();
  }
});

if (TEST_DATABASE_URL) test('README "or an operator creates it once (CREATE ROLE platform_app NOLOGIN; GRANT platform_app TO <user>)": a DATABASE_URL user without CREATEROLE starts the service on an empty database, migrates, and its bootstrap admin signs in', async () => {
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL! });
  await admin.connect();
  const user = freshSchemaName('owner');
  const password = randomBytes(12).toString('hex');
  const schema = freshSchemaName('nocreaterole');
  let database: Database | null = null;
  try {
    // The operator's part, once: the role exists and is granted; the service's user may not create roles.
    await admin.query(`CREATE ROLE ${user} LOGIN NOCREATEROLE NOSUPERUSER PASSWORD '${password}'`);
    await admin.query(`DO $$ BEGIN CREATE ROLE platform_app NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await admin.query(`GRANT platform_app TO ${user}`);
    await admin.query(`GRANT CREATE ON DATABASE ${pg.escapeIdentifier((await admin.query('SELECT current_database() AS d')).rows[0].d)} TO ${user}`);
    const url = new URL(TEST_DATABASE_URL!);
    url.username = user;
    url.password = password;
    database = await openPg({ url: url.toString(), schema, poolSize: 2 });
    const email = uniqueEmail('admin');
    const booted = await boot({ config: bootstrapConfig(email), database, clock: new SystemClock(), logger: false });
    try {
      await booted.app.ready();
      const res = await booted.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password: ADMIN_PASSWORD } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal((await booted.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
    } finally {
      await closeBooted(booted);
    }
  } finally {
    await database?.close();
    await dropSchema(schema);
    await admin.query(`DROP OWNED BY ${user}`).catch(() => undefined);
    await admin.query(`DROP ROLE IF EXISTS ${user}`);
    await admin.end();
  }
});

test('README "The database user needs to create the role platform_app (superuser or CREATEROLE)": a user with CREATEROLE but not superuser starts the service on an empty database, migrates, serves requests as platform_app, and its bootstrap admin signs in (PostgreSQL 16 on: the role it creates is not one it may SET ROLE to until granted)', async () => {
  const email = uniqueEmail('admin');
  const user = freshSchemaName('creator');
  const password = randomBytes(12).toString('hex');
  let database: Database;
  let cleanUp: () => Promise<void>;
  if (!TEST_DATABASE_URL) {
    // The embedded engine (PostgreSQL 16 or newer) as a CREATEROLE user: the system connection resets
    // to the session user, which is then that user, not the superuser.
    const opened = await openTestDatabase();
    database = opened.database;
    await database.scoped('system').exec(`CREATE ROLE ${user} LOGIN CREATEROLE NOSUPERUSER; GRANT CREATE ON SCHEMA public TO ${user}; SET SESSION AUTHORIZATION ${user}`);
    cleanUp = async () => {
      await database.close();
      await opened.drop();
    };
  } else {
    const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await admin.connect();
    const schema = freshSchemaName('createrole');
    await admin.query(`CREATE ROLE ${user} LOGIN CREATEROLE NOSUPERUSER PASSWORD '${password}'`);
    await admin.query(`GRANT CREATE ON DATABASE ${pg.escapeIdentifier((await admin.query('SELECT current_database() AS d')).rows[0].d)} TO ${user}`);
    const url = new URL(TEST_DATABASE_URL);
    url.username = user;
    url.password = password;
    database = await openPg({ url: url.toString(), schema, poolSize: 2 });
    cleanUp = async () => {
      await database.close();
      await dropSchema(schema);
      await admin.query(`DROP OWNED BY ${user}`).catch(() => undefined);
      await admin.query(`DROP ROLE IF EXISTS ${user}`);
      await admin.end();
    };
  }
  try {
    const booted = await boot({ config: bootstrapConfig(email), database, clock: new SystemClock(), logger: false });
    try {
      await booted.app.ready();
      const res = await booted.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password: ADMIN_PASSWORD } });
      assert.equal(res.statusCode, 200, res.body);
      const me = await booted.app.inject({ method: 'GET', url: '/v1/users/me', headers: { authorization: `Bearer ${res.json().access_token}` } });
      assert.equal(me.statusCode, 200, me.body);
    } finally {
      await closeBooted(booted);
    }
  } finally {
    await cleanUp();
  }
});

test('embedded storage: data survives a restart on the same DATA_DIR', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'platform-data-'));
  const email = uniqueEmail('admin');
  try {
    let database = await openPglite(join(dir, 'pglite'));
    let userId: string;
    try {
      const first = await boot({ config: bootstrapConfig(email), database, clock: new SystemClock(), logger: false });
      await closeBooted(first);
      const { rows } = await database.scoped('system').query<{ id: string }>('SELECT id FROM users WHERE email = $1', [email]);
      assert.equal(rows.length, 1);
      userId = rows[0].id;
    } finally {
      await database.close();
    }

    database = await openPglite(join(dir, 'pglite'));
    try {
      const again = await boot({ config: testConfig(), database, clock: new SystemClock(), logger: false });
      try {
        const { rows } = await database.scoped('system').query<{ id: string }>('SELECT id FROM users WHERE email = $1', [email]);
        assert.deepEqual(
          rows.map((r) => r.id),
          [userId],
        );
        await again.app.ready();
        const res = await again.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password: ADMIN_PASSWORD } });
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().user_id, userId);
      } finally {
        await closeBooted(again);
      }
    } finally {
      await database.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

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

test('GET /health answers 200 {status: "ok"} without a credential', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/health' });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), { status: 'ok' });
});

/**
 * `count` transactions of the system scope that hold their connections until release() is called;
 * `inside` resolves once every one of them runs (a holder still waiting for its connection, say a slow
 * connect on a loaded machine, would take one of the places the test counts).
 */
function connectionHolders(count: number, holding: number) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  let entered = 0;
  let allInside!: () => void;
  const inside = new Promise<void>((resolve) => {
    allInside = resolve;
  });
  const db = t.database.scoped('system');
  const done = Array.from({ length: count }, () =>
    db.transaction(async () => {
      if (++entered === holding) allInside();
      await gate;
    }),
  );
  return { inside, release, done: () => Promise.all(done) };
}

test('LD-6 beyond 256 statements waiting for a database connection, requests are refused at once with 503 service_unavailable and Retry-After, and served again once the load is gone', async () => {
  const db = t.database.scoped('system');
  const connections = t.database.kind === 'pg' ? 3 : 1;
  // Ten transactions hold every connection (the test pool has 3, the embedded store 1) until released;
  // the others wait for one.
  const holders = connectionHolders(10, connections);
  await holders.inside;
  // Then more statements than may wait: the queue is full and nothing leaves it while the gate holds.
  const fillers = Array.from({ length: MAX_WAITING_FOR_CONNECTION + 10 }, () =>
    db.query('SELECT 1').then(
      () => 'served',
      (err) => (err instanceof DatabaseBusyError ? 'refused' : `failed: ${err}`),
    ),
  );
  try {
    const res = await Promise.race([
      t.app.inject({ method: 'GET', url: '/health' }),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('/health waited for a connection instead of being refused')), 20_000).unref()),
    ]);
    assert.equal(res.statusCode, 503, res.body);
    assertEnvelope(res.json(), 'service_unavailable');
    assert.equal(res.headers['retry-after'], '1');
  } finally {
    holders.release();
  }
  await holders.done();
  const outcomes = await Promise.all(fillers);
  const refused = outcomes.filter((o) => o === 'refused').length;
  assert.deepEqual(outcomes.filter((o) => o !== 'served' && o !== 'refused'), []);
  // The holders beyond the pool's size wait too, so at least the last 10 fillers find the queue full.
  assert.ok(refused >= 10 && refused <= 20, `${refused} of ${fillers.length} statements refused`);
  assert.equal((await t.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
});

test('LD-6 "at most 256 statements or transactions wait" (docs/decisions.md): with every connection held, 256 waiting statements are all served once it frees, the 257th is refused at once with DatabaseBusyError', async () => {
  const db = t.database.scoped('system');
  // As many transactions as the scope has connections (the test pool has 3, the embedded store 1).
  const connections = t.database.kind === 'pg' ? 3 : 1;
  const holders = connectionHolders(connections, connections);
  await holders.inside;
  const outcome = (p: Promise<unknown>) => p.then(() => 'served', (err) => (err instanceof DatabaseBusyError ? 'refused' : `failed: ${err}`));
  // The documented 256 (README, Running past one machine; docs/decisions.md), not the constant.
  const waiting = Array.from({ length: 256 }, () => outcome(db.query('SELECT 1')));
  let beyond: string | null = null;
  const extra = outcome(db.query('SELECT 1')).then((o) => (beyond = o));
  await new Promise((resolve) => setImmediate(resolve));
  try {
    assert.equal(beyond, 'refused', 'the 257th is refused at once, while the connection is still held');
  } finally {
    holders.release();
  }
  await holders.done();
  await extra;
  const outcomes = await Promise.all(waiting);
  assert.deepEqual(outcomes.filter((o) => o !== 'served'), [], 'all 256 waiting statements were served');
});

/** Cuts the database under a running app: /health answers 503, and (PostgreSQL) 200 again once it is back. */
async function healthWhenDatabaseDown(tc: TestContext, overrides: Partial<Config> = {}) {
  if (!TEST_DATABASE_URL) {
    tc.diagnostic('embedded PGlite: the database is closed under a running app (it cannot come back without a restart)');
    const { database } = await openTestDatabase();
    const booted = await boot({ config: testConfig(overrides), database, clock: new SystemClock(), logger: false });
    try {
      await booted.app.ready();
      assert.equal((await booted.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
      await database.close();
      for (let i = 0; i < 2; i++) {
        const res = await booted.app.inject({ method: 'GET', url: '/health' });
        assert.equal(res.statusCode, 503);
        assertEnvelope(res.json(), 'service_unavailable');
        // docs/conventions.md: Retry-After on every 429 and 503; docs/decisions.md: 5 seconds for an unreachable database.
        assert.equal(res.headers['retry-after'], '5', 'a 503 sets Retry-After');
      }
      const other = await booted.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'a@example.com', password: 'x' } });
      assert.ok(other.statusCode >= 500, String(other.statusCode));
      assert.equal(typeof other.json().error.code, 'string', 'still the error envelope');
    } finally {
      await closeBooted(booted);
    }
    return;
  }

  const target = new URL(TEST_DATABASE_URL);
  const proxy = new CuttableProxy(target.hostname, Number(target.port || 5432));
  await proxy.open();
  const schema = freshSchemaName('health');
  const database = await openPg({ url: proxy.urlFor(TEST_DATABASE_URL), schema, poolSize: 2 });
  let booted: Booted | null = null;
  try {
    booted = await boot({ config: testConfig(overrides), database, clock: new SystemClock(), logger: false });
    const { app } = booted;
    await app.ready();
    assert.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200);

    await proxy.cut();
    for (let i = 0; i < 2; i++) {
      const res = await app.inject({ method: 'GET', url: '/health' });
      assert.equal(res.statusCode, 503, res.body);
      assertEnvelope(res.json(), 'service_unavailable');
      // docs/conventions.md: Retry-After on every 429 and 503; docs/decisions.md: 5 seconds for an unreachable database.
      assert.equal(res.headers['retry-after'], '5', 'a 503 sets Retry-After');
    }
    const other = await app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'a@example.com', password: 'x' } });
    assert.ok(other.statusCode >= 500, String(other.statusCode));
    assert.equal(typeof other.json().error.code, 'string', 'still the error envelope');

    await proxy.open();
    const back = await app.inject({ method: 'GET', url: '/health' });
    assert.equal(back.statusCode, 200, `recovers without a restart: ${back.body}`);
    assert.deepEqual(back.json(), { status: 'ok' });
  } finally {
    if (booted) await closeBooted(booted);
    await proxy.cut();
    await database.close();
    await dropSchema(schema);
  }
}

test('GET /health fails with 503 in the error envelope when the database is unreachable, and never crashes', (tc) => healthWhenDatabaseDown(tc));

test('GET /health fails with 503 when the database is unreachable, also with DEV_CLOCK=1', (tc) =>
  healthWhenDatabaseDown(tc, { devClock: true }),
);

// A server that stops answering without closing its connections (its host gone in a failover or a
// network partition) leaves the pool's open connections waiting for TCP to give up, some 15 minutes.
// PostgreSQL only: the embedded database lives in the process.
if (storageName === 'postgres') {
  test('GET /health fails with 503 within seconds, never hangs, when PostgreSQL stops answering on its open connections; 200 again once it answers', async () => {
    const target = new URL(TEST_DATABASE_URL!);
    const proxy = new CuttableProxy(target.hostname, Number(target.port || 5432));
    await proxy.open();
    const schema = freshSchemaName('stall');
    const database = await openPg({ url: proxy.urlFor(TEST_DATABASE_URL!), schema, poolSize: 2 });
    let booted: Booted | null = null;
    try {
      booted = await boot({ config: testConfig(), database, clock: new SystemClock(), logger: false });
      const { app } = booted;
      await app.ready();
      assert.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200);

      proxy.stall();
      // The answer comes at the ping's deadline (3 s, a connection's 3 s more at most; seconds more on
      // a loaded machine); unbounded, it came when TCP gave up, some 15 minutes. 60 s is far from both.
      for (let i = 0; i < 2; i++) {
        const started = Date.now();
        const res = await Promise.race([
          app.inject({ method: 'GET', url: '/health' }),
          new Promise<null>((resolve) => setTimeout(() => resolve(null), 60_000).unref()),
        ]);
        assert.ok(res, `GET /health answered within 60 s (${Date.now() - started} ms)`);
        assert.equal(res.statusCode, 503, res.body);
        assertEnvelope(res.json(), 'service_unavailable');
      }

      proxy.resume();
      const back = await app.inject({ method: 'GET', url: '/health' });
      assert.equal(back.statusCode, 200, `recovers without a restart: ${back.body}`);
    } finally {
      proxy.resume();
      await proxy.cut();
      if (booted) await closeBooted(booted).catch(() => undefined);
      await database.close().catch(() => undefined);
      await dropSchema(schema);
    }
  });
}

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

test('embedded storage: <DATA_DIR>/pglite.lock holds the opener\'s pid and goes on close; a lock of a live process refuses the open naming both; a stale lock (its process gone) or one naming this process is taken over', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'platform-lock-'));
  const dataDir = join(dir, 'pglite');
  const lock = `${dataDir}.lock`;
  const { readFile, writeFile } = await import('node:fs/promises');
  const { existsSync } = await import('node:fs');
  const { spawn } = await import('node:child_process');
  const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  try {
    await writeFile(lock, String(other.pid));
    await assert.rejects(openPglite(dataDir), (err: any) => {
      assert.equal(
        err.message,
        `the embedded database ${dataDir} is open in process ${other.pid}: stop that process first (several processes share one database through DATABASE_URL); if no such process uses it, delete ${lock}`,
      );
      return true;
    });
    assert.equal(await readFile(lock, 'utf8'), String(other.pid), 'the live holder keeps its lock');
    other.kill();
    await new Promise((resolve) => other.once('exit', resolve));
    const database = await openPglite(dataDir);
    try {
      assert.equal(await readFile(lock, 'utf8'), String(process.pid), 'the stale lock is taken over');
    } finally {
      await database.close();
    }
    assert.equal(existsSync(lock), false, 'close removes the lock');
    // A lock naming this very process (a container restarted with the same pid, 1) is not another holder.
    await writeFile(lock, String(process.pid));
    const again = await openPglite(dataDir);
    await again.close();
  } finally {
    other.kill();
    await rm(dir, { recursive: true, force: true });
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

// A server ending one connection of a pool: PostgreSQL only.
if (TEST_DATABASE_URL) test('a transaction whose PostgreSQL connection is lost (the server ends it) fails with the driver\'s error and its connection goes: the statements after it are served, none of them on the dead connection', async () => {
  const db = t.database.scoped('system');
  const killer = await client(t);
  try {
    let lostPid = 0;
    await assert.rejects(
      db.transaction(async (tx) => {
        lostPid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
        await killer.query('SELECT pg_terminate_backend($1)', [lostPid]);
        await tx.query('SELECT 1');
      }),
    );
    for (let i = 0; i < 5; i++) {
      const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      assert.notEqual(rows[0].pid, lostPid, 'a statement after the loss runs on a live connection');
    }
  } finally {
    await killer.end();
  }
});
