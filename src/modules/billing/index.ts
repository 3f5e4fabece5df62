import type { Module } from '../types.js';
import { billingRoutes } from './routes.js';
import { runSeatLimitRelease, runSeatSync } from './jobs.js';

export const billingModule: Module = {
  name: 'billing',
  routes: billingRoutes,
  jobs: () => [
    { name: 'seat-sync', intervalSeconds: 24 * 3600, timeoutSeconds: 3600, run: runSeatSync },
    { name: 'seat-limit-release', intervalSeconds: 60, timeoutSeconds: 300, run: runSeatLimitRelease },
  ],
};
