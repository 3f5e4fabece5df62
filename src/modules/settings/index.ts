import type { Module } from '../types.js';
import { settingsRoutes } from './routes.js';

export const settingsModule: Module = { name: 'settings', routes: settingsRoutes };
