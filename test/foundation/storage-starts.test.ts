// Storage: migrations and starts: several nodes starting at once on one database, the bootstrap admin,
// the platform_app role a start creates or finds, and the embedded DATA_DIR (a restart, its lock). The
// pool and /health are in storage-connections.test.ts; transactions and scopes in storage-transactions.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { dropSchema, openTestDatabase, testConfig, TEST_DATABASE_URL } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import { SystemClock } from '../../src/clock.js';
import { boot } from '../../src/boot.js';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import { openPg } from '../../src/db/pg.js';
import { openPglite } from '../../src/db/pglite.js';
import type { Database } from '../../src/db/types.js';
import { closeBooted, freshSchemaName } from './support/ops.js';

const ADMIN_PASSWORD = 'granite-orchard-lantern-73';
/**
 * The nodes started at once below open their connections while the rest of the suite loads the
 * machine (both storage passes side by side on two cores): the driver's 3 s to open one ran out there
 * once. These tests are about what the starts do, not how fast a connection opens.
 */
const BOOT_CONNECT_TIMEOUT_MS = 30_000;

const bootstrapConfig = (email: string) => testConfig({ bootstrapAdminEmail: email, bootstrapAdminPassword: ADMIN_PASSWORD });

/** Two nodes' connections to one fresh schema of TEST_DATABASE_URL, closed and dropped after `fn`. */
async function withTwoNodes(name: string, fn: (one: Database, two: Database) => Promise<void>): Promise<void> {
  const schema = freshSchemaName(name);
  const one = await openPg({ url: TEST_DATABASE_URL!, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
  const two = await openPg({ url: TEST_DATABASE_URL!, schema, poolSize: 2, connectTimeoutMs: BOOT_CONNECT_TIMEOUT_MS });
  try {
    await fn(one, two);
  } finally {
    await one.close();
    await two.close();
    await dropSchema(schema);
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
    await withTwoNodes('migrate', async (one, two) => {
      const all = loadMigrations().map((m) => m.version);
      const results = await Promise.all([migrate(one), migrate(two)]);
      assert.deepEqual([...results].sort((a, b) => b.length - a.length), [all, []]);
      const { rows } = await one.scoped('system').query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY version');
      assert.deepEqual(rows.map((r) => r.version), all);
    });
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
  await withTwoNodes('boot', async (one, two) => {
    const booted = await Promise.all([
      boot({ config, database: one, clock: new SystemClock(), logger: false }),
      boot({ config, database: two, clock: new SystemClock(), logger: false }),
    ]);
    await closeBooted(...booted);
    await assertStartedOnce(one, email);
  });
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
    await withTwoNodes('keys', async (one, two) => {
      const booted = await Promise.all([
        boot({ config, database: one, clock: new SystemClock(), logger: false }),
        boot({ config, database: two, clock: new SystemClock(), logger: false }),
      ]);
      await closeBooted(...booted);
      const first = await unretired(one);
      assert.equal(first.length, 1, 'exactly one unretired signing key after two nodes started at once');
      await closeBooted(await boot({ config, database: one, clock: new SystemClock(), logger: false }));
      assert.deepEqual(await unretired(one), first, 'a restart keeps the signing key');
    });
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
