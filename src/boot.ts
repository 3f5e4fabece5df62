import type { FastifyBaseLogger } from 'fastify';
import { loggableConfig, type Config } from './config.js';
import type { Clock } from './clock.js';
import type { Database } from './db/types.js';
import { migrate, newerMigrations } from './db/migrate.js';
import { buildApp, type BuildOptions } from './app.js';
import { refreshDevClock } from './dev/clock.js';
import { bootstrapAdmin } from './modules/users/bootstrap.js';
import { resealTotpSecrets } from './modules/mfa/service.js';
import { resealSigningSecrets } from './modules/webhooks/dispatch.js';
import { sealStoredAnswers } from './http/idempotency.js';
import type { Module } from './modules/types.js';

export interface BootOptions {
  config: Readonly<Config>;
  database: Database;
  clock: Clock;
  logger?: FastifyBaseLogger | boolean | object;
  extraModules?: Module[];
  compileSchemas?: BuildOptions['compileSchemas'];
}

/** Everything a serving process does before it listens: migrate, build, keys, bootstrap, jobs. */
export async function boot(options: BootOptions) {
  const { config, database } = options;
  await migrate(database);
  const built = await buildApp(options);
  const { deps } = built;
  deps.log.info(loggableConfig(config), 'configuration');
  const newer = await newerMigrations(database);
  if (newer.length > 0) {
    deps.log.warn({ migrations: newer }, 'the database was migrated by a newer version of the service (migrations this version does not ship): expected during a rolling deploy or a rollback, otherwise run the newer version');
  }
  await refreshDevClock(deps);
  // The secret box first: the first signing key is stored sealed.
  await deps.secrets.ensure();
  await deps.keys.ensure();
  await resealTotpSecrets(deps);
  await resealSigningSecrets(deps);
  await sealStoredAnswers(deps);
  await deps.keys.reseal();
  if (config.encryptionKeys.length === 0) {
    deps.log.warn('ENCRYPTION_KEY is not set: stored TOTP secrets, webhook signing secrets, signing keys and idempotent responses are sealed with a key kept in the database; set it in production');
  }
  if (config.bootstrapAdminEmail && config.bootstrapAdminPassword) {
    const result = await bootstrapAdmin(deps, config.bootstrapAdminEmail, config.bootstrapAdminPassword);
    deps.log.info({ user_id: result.userId, created: result.created }, 'bootstrap admin checked');
  }
  await deps.jobs.register();
  if (config.devClock) deps.log.warn('DEV_CLOCK=1: the development clock and job endpoints are enabled; never use this in production');
  if (config.webhookAllowPrivateTargets) deps.log.warn('WEBHOOK_ALLOW_PRIVATE_TARGETS=1: webhooks may target private addresses; development only');
  return built;
}
