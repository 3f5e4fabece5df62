import type { Module } from '../types.js';
import { userRoutes } from './routes.js';
import { runErasureCascade } from './privacy.js';
import { purgeTestData } from './purge.js';
import { expirePendingEmails } from './status.js';

export const usersModule: Module = {
  name: 'users',
  routes: userRoutes,
  jobs: () => [
    { name: 'erasure-cascade', intervalSeconds: 3600, timeoutSeconds: 600, run: runErasureCascade },
    { name: 'test-purge', intervalSeconds: 24 * 3600, timeoutSeconds: 1800, run: purgeTestData },
    { name: 'email-change-expiry', intervalSeconds: 300, timeoutSeconds: 120, run: expirePendingEmails },
  ],
};
