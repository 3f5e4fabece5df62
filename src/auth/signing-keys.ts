import { SignJWT, exportJWK, generateKeyPair, importJWK, jwtVerify, type JWK, type JWTPayload, type KeyObject } from 'jose';
import type { Clock } from '../clock.js';
import { toUnixSeconds } from '../clock.js';
import type { Database, Tx } from '../db/types.js';
import { newId } from '../ids.js';
import type { SecretBox } from './secret-box.js';

export const PLATFORM_AUDIENCE = 'platform';
/** A retired key keeps verifying (and stays in the JWKS) this long: longer than any token it signed. */
export const RETIRED_KEY_GRACE_SECONDS = 24 * 3600;
const REFRESH_INTERVAL_MS = 60_000;
/** How long a verifier may cache the JWKS (its Cache-Control max-age). */
export const JWKS_MAX_AGE_SECONDS = 300;
/**
 * A rotated key signs this long after it is created, and the key it replaces stops signing then: one
 * reload interval (every process publishes the new key in its JWKS by then), plus the JWKS cache
 * lifetime (a verifier that fetched the JWKS from a process just before its reload has refetched by
 * then), plus a minute to spare. So no verifier honouring Cache-Control meets a `kid` it lacks, and
 * all processes switch at the same instant of the service clock.
 */
export const KEY_PUBLISH_AHEAD_SECONDS = REFRESH_INTERVAL_MS / 1000 + JWKS_MAX_AGE_SECONDS + 60;
const LOCK_KEY = 727_100_002;
/** A private key is sealed bound to its kid (src/auth/secret-box.ts). */
const privateKeyContext = (kid: string) => `signing_key:${kid}`;
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
  signsFrom: Date;
  retiredAt: Date | null;
}

interface KeyRow {
  kid: string;
  public_jwk: JWK;
  private_jwk: string;
  signs_from: Date;
  retired_at: Date | null;
}

/**
 * RS256 signing keys live in the database so every process signs and verifies with the same set.
 * The key whose signing period (signs_from until retired_at) holds now signs; a rotated key is
 * published KEY_PUBLISH_AHEAD_SECONDS before it signs; retired ones verify until their grace ends.
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
    private readonly secrets: SecretBox,
    /** Where a failed background reload is reported (the process keeps its last keys meanwhile). */
    private readonly onReloadError: (err: unknown) => void = () => undefined,
  ) {}

  /** Creates the first key unless one exists; safe when several processes start at once. */
  async ensure(): Promise<void> {
    await this.database.scoped('system').transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
      const { rowCount } = await tx.query('SELECT 1 FROM signing_keys WHERE retired_at IS NULL');
      if (rowCount === 0) await this.insertKey(tx, this.clock.now());
    });
    await this.reload();
    // Keys are refreshed in the background, never on a request's path: signing happens inside
    // transactions, where a query on another connection would break the transaction rule.
    this.timer ??= setInterval(() => {
      this.reload().catch(this.onReloadError);
    }, REFRESH_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * A new key, published at once (in every process's JWKS within a reload interval) and signing from
   * KEY_PUBLISH_AHEAD_SECONDS on, when the current key stops signing; that one keeps verifying for
   * RETIRED_KEY_GRACE_SECONDS more, beyond the life of any token it signed.
   *
   * With `retireNow` (a key that leaked): the new key signs at once and every earlier key stops
   * verifying at once, its grace already spent, so every token they signed is refused (in every
   * process within a reload interval); users refresh or sign in again. Relying parties that cached
   * the JWKS meet an unknown kid and refetch it.
   */
  async rotate(opts: { retireNow?: boolean } = {}): Promise<{ kid: string; signsFrom: Date }> {
    const now = this.clock.now().getTime();
    const signsFrom = new Date(opts.retireNow ? now : now + KEY_PUBLISH_AHEAD_SECONDS * 1000);
    const kid = await this.database.scoped('system').transaction(async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
      if (opts.retireNow) {
        const spent = new Date(now - (RETIRED_KEY_GRACE_SECONDS + 1) * 1000);
        await tx.query('UPDATE signing_keys SET retired_at = $1 WHERE retired_at IS NULL OR retired_at > $1', [spent]);
      } else {
        await tx.query('UPDATE signing_keys SET retired_at = $1 WHERE retired_at IS NULL', [signsFrom]);
      }
      return this.insertKey(tx, signsFrom);
    });
    await this.reload();
    return { kid, signsFrom };
  }

  private async insertKey(tx: Tx, signsFrom: Date): Promise<string> {
    const { publicKey, privateKey } = await generateKeyPair('RS256', { modulusLength: 2048, extractable: true });
    const kid = newId('sig');
    const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' };
    const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: 'RS256' };
    await tx.query(
      'INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at, signs_from) VALUES ($1, $2, $3, $4, $5, $6)',
      [kid, 'RS256', JSON.stringify(publicJwk), this.secrets.seal(JSON.stringify(privateJwk), privateKeyContext(kid)), this.clock.now(), signsFrom],
    );
    return kid;
  }

  /** The private key as stored: sealed, or (written before sealing existed) its JSON text. */
  private openPrivate(kid: string, stored: string): JWK {
    return JSON.parse(this.secrets.open(stored, privateKeyContext(kid))) as JWK;
  }

  /** At start: private keys in the clear or sealed with an old key are sealed with the current one. */
  reseal(): Promise<number> {
    return this.secrets.resealColumns('signing_keys', ['private_jwk'], privateKeyContext, 'kid');
  }

  async reload(): Promise<void> {
    this.reloading ??= (async () => {
      try {
        const { rows } = await this.database
          .scoped('system')
          .query<KeyRow>('SELECT kid, public_jwk, private_jwk, signs_from, retired_at FROM signing_keys ORDER BY signs_from DESC, created_at DESC, kid DESC');
        const cutoff = this.clock.now().getTime() - RETIRED_KEY_GRACE_SECONDS * 1000;
        const live = rows.filter((r) => !r.retired_at || r.retired_at.getTime() > cutoff);
        this.keys = await Promise.all(
          live.map(async (r) => ({
            kid: r.kid,
            publicJwk: r.public_jwk,
            publicKey: (await importJWK(r.public_jwk, 'RS256')) as CryptoKey,
            privateKey: (await importJWK(this.openPrivate(r.kid, r.private_jwk), 'RS256')) as CryptoKey,
            signsFrom: r.signs_from,
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

  /**
   * The key whose signing period holds now (keys are sorted by signs_from, newest first). A process
   * that missed the reload announcing its successor keeps signing with the newest key it has whose
   * period began: its peers publish that key for another 24 hours. A service clock set before every
   * key's period (the development clock moved back) signs with the first key.
   */
  private signingKey(now: number): LoadedKey | undefined {
    const started = this.keys.filter((k) => k.signsFrom.getTime() <= now);
    return started.find((k) => !k.retiredAt || k.retiredAt.getTime() > now) ?? started[0] ?? this.keys[this.keys.length - 1];
  }

  /**
   * Unretired, or retired within the grace period (measured on the service clock), which ends at
   * retired_at + 24 h exclusive, as reload()'s filter has it: at that instant a process that just
   * reloaded and one that did not give the same answer.
   */
  private verifies(key: LoadedKey): boolean {
    return !key.retiredAt || this.clock.now().getTime() - key.retiredAt.getTime() < RETIRED_KEY_GRACE_SECONDS * 1000;
  }

  async sign(claims: JWTPayload & { sub: string; jti: string }, audience: string, lifetimeSeconds: number): Promise<string> {
    return (await this.signUntil(claims, audience, lifetimeSeconds, null)).token;
  }

  /**
   * As sign, but the token never outlives `notAfter` (what it stands for ends then: an entitlement's
   * ends_at, the session's end): exp is the lifetime's or notAfter's whole second rounded down,
   * whichever is first, so a verifier refuses it from that instant on, never later. Returns
   * `expiresIn`, exp − iat (the response's expires_in).
   */
  async signUntil(claims: JWTPayload & { sub: string; jti: string }, audience: string, lifetimeSeconds: number, notAfter: Date | null): Promise<{ token: string; expiresIn: number }> {
    const key = this.signingKey(this.clock.now().getTime());
    if (!key) throw new Error('no signing key: call ensure() at start');
    const iat = toUnixSeconds(this.clock.now());
    const exp = Math.max(iat, Math.min(iat + lifetimeSeconds, notAfter ? toUnixSeconds(notAfter) : Infinity));
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT' })
      .setIssuer(this.issuer)
      .setAudience(audience)
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .sign(key.privateKey);
    return { token, expiresIn: exp - iat };
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
