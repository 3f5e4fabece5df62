import type { Module } from '../types.js';
import { appAccessRoutes } from './routes.js';

export const appAccessModule: Module = { name: 'app-access', routes: appAccessRoutes };
