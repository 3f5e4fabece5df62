import type { Module } from '../types.js';
import { oauthRoutes } from './routes.js';

export const oauthModule: Module = { name: 'oauth', routes: oauthRoutes };
