import type { Module } from '../types.js';
import { tenancyRoutes } from './routes.js';

export const tenancyModule: Module = { name: 'tenancy', routes: tenancyRoutes };
export { assertTenantWritable } from './writable.js';
