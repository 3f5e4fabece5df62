import type { Module } from '../types.js';
import { sessionRoutes } from './routes.js';

export const sessionsModule: Module = { name: 'sessions', routes: sessionRoutes };
