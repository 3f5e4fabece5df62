import type { Module } from './types.js';
import { systemModule } from './system/index.js';
import { authModule } from './auth/index.js';
import { usersModule } from './users/index.js';
import { sessionsModule } from './sessions/index.js';
import { mfaModule } from './mfa/index.js';
import { profilesModule } from './profiles/index.js';
import { settingsModule } from './settings/index.js';
import { apiKeysModule } from './api-keys/index.js';
import { applicationsModule } from './applications/index.js';
import { entitlementsModule } from './entitlements/index.js';
import { rolesModule } from './roles/index.js';
import { appAccessModule } from './app-access/index.js';
import { organizationsModule } from './organizations/index.js';
import { auditModule } from './audit/index.js';
import { webhooksModule } from './webhooks/index.js';
import { tenancyModule } from './tenancy/index.js';
import { billingModule } from './billing/index.js';
import { oauthModule } from './oauth/index.js';
import { signinModule } from './signin/index.js';
import { linksModule } from './links/index.js';

/** Every resource module, in registration order. */
export const MODULES: Module[] = [
  systemModule, authModule, usersModule, sessionsModule, mfaModule, profilesModule, settingsModule, apiKeysModule, applicationsModule, entitlementsModule, rolesModule, appAccessModule,
  organizationsModule, auditModule, webhooksModule, tenancyModule, billingModule, oauthModule, signinModule, linksModule];

/** The background jobs' names (the operations contract's), known without a database. */
export function jobNames(): string[] {
  return MODULES.flatMap((m) => m.jobs?.() ?? []).map((job) => job.name);
}
