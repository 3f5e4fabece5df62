import type { Module } from '../types.js';
import { webhookRoutes } from './routes.js';
import { runDeliveryPass } from './worker.js';
import { runHealthSweep } from './health.js';

export const webhooksModule: Module = {
  name: 'webhooks',
  routes: webhookRoutes,
  jobs: () => [
    // startWebhookWorker is the low-latency path (it polls every ~100 ms); this pass is the catch-all
    // and the operator's `jobs run webhook-delivery`.
    { name: 'webhook-delivery', intervalSeconds: 15, timeoutSeconds: 120, run: (deps) => runDeliveryPass(deps) },
    { name: 'webhook-health', intervalSeconds: 3600, timeoutSeconds: 300, run: runHealthSweep },
  ],
};

export { startWebhookWorker, runDeliveryPass, type WebhookWorkerOptions } from './worker.js';
export { setWebhookResolver, type Resolver } from './targets.js';
export { verifySignature, signatureHeader } from './signature.js';
