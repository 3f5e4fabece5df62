import type { Module } from '../types.js';
import { systemRoutes } from './routes.js';
import { pruneExpired } from './prune.js';
import { deliverQueuedMail } from '../../mail/outbox.js';
import { listVacuumTables, vacuumAnalyze } from './store.js';

export const systemModule: Module = {
  name: 'system',
  routes: systemRoutes,
  jobs: () => [
    { name: 'idempotency-prune', intervalSeconds: 3600, timeoutSeconds: 300, run: pruneExpired },
    { name: 'mail-delivery', intervalSeconds: 2, timeoutSeconds: 120, run: (deps) => deliverQueuedMail(deps) },
    // Embedded PostgreSQL has no autovacuum: vacuum and refresh planner statistics. Without VACUUM the
    // space of deleted and updated rows (pruned sessions and refresh tokens, counters, deliveries, and
    // the statistics ANALYZE itself rewrites) is never reused and the files grow for ever, and old rows
    // are never frozen before transaction ids wrap around. One table a statement: requests queued for
    // the one connection are served between tables.
    {
      name: 'db-analyze',
      intervalSeconds: 600,
      timeoutSeconds: 300,
      run: async (deps) => {
        if (deps.database.kind !== 'pglite') return { skipped: 'autovacuum analyzes on a PostgreSQL server' };
        const db = deps.database.scoped('system');
        const rows = await listVacuumTables(db);
        for (const { name } of rows) await vacuumAnalyze(db, name);
        return { vacuumed: rows.length };
      },
    },
  ],
};
