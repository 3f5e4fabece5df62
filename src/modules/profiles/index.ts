import type { Module } from '../types.js';
import { profileRoutes } from './routes.js';

export const profilesModule: Module = { name: 'profiles', routes: profileRoutes };
