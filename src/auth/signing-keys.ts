import { SignJWT, exportJWK, generateKeyPair, importJWK, jwtVerify, type JWK, type JWTPayload, type KeyObject } from 'jose';
import type { Clock } from '../clock.js';
import { toUnixSeconds } from '../clock.js';
import type { Database, Tx } from '../db/types.js';
import { newId } from '../ids.js';

export const PLATFORM_AUDIENCE = 'platform';
/** A retired key keeps verifying (and stays in the JWKS) this long: longer than any token it signed. */
export const RETIRED_KEY_GRACE_SECONDS = 24 * 3600;
const REFRESH_INTERVAL_MS = 60_000;
const LOCK_KEY = 727_100_002;
/** Verified tokens remembered per process (about 1 KiB each); the oldest is forgotten first. */
const VERIFIED_TOKENS_MAX = 10_000;

/** jose's time checks without clock tolerance: valid while exp > now and not before nbf. */
function stillValid(payload: JWTPayload, now: number): boolean {
  return typeof payload.exp === 'number' && payload.exp > now && (payload.nbf === undefined || payload.nbf <= now);
}

interface LoadedKey {
  kid: string;
  publicJwk: JWK;
  publicKey: KeyObject | CryptoKey;
  privateKey: KeyObject | CryptoKey;
  createdAt: Date;
  retiredAt: Date | null;
}

interface KeyRow {
  kid: string;
  public_jwk: JWK;
  private_jwk: JWK;
  created_at: Date;
  retired_at: Date | null;
}

/**
 * RS256 signing keys live in the database so every process signs and verifies with the same set.
 * The newest unretired key signs; retired ones verify until their grace period ends.
 */
export class SigningKeys {
  private keys: LoadedKey[] = [];
  private loadedAt = 0;
  private reloading: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Tokens whose signature, issuer and audience were verified, oldest first (see verify). */
  private readonly verified = new Map<string, { payload: JWTPayload; kid: string; audience: string }>();

  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    private readonly issuer: string,
  ) {}

  /** Creates the first key unless one exists; safe when several processes start at once. */
  async ensure(): Promise<void> {
    await this.database.scoped('system').transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
      const { rowCount } = await tx.query('SELECT 1 FROM signing_keys WHERE retired_at IS NULL');
      if (rowCount === 0) await this.insertKey(tx);
    });
    await this.reload();
    // Keys are refreshed in the background, never on a request's path: signing happens inside
    // transactions, where a query on another connection would break the transaction rule.
    this.timer ??= setInterval(() => {
      this.reload().catch(() => undefined);
    }, REFRESH_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** New key signs from now on; the old ones keep verifying until their tokens have expired. */
  async rotate(): Promise<string> {
    const kid = await this.database.scoped('system').transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
      await tx.query('UPDATE signing_keys SET retired_at = $1 WHERE retired_at IS NULL', [this.clock.now()]);
      return this.insertKey(tx);
    });
    await this.reload();
    return kid;
  }

  private async insertKey(tx: Tx): Promise<string> {
    const { publicKey, privateKey } = await generateKeyPair('RS256', { modulusLength: 2048, extractable: true });
    const kid = newId('sig');
    const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' };
    const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: 'RS256' };
    await tx.query(
      'INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at) VALUES ($1, $2, $3, $4, $5)',
      [kid, 'RS256', JSON.stringify(publicJwk), JSON.stringify(privateJwk), this.clock.now()],
    );
    return kid;
  }

  async reload(): Promise<void> {
    this.reloading ??= (async () => {
      try {
        const { rows } = await this.database
          .scoped('system')
          .query<KeyRow>('SELECT kid, public_jwk, private_jwk, created_at, retired_at FROM signing_keys ORDER BY created_at DESC, kid DESC');
        const cutoff = this.clock.now().getTime() - RETIRED_KEY_GRACE_SECONDS * 1000;
        const live = rows.filter((r) => !r.retired_at || r.retired_at.getTime() > cutoff);
        this.keys = await Promise.all(
          live.map(async (r) => ({
            kid: r.kid,
            publicJwk: r.public_jwk,
            publicKey: (await importJWK(r.public_jwk, 'RS256')) as CryptoKey,
            privateKey: (await importJWK(r.private_jwk, 'RS256')) as CryptoKey,
            createdAt: r.created_at,
            retiredAt: r.retired_at,
          })),
        );
        this.loadedAt = Date.now();
      } finally {
        this.reloading = null;
      }
    })();
    return this.reloading;
  }

  async jwks(): Promise<{ keys: JWK[] }> {
    return { keys: this.keys.filter((k) => this.verifies(k)).map((k) => k.publicJwk) };
  }

  /** Unretired, or retired within the grace period (measured on the service clock). */
  private verifies(key: LoadedKey): boolean {
    return !key.retiredAt || this.clock.now().getTime() - key.retiredAt.getTime() <= RETIRED_KEY_GRACE_SECONDS * 1000;
  }

  async sign(claims: JWTPayload & { sub: string; jti: string }, audience: string, lifetimeSeconds: number): Promise<string> {
    const key = this.keys.find((k) => !k.retiredAt);
    if (!key) throw new Error('no signing key: call ensure() at start');
    const iat = toUnixSeconds(this.clock.now());
    return new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT' })
      .setIssuer(this.issuer)
      .setAudience(audience)
      .setIssuedAt(iat)
      .setExpirationTime(iat + lifetimeSeconds)
      .sign(key.privateKey);
  }

  /**
   * Verifies signature, alg, issuer, audience and expiry against the service clock; null if invalid.
   *
   * A token's signature either matches or it does not, for as long as its key verifies: a token
   * verified once is remembered (by its exact text) until it expires, and a later presentation
   * checks only what can change, its expiry and its key's retirement, on the service clock. Nothing
   * about the session or the user is remembered: callers check those live on every request.
   */
  async verify(token: string, audience: string): Promise<JWTPayload | null> {
    const now = this.clock.now();
    const hit = this.verified.get(token);
    if (hit) {
      const key = this.keys.find((k) => k.kid === hit.kid);
      if (hit.audience === audience && key && this.verifies(key) && stillValid(hit.payload, toUnixSeconds(now))) return hit.payload;
      this.verified.delete(token);
    }
    try {
      const { payload, protectedHeader } = await jwtVerify(token, async (header) => this.publicKeyFor(header.kid), {
        algorithms: ['RS256'],
        issuer: this.issuer,
        audience,
        currentDate: now,
        requiredClaims: ['exp', 'iat', 'sub', 'jti'],
      });
      if (protectedHeader.kid) {
        if (this.verified.size >= VERIFIED_TOKENS_MAX) this.verified.delete(this.verified.keys().next().value!);
        this.verified.set(token, { payload: Object.freeze(payload), kid: protectedHeader.kid, audience });
      }
      return payload;
    } catch {
      return null;
    }
  }

  private async publicKeyFor(kid: string | undefined): Promise<KeyObject | CryptoKey> {
    let key = this.keys.find((k) => k.kid === kid);
    // Another process may have rotated: look once more in the database.
    if (!key && kid && Date.now() - this.loadedAt > 1000) {
      await this.reload();
      key = this.keys.find((k) => k.kid === kid);
    }
    if (!key || !this.verifies(key)) throw new Error('unknown or expired kid');
    return key.publicKey;
  }
}
