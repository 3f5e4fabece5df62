import type { Module } from '../types.js';
import { applicationRoutes } from './routes.js';

export const applicationsModule: Module = { name: 'applications', routes: applicationRoutes };
