import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Database, Tx } from './types.js';
import { APP_ROLE } from './roles.js';
import { projectPath } from '../paths.js';

const LOCK_KEY = 727_100_001;
const MIGRATIONS_DIR = projectPath('src/db/migrations');

export interface Migration {
  version: string;
  sql: string;
}

export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: f.replace(/\.sql$/, ''), sql: readFileSync(join(dir, f), 'utf8') }));
}

/**
 * Applies pending migrations in order, in one transaction holding an advisory lock, so several
 * processes starting at once apply each migration exactly once. Fails loudly on any error.
 */
export async function migrate(database: Database, migrations = loadMigrations()): Promise<string[]> {
  return database.scoped('system').transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await tx.query<{ version: string }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    const pending = migrations.filter((m) => !applied.has(m.version));
    for (const m of pending) {
      try {
        await tx.exec(m.sql);
      } catch (err) {
        throw new Error(`migration ${m.version} failed: ${(err as Error).message}`, { cause: err });
      }
      await tx.query('INSERT INTO schema_migrations (version) VALUES ($1)', [m.version]);
    }
    await grantAppRole(tx);
    return pending.map((m) => m.version);
  });
}

/**
 * Versions the database records that this version does not ship: a newer version migrated it (a
 * rolling deploy, a rollback, or a restore of a newer backup). Its migrations add and never take away,
 * so an older process still runs on it, but the operator is told.
 */
export async function newerMigrations(database: Database, migrations = loadMigrations()): Promise<string[]> {
  const known = new Set(migrations.map((m) => m.version));
  const { rows } = await database.scoped('system').query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY version');
  return rows.map((r) => r.version).filter((v) => !known.has(v));
}

/** The app role (cluster-wide) may use every table of this schema, under row-level security; audit_events insert and read only. */
async function grantAppRole(tx: Tx) {
  await tx.exec(`DO $$
    BEGIN
      -- Created only when missing: a database user without CREATEROLE runs on a role an operator
      -- created once (README), and CREATE ROLE checks that privilege before it looks for the role.
      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${APP_ROLE}') THEN
        BEGIN
          CREATE ROLE ${APP_ROLE} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
      END IF;
      -- From PostgreSQL 16 a CREATEROLE user that creates a role holds it only to administer it (no
      -- SET ROLE): what request connections need is SET, which a GRANT by that user gives.
      IF NOT pg_has_role(current_user, '${APP_ROLE}', CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END) THEN
        EXECUTE format('GRANT ${APP_ROLE} TO %I', current_user);
      END IF;
      EXECUTE format('GRANT USAGE ON SCHEMA %I TO ${APP_ROLE}', current_schema());
      EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO ${APP_ROLE}', current_schema());
      EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO ${APP_ROLE}', current_schema());
      -- The audit log is append-only: requests only insert and read it (the erasure cascade and the
      -- test purge run as the system).
      EXECUTE format('REVOKE UPDATE, DELETE ON %I.audit_events FROM ${APP_ROLE}', current_schema());
    END $$`);
}
