import type { Module } from '../types.js';
import { apiKeyRoutes } from './routes.js';

export const apiKeysModule: Module = { name: 'api-keys', routes: apiKeyRoutes };
