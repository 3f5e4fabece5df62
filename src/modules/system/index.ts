import type { Module } from '../types.js';
import { systemRoutes } from './routes.js';
import { pruneExpired } from './prune.js';
import { deliverQueuedMail } from '../../mail/outbox.js';

export const systemModule: Module = {
  name: 'system',
  routes: systemRoutes,
  jobs: () => [
    { name: 'idempotency-prune', intervalSeconds: 3600, timeoutSeconds: 300, run: pruneExpired },
    { name: 'mail-delivery', intervalSeconds: 2, timeoutSeconds: 120, run: (deps) => deliverQueuedMail(deps) },
    // Embedded PostgreSQL has no autovacuum: refresh planner statistics so plans stay sane as tables grow.
    {
      name: 'db-analyze',
      intervalSeconds: 600,
      timeoutSeconds: 300,
      run: async (deps) => {
        if (deps.database.kind !== 'pglite') return { skipped: 'autovacuum analyzes on a PostgreSQL server' };
        await deps.database.scoped('system').exec('ANALYZE');
        return { analyzed: true };
      },
    },
  ],
};
