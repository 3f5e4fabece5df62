import type { Module } from '../types.js';
import { auditRoutes } from './routes.js';

export const auditModule: Module = { name: 'audit', routes: auditRoutes };
