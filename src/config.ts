// The reader of the service's settings in process.env: parsed once, validated, frozen, passed in (only the
// transaction guard, src/db/guard.ts, reads NODE_ENV and PLATFORM_TX_GUARD itself).
import { isIP } from 'node:net';
import { parseEncryptionKeys } from './auth/secret-box.js';
import { isEmailAddress } from './http/validation.js';

export interface Config {
  port: number;
  host: string;
  publicUrl: string;
  dataDir: string;
  databaseUrl: string | null;
  bootstrapAdminEmail: string | null;
  bootstrapAdminPassword: string | null;
  smtpUrl: string | null;
  mailFrom: string;
  webhookAllowPrivateTargets: boolean;
  stripeSecretKey: string | null;
  /**
   * Verifies processor events. Unset: the local simulator's public secret, but only while no
   * STRIPE_SECRET_KEY is set; with a real processor and no secret it is null and every event is refused.
   */
  stripeWebhookSecret: string | null;
  stripeApiBase: string | null;
  logLevel: string;
  authRateLimitPerMinute: number;
  /** Addresses or ranges of the reverse proxies whose X-Forwarded-For gives the client's address; empty: none. */
  trustProxy: string[];
  devClock: boolean;
  /** Run background workers (job scheduler, outbox relays) in this process. */
  workers: boolean;
  /** ENCRYPTION_KEY: keys sealing stored secrets; the first seals, all open (empty: the database's key). */
  encryptionKeys: readonly Buffer[];
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
}

/** Default signing secret of the local processor simulator (documented in the README). */
export const SIMULATOR_WEBHOOK_SECRET = 'whsec_platform_local_simulator';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Readonly<Config> {
  const problems: string[] = [];
  const read = settingReaders(env, problems);
  // The problems are printed in the order their settings are read here.
  const { port, publicUrl, publicHost, logLevel } = readListener(read, problems);
  const { bootstrapAdminEmail, bootstrapAdminPassword } = readBootstrapAdmin(read, problems);
  const trustProxy = readTrustProxy(read, problems);
  const config: Config = {
    port,
    host: read.str('HOST') ?? '0.0.0.0',
    publicUrl,
    dataDir: read.str('DATA_DIR') ?? './.data',
    databaseUrl: read.url('DATABASE_URL', ['postgres:', 'postgresql:']),
    bootstrapAdminEmail,
    bootstrapAdminPassword,
    smtpUrl: read.url('SMTP_URL', ['smtp:', 'smtps:'], { host: true }),
    mailFrom: read.email('MAIL_FROM') ?? `no-reply@${publicHost}`,
    webhookAllowPrivateTargets: read.flag('WEBHOOK_ALLOW_PRIVATE_TARGETS'),
    stripeSecretKey: read.str('STRIPE_SECRET_KEY'),
    stripeWebhookSecret: read.str('STRIPE_WEBHOOK_SECRET') ?? (read.str('STRIPE_SECRET_KEY') ? null : SIMULATOR_WEBHOOK_SECRET),
    stripeApiBase: read.url('STRIPE_API_BASE', ['http:', 'https:']),
    logLevel,
    authRateLimitPerMinute: read.int('AUTH_RATE_LIMIT_PER_MINUTE', 30, 0, 1_000_000),
    trustProxy,
    devClock: read.flag('DEV_CLOCK'),
    workers: read.str('WORKERS') === null ? true : read.flag('WORKERS'),
    encryptionKeys: readEncryptionKeys(read, problems),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(config);
}

type SettingReaders = ReturnType<typeof settingReaders>;

/** Readers of one setting each, by kind: a value that is set but wrong adds its line to `problems` and reads as the fallback. */
function settingReaders(env: NodeJS.ProcessEnv, problems: string[]) {
  const str = (name: string): string | null => {
    const v = env[name];
    return v === undefined || v === '' ? null : v;
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const v = str(name);
    if (v === null) return fallback;
    // Decimal digits only: Number() would also read "0x50", "1e3", " 80" and "" as numbers.
    const n = /^[0-9]+$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n) || n < min || n > max) {
      problems.push(`${name} must be an integer between ${min} and ${max} (got "${v}")`);
      return fallback;
    }
    return n;
  };
  const flag = (name: string): boolean => {
    const v = str(name);
    if (v === null || v === '0' || v === 'false') return false;
    if (v === '1' || v === 'true') return true;
    problems.push(`${name} must be 1 or true, or 0 or false (got "${v}")`);
    return false;
  };
  const url = (name: string, protocols: string[], parts: { host?: boolean } = {}): string | null => {
    const v = str(name);
    if (v === null) return null;
    try {
      const u = new URL(v);
      if (!protocols.includes(u.protocol)) problems.push(`${name} must use ${protocols.join(' or ')} (got "${u.protocol}")`);
      // `smtp://` or `smtp:relay` parse, but name no server: nodemailer would quietly send to localhost.
      else if (parts.host && !/^[a-z][a-z0-9+.-]*:\/\/[^/?#]/i.test(v)) problems.push(`${name} must name a host (${protocols[0]}//host:port)`);
    } catch {
      problems.push(`${name} is not a valid URL`);
    }
    return v;
  };
  const email = (name: string): string | null => {
    const v = str(name);
    if (v !== null && !isEmailAddress(v)) problems.push(`${name} must be an email address (got "${v}")`);
    return v;
  };
  return { str, int, flag, url, email };
}

/** PUBLIC_URL is the service origin, optionally with a path: the issuer and the base of every link. */
function readOrigin(read: SettingReaders, problems: string[], name: string): string | null {
  const v = read.url(name, ['http:', 'https:'], { host: true });
  if (v === null || !URL.canParse(v)) return v;
  const u = new URL(v);
  if (u.search || u.hash || v.includes('?') || v.includes('#') || u.username || u.password) {
    problems.push(`${name} must be an origin with an optional path, without a query, fragment or user info`);
  }
  return v;
}

/** PORT, PUBLIC_URL (its host names the default MAIL_FROM) and LOG_LEVEL. */
function readListener(read: SettingReaders, problems: string[]) {
  const port = read.int('PORT', 8080, 0, 65535);
  const publicUrl = (readOrigin(read, problems, 'PUBLIC_URL') ?? `http://localhost:${port}`).replace(/\/+$/, '');
  // Only used when PUBLIC_URL is valid: otherwise its problem is reported with the others below.
  const publicHost = URL.canParse(publicUrl) ? new URL(publicUrl).hostname : 'localhost';
  const logLevel = read.str('LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`);
  return { port, publicUrl, publicHost, logLevel };
}

function readBootstrapAdmin(read: SettingReaders, problems: string[]) {
  const bootstrapAdminEmail = read.email('BOOTSTRAP_ADMIN_EMAIL');
  const bootstrapAdminPassword = read.str('BOOTSTRAP_ADMIN_PASSWORD');
  if ((bootstrapAdminEmail === null) !== (bootstrapAdminPassword === null)) {
    problems.push('BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD must be set together');
  }
  return { bootstrapAdminEmail, bootstrapAdminPassword };
}

/**
 * Reverse proxies in front of the service: their X-Forwarded-For names the client (per-IP throttles,
 * a session's ip_address). Addresses, CIDR ranges or proxy-addr's names; never "everyone", which would
 * let any client choose the address it is throttled as.
 */
function readTrustProxy(read: SettingReaders, problems: string[]): string[] {
  const trustProxy = (read.str('TRUST_PROXY') ?? '').split(',').map((v) => v.trim()).filter(Boolean);
  for (const entry of trustProxy) {
    const [address, bits, extra] = entry.split('/');
    const max = isIP(address!) === 4 ? 32 : 128;
    const named = ['loopback', 'linklocal', 'uniquelocal'].includes(entry);
    if (!named && (!isIP(address!) || extra !== undefined || (bits !== undefined && !(/^[0-9]+$/.test(bits) && Number(bits) <= max)))) {
      problems.push(`TRUST_PROXY must list proxy addresses or CIDR ranges (or loopback, linklocal, uniquelocal), comma-separated (got "${entry}")`);
    }
  }
  return trustProxy;
}

function readEncryptionKeys(read: SettingReaders, problems: string[]): Buffer[] {
  const v = read.str('ENCRYPTION_KEY');
  if (v === null) return [];
  const keys = parseEncryptionKeys(v);
  if (!keys) problems.push('ENCRYPTION_KEY must be one or more comma-separated 32-byte keys (64 hex digits or base64)');
  return keys ?? [];
}

/**
 * The settings as the start-up log line shows them: what an operator checks first when the service
 * does not behave as intended (which storage, where mail and payments go, which proxies are believed),
 * and never a secret: DATABASE_URL and SMTP_URL without user info or query (either may hold a
 * password), no Stripe key or signing secret, ENCRYPTION_KEY only as a count, no bootstrap password.
 */
export function loggableConfig(config: Readonly<Config>): Record<string, unknown> {
  const location = (value: string) => {
    const url = new URL(value);
    return `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
  };
  return {
    storage: config.databaseUrl ? 'postgres' : 'embedded',
    database: config.databaseUrl ? location(config.databaseUrl) : config.dataDir,
    public_url: config.publicUrl,
    mail: config.smtpUrl ? location(config.smtpUrl) : 'database outbox (no SMTP_URL)',
    mail_from: config.mailFrom,
    payments: config.stripeSecretKey ? `processor${config.stripeApiBase ? ` at ${location(config.stripeApiBase)}` : ''}` : 'local simulator (no STRIPE_SECRET_KEY)',
    encryption_keys: config.encryptionKeys.length,
    auth_rate_limit_per_minute: config.authRateLimitPerMinute,
    trust_proxy: config.trustProxy,
    workers: config.workers,
    dev_clock: config.devClock,
    webhook_allow_private_targets: config.webhookAllowPrivateTargets,
    log_level: config.logLevel,
  };
}
