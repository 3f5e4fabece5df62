// FT-6's look inside a stopped server's embedded data directory: every table read in full, amcheck
// over every heap and B-tree index (heapallindexed: each row has its index entries), and the signup
// invariants (one transaction makes the user, identity, profile, settings and member role).
import { PGlite } from '@electric-sql/pglite';
import { amcheck } from '@electric-sql/pglite/contrib/amcheck';
import { loadMigrations } from '../../../src/db/migrate.js';

export interface DataDirCheck {
  tables: number;
  rows: number;
  indexes: number;
  /** Tables or indexes that could not be read or that amcheck reported, with its message. */
  corruption: string[];
  invariants: string[];
}

const message = (err: unknown) => (err as Error).message ?? String(err);

/** Opens `dir` (no process may hold it) with its own PGlite and checks it; closes it again. */
export async function checkDataDir(dir: string): Promise<DataDirCheck> {
  const pg = await PGlite.create({ dataDir: dir, extensions: { amcheck } });
  try {
    const corruption: string[] = [];
    const tables = (await pg.query<{ name: string }>(`SELECT quote_ident(tablename) AS name FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)).rows;
    let rows = 0;
    for (const { name } of tables) {
      try {
        // Every column of every row, rendered as text: a damaged tuple or TOAST pointer fails here.
        const r = await pg.query<{ n: number }>(`SELECT count(*)::int AS n, coalesce(sum(length(t::text)), 0)::bigint AS chars FROM ${name} t`);
        rows += r.rows[0].n;
      } catch (err) {
        corruption.push(`reading ${name}: ${message(err)}`);
      }
    }
    await pg.exec('CREATE EXTENSION IF NOT EXISTS amcheck');
    for (const { name } of tables) {
      try {
        const r = await pg.query<{ blkno: number; msg: string }>(`SELECT blkno, msg FROM verify_heapam($1::regclass)`, [name]);
        for (const c of r.rows) corruption.push(`heap ${name} block ${c.blkno}: ${c.msg}`);
      } catch (err) {
        corruption.push(`verify_heapam ${name}: ${message(err)}`);
      }
    }
    const indexes = (
      await pg.query<{ name: string }>(
        `SELECT i.indexrelid::regclass::text AS name FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
          WHERE am.amname = 'btree' AND c.relnamespace = current_schema()::regnamespace ORDER BY 1`,
      )
    ).rows;
    for (const { name } of indexes) {
      try {
        await pg.query(`SELECT bt_index_check($1::regclass, true)`, [name]);
      } catch (err) {
        corruption.push(`index ${name}: ${message(err)}`);
      }
    }
    return { tables: tables.length, rows, indexes: indexes.length, corruption, invariants: await invariants(pg) };
  } finally {
    await pg.close();
  }
}

async function invariants(pg: PGlite): Promise<string[]> {
  const broken: string[] = [];
  const users = await pg.query<{ id: string; profile: boolean; settings: boolean; member: boolean; identity: boolean }>(
    `SELECT u.id,
            EXISTS (SELECT 1 FROM profiles p WHERE p.user_id = u.id) AS profile,
            EXISTS (SELECT 1 FROM settings s WHERE s.user_id = u.id) AS settings,
            EXISTS (SELECT 1 FROM role_assignments r WHERE r.user_id = u.id AND r.role_id = 'role_platform_member') AS member,
            EXISTS (SELECT 1 FROM identities i WHERE i.user_id = u.id AND i.method = 'password') AS identity
       FROM users u WHERE u.status <> 'deleted'`,
  );
  for (const u of users.rows) {
    const lacks = (['profile', 'settings', 'member', 'identity'] as const).filter((k) => !u[k]);
    if (lacks.length) broken.push(`user ${u.id} lacks ${lacks.join(', ')}`);
  }
  const applied = (await pg.query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY 1')).rows.map((r) => r.version);
  const expected = loadMigrations().map((m) => m.version);
  if (applied.join() !== expected.join()) broken.push(`schema_migrations ${applied.join(',')} instead of ${expected.join(',')}`);
  return broken;
}
