import type { Module } from '../types.js';
import { userRoutes } from './routes.js';

export const usersModule: Module = { name: 'users', routes: userRoutes };
