import type { Module } from '../types.js';
import { devRoutes } from './routes.js';

export const devModule: Module = { name: 'dev', routes: devRoutes };
