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
  ],
};
