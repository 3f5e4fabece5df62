import type { Module } from '../types.js';
import { entitlementRoutes } from './routes.js';
import { runExpirySweep, runScheduledStarts } from './jobs.js';

export const entitlementsModule: Module = {
  name: 'entitlements',
  routes: entitlementRoutes,
  jobs: () => [
    { name: 'entitlement-expiry', intervalSeconds: 300, timeoutSeconds: 240, run: runExpirySweep },
    { name: 'scheduled-starts', intervalSeconds: 60, timeoutSeconds: 120, run: runScheduledStarts },
  ],
};
