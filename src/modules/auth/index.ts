import type { Module } from '../types.js';
import { authRoutes } from './routes.js';

export const authModule: Module = { name: 'auth', routes: authRoutes };
