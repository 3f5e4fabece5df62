// Lock-order probes (PostgreSQL only): two operations taking the same two row locks in opposite
// orders deadlock, and PostgreSQL's retry after a second hides it. These check the order itself: while
// a transaction of the test holds the first lock, the operation must wait for it before it takes the
// second, so another transaction can still take the second at once (NOWAIT).
import pg from 'pg';
import { TEST_DATABASE_URL, withWrappedDatabase, type TestApp } from './app.js';
import type { Tx } from '../../src/db/types.js';

/**
 * How long (in polling sleeps, so at least that long) a probe waits for an operation of the test app to
 * reach the lock it must wait for. The operation is a request in this process: on a loaded machine
 * (four test processes on two cores, PostgreSQL on them too) it can take seconds to get there, and 5 s
 * was too close. Only a defect (the operation never waits) spends the whole budget.
 */
const WAIT_BUDGET_MS = 30_000;

/** A connection of the test's own to the test app's schema, to hold locks on or to watch them from. */
export async function client(t: TestApp): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: TEST_DATABASE_URL!, options: `-c search_path=${t.schema}` });
  await c.connect();
  return c;
}

/**
 * Waits (polling from `watcher`, up to WAIT_BUDGET_MS) until a backend waits for a lock backend `pid` holds, and
 * returns that backend's pid: its own lock chain, not another test file's on the same server.
 */
export async function blockedBy(watcher: pg.Client, pid: number, what: string): Promise<number> {
  for (let waited = 0; ; waited += 10) {
    const { rows } = await watcher.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [pid]);
    if (rows[0]) return rows[0].pid;
    if (waited >= WAIT_BUDGET_MS) throw new Error(`${what} never waited`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Waits (polling from `watcher`, up to WAIT_BUDGET_MS) until `op` has ended or a backend other than `known` waits
 * for one of `blockers`: the next step of a race, not a sleep guessing how long `op` takes to get there.
 */
export async function endedOrWaiting(watcher: pg.Client, op: Promise<unknown>, blockers: number[], known: number[], what: string): Promise<void> {
  let ended = false;
  op.then(() => (ended = true), () => (ended = true));
  for (let waited = 0; ; waited += 10) {
    const { rows } = await watcher.query('SELECT 1 FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::int[] AND NOT pid = ANY($2::int[])', [blockers, known]);
    if (ended || rows.length) return;
    if (waited >= WAIT_BUDGET_MS) throw new Error(`${what} neither ended nor waited`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The backends (other than `watcher`) holding a lock on a table of the test app's schema: the
 * transactions of this test's app under way, never another test file's on the same server.
 */
export async function transactionsInSchema(watcher: pg.Client): Promise<number[]> {
  const { rows } = await watcher.query<{ pid: number }>(
    `SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
      WHERE c.relnamespace = current_schema()::regnamespace AND l.pid <> pg_backend_pid() ORDER BY l.pid`,
  );
  return rows.map((r) => r.pid);
}

/**
 * Runs `statements` in a transaction of its own (the first taking the lock `op` needs), starts `op`,
 * and commits once `op` waits for that transaction. Returns `op`'s result: what it did after a change
 * committed while it waited. Throws when `op` never waits.
 */
export async function commitWhileWaiting<T>(t: TestApp, statements: [string, unknown[]][], op: () => Promise<T>): Promise<T> {
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    for (const s of statements) await holder.query(...s);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const running = op();
    await blockedBy(watcher, rows[0].pid, 'the operation');
    await holder.query('COMMIT');
    return await running;
  } finally {
    await holder.end();
    await watcher.end();
  }
}

/**
 * Holds `hold` (a locking SELECT) in a transaction of its own, starts `op`, waits until `op` is
 * blocked by that transaction, then tries `probe` (a locking SELECT … NOWAIT) on a third connection.
 * Returns whether the probe got its lock (the operation had not taken it while waiting), and the
 * operation's result once the hold is released. Throws when `op` ends without waiting.
 */
export async function probeWhileHeld<T>(
  t: TestApp,
  hold: [string, unknown[]],
  op: () => Promise<T>,
  probe: [string, unknown[]],
): Promise<{ probeLocked: boolean; result: T }> {
  const holder = await client(t);
  const prober = await client(t);
  try {
    await holder.query('BEGIN');
    await holder.query(...hold);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    let finished = false;
    const running = op().finally(() => {
      finished = true;
    });
    for (let waited = 0; ; waited += 20) {
      const { rows: blocked } = await prober.query('SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [rows[0].pid]);
      if (blocked.length) break;
      if (finished || waited > WAIT_BUDGET_MS) {
        await holder.query('ROLLBACK');
        await running;
        throw new Error('the operation never waited for the held lock');
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    let probeLocked = true;
    await prober.query('BEGIN');
    try {
      await prober.query(...probe);
    } catch (err) {
      if ((err as { code?: string }).code !== '55P03') throw err;
      probeLocked = false;
    }
    await prober.query('ROLLBACK');
    await holder.query('ROLLBACK');
    return { probeLocked, result: await running };
  } finally {
    await holder.end();
    await prober.end();
  }
}

/**
 * Runs `fn` counting the statements of the app's transactions that PostgreSQL aborted as deadlock
 * victims (40P01): a deadlock the retry hides, seen without timing deadlock_timeout on a loaded machine.
 */
export async function withDeadlockCount<T>(t: TestApp, fn: () => Promise<T>): Promise<{ result: T; victims: number }> {
  let victims = 0;
  const result = await withTransactionStatements(t, async (run) => {
    try {
      return await run();
    } catch (err) {
      if ((err as { code?: string }).code === '40P01') victims++;
      throw err;
    }
  }, fn);
  return { result, victims };
}

/**
 * Runs `fn` with every statement of the app's transactions passed through `around`, which calls `run`
 * to execute it (and may act before or after, as a pause inside the transaction).
 */
export async function withTransactionStatements<T>(
  t: TestApp,
  around: (run: () => Promise<unknown>, text: string) => Promise<unknown>,
  fn: () => Promise<T>,
): Promise<T> {
  const spied = (tx: Tx): Tx => {
    const wrapped: Tx = {
      ...tx,
      query: ((text: string, params?: unknown[]) => around(() => tx.query(text, params), text)) as Tx['query'],
      transaction: (inner) => inner(wrapped),
    };
    return wrapped;
  };
  return withWrappedDatabase(t, (db) => ({ ...db, transaction: (run) => db.transaction((tx) => run(spied(tx))) }), fn);
}

/**
 * Holds `hold` (a locking SELECT) in a transaction of its own while `op` runs, and returns `op`'s
 * result: `op` must answer without waiting for that lock (it throws once `op` has taken the wait budget).
 */
export async function answeredWhileHeld<T>(t: TestApp, hold: [string, unknown[]], op: () => Promise<T>, what: string): Promise<T> {
  const holder = await client(t);
  try {
    await holder.query('BEGIN');
    await holder.query(...hold);
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} waited for the held lock`)), WAIT_BUDGET_MS);
    });
    return await Promise.race([op(), waited]).finally(() => clearTimeout(timer));
  } finally {
    await holder.query('ROLLBACK');
    await holder.end();
  }
}
