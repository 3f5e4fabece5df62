import type { Module } from '../types.js';
import { signinRoutes } from './routes.js';

/** The hosted sign-in page (/signin): the browser side of the authorization code flow. */
export const signinModule: Module = { name: 'signin', routes: signinRoutes };
