import type { Module } from '../types.js';
import { roleRoutes } from './routes.js';

export const rolesModule: Module = { name: 'roles', routes: roleRoutes };
