import type { Module } from '../types.js';
import { linkRoutes } from './routes.js';

/** The pages the mailed links open (/verify-email, /reset-password, /accept-invitation) and /forgot-password. */
export const linksModule: Module = { name: 'links', routes: linkRoutes };
