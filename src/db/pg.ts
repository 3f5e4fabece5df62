import { createHash } from 'node:crypto';
import pg from 'pg';
import { DatabaseBusyError, isRetryableConflict, MAX_WAITING_FOR_CONNECTION, TRANSACTION_ATTEMPTS, type Database, type Db, type QueryResult, type Scope, type Tx } from './types.js';
import { APP_ROLE } from './roles.js';
import { assertNotInTransaction, runInTransactionContext } from './guard.js';

export interface PgOptions {
  url: string;
  /** Schema to use instead of public (tests isolate themselves this way). */
  schema?: string;
  poolSize?: number;
  /** How long opening a connection, or waiting for one of the pool, may take (3 s by default). */
  connectTimeoutMs?: number;
  /** Distinct statement texts prepared under a name (NAMED_STATEMENTS_MAX). */
  namedStatements?: number;
}


// Arrays of timestamps and int8 come back as JS values in both drivers.
pg.types.setTypeParser(20, (v) => Number(v));

// Parameterized statements are prepared once per connection under a name derived from their text,
// so the server parses and plans each hot query once instead of on every call. A prepared statement
// stays on its connection (in the server's memory, tens of KB for a list query's plan) until the
// connection closes, which a busy pool never does; list queries are written from the filters a
// request names, so their texts are many. The first NAMED_STATEMENTS_MAX distinct texts are named
// (the service's own statements are far fewer); any later one runs unnamed, parsed on each call, so a
// connection holds a bounded number of them however many filter combinations clients send.
export const NAMED_STATEMENTS_MAX = 1000;

function statementNamer(max: number) {
  const names = new Map<string, string>();
  return (text: string, params: unknown[] | undefined): pg.QueryConfig => {
    if (!params || params.length === 0) return { text };
    let name = names.get(text);
    if (!name) {
      if (names.size >= max) return { text, values: params as any[] };
      name = `s_${createHash('sha1').update(text).digest('base64url').slice(0, 20)}`;
      names.set(text, name);
    }
    return { name, text, values: params as any[] };
  };
}

/**
 * How long the reachability check (GET /health) waits for the server's answer, as long as it may wait
 * for a connection: a server that stopped answering without closing its connections (its host gone in
 * a failover or a partition) is unreachable, not a wait of the 15 minutes TCP takes to give up.
 */
const PING_TIMEOUT_MS = 3000;

/** A PostgreSQL server. One pool per scope; mode pools connect as the app role with the mode set. */
export async function openPg(options: PgOptions): Promise<Database> {
  if (options.schema) await createSchema(options.url, options.schema);
  const statement = statementNamer(options.namedStatements ?? NAMED_STATEMENTS_MAX);
  const pools = new Map<Scope, pg.Pool>();
  const poolFor = (scope: Scope): pg.Pool => {
    let pool = pools.get(scope);
    if (!pool) {
      pool = createPool(options, scope);
      pools.set(scope, pool);
    }
    return pool;
  };

  /** The scope's pool, unless too many statements already wait for one of its connections. */
  const admit = (scope: Scope): pg.Pool => {
    const pool = poolFor(scope);
    if (pool.waitingCount >= MAX_WAITING_FOR_CONNECTION) throw new DatabaseBusyError();
    return pool;
  };

  const scoped = (scope: Scope): Db => ({
    scope,
    inTransaction: false,
    query: async <R>(text: string, params?: unknown[]) => {
      assertNotInTransaction(database);
      return normalize<R>(await retried(() => admit(scope).query(statement(text, params))));
    },
    exec: async (text: string) => {
      assertNotInTransaction(database);
      await admit(scope).query(text);
    },
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => retried(() => once(scope, fn)),
  });

  const once = async <T>(scope: Scope, fn: (tx: Tx) => Promise<T>): Promise<T> => {
    assertNotInTransaction(database);
    const client = await admit(scope).connect();
    return runTransaction(database, client, scope, statement, fn);
  };

  const database: Database = {
    kind: 'pg',
    scoped,
    ping: async () => pingServer(admit('system')),
    close: async () => {
      await Promise.all([...pools.values()].map((p) => p.end()));
      pools.clear();
    },
  };
  return database;
}

async function createSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${pg.escapeIdentifier(schema)}`);
  } finally {
    await client.end();
  }
}

function createPool(options: PgOptions, scope: Scope): pg.Pool {
  // No JIT: the service's statements are short, and one whose estimate crosses jit_above_cost (a
  // batch job's over a large table) spent seconds compiling what runs in milliseconds (the test
  // purge: 1-4 s for a 70 ms statement; docs/conventions.md, Queries at scale).
  const settings: string[] = ['-c jit=off'];
  if (options.schema) settings.push(`-c search_path=${options.schema}`);
  if (scope !== 'system') settings.push(`-c role=${APP_ROLE}`, `-c app.test_mode=${scope === 'test' ? 'on' : 'off'}`);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 3000,
    idleTimeoutMillis: 10_000,
    options: settings.join(' '),
  });
  // An idle client losing its server must not crash the process; the next query reports it.
  pool.on('error', () => undefined);
  return pool;
}

const normalize = <R>(r: pg.QueryResult): QueryResult<R> => ({ rows: r.rows as R[], rowCount: r.rowCount ?? 0 });

/**
 * A transaction, or a single statement with parameters (its own transaction), that PostgreSQL
 * aborted as a deadlock victim (or a serialization failure) did nothing; it runs again from the
 * start. Nothing leaves the process inside a transaction (transactional outbox), so running it
 * twice has no outside effect.
 */
async function retried<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (attempt >= TRANSACTION_ATTEMPTS || !isRetryableConflict(err)) throw err;
    }
  }
}

/** Runs `fn` in one transaction on a checked-out client, and releases the client after. */
async function runTransaction<T>(
  database: Database,
  client: pg.PoolClient,
  scope: Scope,
  statement: ReturnType<typeof statementNamer>,
  fn: (tx: Tx) => Promise<T>,
): Promise<T> {
  // The pool listens for errors only on idle clients: losing the server while this one is checked
  // out (database stopped, network cut) must fail the transaction, not crash the process.
  let lost = false;
  const onLost = () => {
    lost = true;
  };
  client.on('error', onLost);
  const tx: Tx = {
    scope,
    inTransaction: true,
    query: async <R>(text: string, params?: unknown[]) => normalize<R>(await client.query(statement(text, params))),
    exec: async (text: string) => {
      await client.query(text);
    },
    transaction: (inner) => inner(tx),
  };
  let broken = false;
  try {
    await client.query('BEGIN');
    const result = await runInTransactionContext(database, () => fn(tx));
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {
      broken = true;
    });
    throw err;
  } finally {
    client.removeListener('error', onLost);
    // A client released as broken is ended by the pool, and the server's FATAL may still arrive
    // after this listener is gone: every client keeps one listener that ignores it (else crash).
    quiet(client);
    client.release(broken || lost);
  }
}

const quieted = new WeakSet<pg.PoolClient>();

/** Gives a pooled client, once, the listener that ignores its late errors (see runTransaction). */
function quiet(client: pg.PoolClient): void {
  if (quieted.has(client)) return;
  quieted.add(client);
  client.on('error', () => undefined);
}

async function pingServer(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  quiet(client);
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.query('SELECT 1'),
      new Promise((_resolve, reject) => {
        timer = setTimeout(() => reject(new Error(`the database did not answer within ${PING_TIMEOUT_MS} ms`)), PING_TIMEOUT_MS);
      }),
    ]);
    client.release();
  } catch (err) {
    // A connection that did not answer goes, instead of back to the pool, where the next
    // statement would wait on it as well.
    client.release(err as Error);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
