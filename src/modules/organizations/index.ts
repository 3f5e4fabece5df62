import type { Module } from '../types.js';
import { organizationRoutes } from './routes.js';

export const organizationsModule: Module = { name: 'organizations', routes: organizationRoutes };
