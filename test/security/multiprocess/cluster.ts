// Multi-process harness for the [MP] security tests: a fresh database on the PostgreSQL server of
// TEST_DATABASE_URL and real server processes of src/main.ts sharing it (server-process.ts), reached
// over real HTTP (http.ts). Any process can be SIGKILLed and restarted on the same port.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { freePort } from './http.js';
import { pidAlive, serverEnv, ServerProcess, type ExitRecord } from './server-process.js';

export { freePort, httpCall, sleep, type CallOptions, type Reply } from './http.js';
export { ROOT, serverEnv, ServerProcess, socketPorts, type ExitRecord } from './server-process.js';

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL || null;
/**
 * The PostgreSQL server of the [MP] tests. They never skip: `npm test` runs them in its PostgreSQL pass
 * only, and run by hand without TEST_DATABASE_URL they fail with this message.
 */
export function serverDatabaseUrl(): string {
  if (!TEST_DATABASE_URL) throw new Error('[MP] needs TEST_DATABASE_URL (the embedded store cannot host two processes); npm test runs these files in its PostgreSQL pass');
  return TEST_DATABASE_URL;
}

// ---- databases -------------------------------------------------------------------------------------

/**
 * CREATE DATABASE mp_<pid>_<random> on the server of `serverUrl`; returns its URL and a dropper.
 * Databases left by test processes of this machine that were killed (a per-file timeout) and that
 * nobody is connected to are dropped first.
 */
export async function freshDatabase(serverUrl: string, label = 'mp'): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  const name = `${label}_${process.pid}_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ datname: string }>(
      `SELECT datname FROM pg_database d WHERE datname ~ $1 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`,
      [`^${label}_[0-9]+_[0-9a-f]{10}$`],
    );
    for (const { datname } of rows) {
      if (!pidAlive(Number(datname.split('_')[1]))) await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(datname)}`).catch(() => undefined);
    }
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } finally {
    await admin.end();
  }
  const u = new URL(serverUrl);
  u.pathname = `/${name}`;
  const drop = async () => {
    const c = new pg.Client({ connectionString: serverUrl });
    await c.connect();
    try {
      await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    } finally {
      await c.end();
    }
  };
  return { url: u.toString(), name, drop };
}

// ---- the cluster -----------------------------------------------------------------------------------

export interface ClusterOptions {
  /** Number of server processes (default 2). */
  nodes?: number;
  /** WORKERS of every process (default false: API-only, so only the test's traffic uses CPU). */
  workers?: boolean;
  /** Extra environment for every process. */
  env?: Record<string, string>;
}

// ---- one cluster at a time -------------------------------------------------------------------------

/**
 * The [MP] clusters of all test processes take turns: each holds this session-level advisory lock on
 * the test server while it runs. Two processes of a busy cluster open up to 40–60 connections between
 * their pools, and a PostgreSQL at its default max_connections (100) turns the next one away (53300),
 * which made the service answer 503 in the middle of a test whose other files ran their clusters at
 * the same moment. A test process that dies releases the lock with its connection.
 */
const CLUSTER_TURN_LOCK = 727_100_900;
async function clusterTurn(serverUrl: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [CLUSTER_TURN_LOCK]);
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  client.on('error', () => undefined);
  return client;
}

export class Cluster {
  private pool: pg.Pool;
  private constructor(
    readonly databaseUrl: string,
    readonly nodes: ServerProcess[],
    private readonly dropDatabase: () => Promise<void>,
    private readonly turn: pg.Client,
  ) {
    this.pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
    this.pool.on('error', () => undefined);
  }

  /** A fresh database and `nodes` processes on it, started together (migrations race under their lock). */
  static async start(opts: ClusterOptions = {}): Promise<Cluster> {
    const turn = await clusterTurn(serverDatabaseUrl());
    const db = await freshDatabase(serverDatabaseUrl()).catch(async (err) => {
      await turn.end().catch(() => undefined);
      throw err;
    });
    const nodes: ServerProcess[] = [];
    let publicUrl = '';
    for (let i = 0; i < (opts.nodes ?? 2); i++) {
      const port = await freePort();
      // One service behind a load balancer: every process has the same PUBLIC_URL (the JWT issuer).
      publicUrl ||= `http://127.0.0.1:${port}`;
      const env = serverEnv(db.url, port, publicUrl, { WORKERS: opts.workers ? '1' : '0', ...(opts.env ?? {}) });
      nodes.push(new ServerProcess(String.fromCharCode(65 + i), port, env));
    }
    const cluster = new Cluster(db.url, nodes, db.drop, turn);
    try {
      await Promise.all(nodes.map((n) => n.start()));
    } catch (err) {
      await cluster.close();
      throw err;
    }
    return cluster;
  }

  get a(): ServerProcess {
    return this.nodes[0];
  }
  get b(): ServerProcess {
    return this.nodes[1];
  }
  /** Node i modulo the node count: spreads a burst evenly (i = 0, 1, 2, … alternate). */
  node(i: number): ServerProcess {
    return this.nodes[i % this.nodes.length];
  }
  /** Another node than `n` (for retries after a failure), preferably a ready one. */
  other(n: ServerProcess): ServerProcess {
    return this.nodes.find((x) => x !== n && x.ready) ?? this.nodes.find((x) => x !== n)!;
  }

  /** Rows of a query on the database owner's connection (sees every mode; RLS does not apply). */
  async sql<R = Record<string, any>>(text: string, params: unknown[] = []): Promise<R[]> {
    return (await this.pool.query(text, params)).rows as R[];
  }

  /** Moves the shared development clock of every process; returns the service's new now. */
  async advanceClock(seconds: number): Promise<Date> {
    const res = await (this.nodes.find((n) => n.ready) ?? this.a).call('POST', '/_dev/clock', { body: { advance_seconds: seconds } });
    if (res.status !== 200) throw new Error(`advance clock: ${res.status} ${res.text}`);
    return new Date(res.json().now);
  }

  async now(): Promise<Date> {
    const res = await (this.nodes.find((n) => n.ready) ?? this.a).call('GET', '/_dev/clock');
    return new Date(res.json().now);
  }

  async warm(perNode: number, token?: string): Promise<void> {
    await Promise.all(this.nodes.filter((n) => n.ready).map((n) => n.warm(perNode, token)));
  }

  /** Exits no one asked for, over every process. */
  unexpectedExits(): Array<ExitRecord & { node: string }> {
    return this.nodes.flatMap((n) => n.unexpectedExits.map((e) => ({ ...e, node: n.name })));
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
    // Errors the processes logged (LOG_LEVEL=error: a 5xx leaves its cause here) go to the test's
    // output, so that a failed run says why a process answered 500.
    for (const n of this.nodes) {
      const errors = n.output.split('\n').filter((line) => /"level":(50|60)/.test(line));
      if (errors.length > 0) console.error(`[${n.name}] logged errors:\n${errors.join('\n')}`);
    }
    await this.pool.end().catch(() => undefined);
    try {
      await this.dropDatabase();
    } finally {
      await this.turn.end().catch(() => undefined);
    }
  }
}
