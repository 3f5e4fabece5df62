import type { Module } from '../types.js';
import { mfaRoutes } from './routes.js';

export const mfaModule: Module = { name: 'mfa', routes: mfaRoutes };
