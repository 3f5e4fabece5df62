import type { FastifyBaseLogger } from 'fastify';
import type { Config } from './config.js';
import type { Clock } from './clock.js';
import type { Database, Db, Mode, Tx } from './db/types.js';
import type { SigningKeys } from './auth/signing-keys.js';
import type { SecretBox } from './auth/secret-box.js';
import type { JobRunner } from './jobs/runner.js';
import type { UserRow } from './modules/users/store.js';

/** Everything wired once at start and shared by every request and job. */
export interface Deps {
  config: Readonly<Config>;
  database: Database;
  clock: Clock;
  log: FastifyBaseLogger;
  keys: SigningKeys;
  /** Seals and opens the secrets the service must read back (TOTP secrets). */
  secrets: SecretBox;
  jobs: JobRunner;
}

export type Actor =
  | {
      type: 'user';
      userId: string;
      sessionId: string;
      mode: Mode;
      permissions: ReadonlySet<string>;
      /** The user's row as read with the session (one query authenticates and loads it). */
      user?: UserRow;
      /** When the session ends (90 days after sign-in), as read with it. */
      sessionExpiresAt?: Date;
      /** A route with `session: 'fused'` has not checked the session yet (see RouteMeta.session). */
      unconfirmed?: true;
    }
  | {
      type: 'api_key';
      keyId: string;
      /** `platform` or an application id. */
      scope: string;
      mode: Mode;
      permissions: ReadonlySet<string>;
      restrictDestructive: boolean;
    }
  | { type: 'system' }
  | { type: 'anonymous' };

/** What a service verb receives: who is acting, in which mode, on which connection, and when. */
export interface Ctx {
  deps: Deps;
  actor: Actor;
  mode: Mode;
  /** Scoped to `mode`: row-level security confines every query to that mode's rows. */
  db: Db;
  requestId: string | null;
  ip: string | null;
  userAgent: string | null;
  now: Date;
}

export function systemCtx(deps: Deps, mode: Mode = 'live'): Ctx {
  return {
    deps,
    actor: { type: 'system' },
    mode,
    db: deps.database.scoped(mode),
    requestId: null,
    ip: null,
    userAgent: null,
    now: deps.clock.now(),
  };
}

/**
 * The service's logger for work done on behalf of a request: its lines carry the request's `reqId`, as
 * the request's own lines do, so the cause an operator finds in the log names the Request-Id the client
 * was given. Without a request (a job), the service's logger as it is.
 */
export function requestLog(deps: Deps, requestId: string | null): FastifyBaseLogger {
  return requestId ? deps.log.child({ reqId: requestId }) : deps.log;
}

/** A ctx whose db is the transaction, for calling other verbs inside it. */
export const inTx = (ctx: Ctx, tx: Tx): Ctx => ({ ...ctx, db: tx });

export function hasPermission(actor: Actor, permission: string): boolean {
  return (actor.type === 'user' || actor.type === 'api_key') && actor.permissions.has(permission);
}

/**
 * Whether a write must read the caller's right again under its lock: a user without `permission`
 * acts by owning the Application, and ownership can move while the write waits. A key's right, or a
 * permission holder's, is the caller's own and cannot.
 */
export const rightMayHaveMoved = (actor: Actor, permission: string): boolean => actor.type === 'user' && !hasPermission(actor, permission);
