import { generateSecret, generateURI, verify } from 'otplib';
import { createHash, randomInt } from 'node:crypto';
import type { Ctx } from '../context.js';
import { beyondStep, toUnixSeconds } from '../clock.js';

/** RFC 6238: 30-second steps, 6 digits, SHA-1 (what authenticator apps use), ±1 step of drift. */
const PERIOD = 30;
const DRIFT_SECONDS = PERIOD;

export const newTotpSecret = (): string => generateSecret();

export const totpUri = (secret: string, account: string, issuer: string): string =>
  generateURI({ issuer, label: account, secret });

/**
 * The time step the code belongs to, or null. Steps at or before `afterStep` are refused, so a
 * code is accepted once only (the caller stores the step it got, atomically).
 */
export async function verifyTotp(secret: string, code: string, now: Date, afterStep: number | null): Promise<number | null> {
  try {
    const result = await verify({
      secret,
      token: code,
      epoch: Math.floor(now.getTime() / 1000),
      epochTolerance: DRIFT_SECONDS,
      ...(afterStep !== null ? { afterTimeStep: afterStep } : {}),
    });
    return result.valid ? ((result as { timeStep?: number }).timeStep ?? null) : null;
  } catch {
    return null;
  }
}

/**
 * The latest step a process whose clock is within MAX_CLOCK_SKEW_SECONDS of this one accepts now (the
 * last of its window). A last used step beyond it was taken before the clock stepped back.
 */
export const latestAcceptedStep = (now: Date): number => Math.floor(toUnixSeconds(beyondStep(now, DRIFT_SECONDS)) / PERIOD);

/** The steps used below the latest one that an identity keeps: a day's (docs/decisions.md, "MFA enrollment"). */
export const USED_STEPS_KEPT = 86400 / PERIOD;

const RECOVERY_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';

/** Ten single-use recovery codes, `xxxxx-xxxxx`; stored only as hashes. */
export function newRecoveryCodes(count = 10): string[] {
  const part = () => Array.from({ length: 5 }, () => RECOVERY_ALPHABET[randomInt(RECOVERY_ALPHABET.length)]).join('');
  return Array.from({ length: count }, () => `${part()}-${part()}`);
}

/**
 * A recovery code as it is hashed: the code someone types is the code whatever its case, its spaces
 * and its dash (or a dash of another kind, or none: `ABCDE FGHIJ` and `abcdefghij` are `abcde-fghij`),
 * and full-width characters are their ASCII forms (NFKC). Ten letters and digits are put back in the
 * issued form, so codes stored before this normalisation match too.
 */
export function canonicalRecoveryCode(code: string): string {
  const compact = code.normalize('NFKC').toLowerCase().replace(/[\s\p{Pd}]+/gu, '');
  return /^[a-z0-9]{10}$/.test(compact) ? `${compact.slice(0, 5)}-${compact.slice(5)}` : compact;
}

/** How codes issued before 2026-11-29 were stored (unsalted SHA-256); they stay usable until replaced. */
export const legacyRecoveryCodeHash = (code: string): string => createHash('sha256').update(canonicalRecoveryCode(code)).digest('hex');

// TOTP secrets are stored sealed (SecretBox), bound to their identity; the pending and the confirmed
// secret share the binding, so confirming moves the sealed value from one column to the other as it is.
export const totpContext = (identityId: string) => `identities.totp:${identityId}`;

export function sealTotpSecret(ctx: Pick<Ctx, 'deps'>, identityId: string, secret: string): string {
  return ctx.deps.secrets.seal(secret, totpContext(identityId));
}

export function totpSecretOf(ctx: Pick<Ctx, 'deps'>, identityId: string, stored: string): string {
  return ctx.deps.secrets.open(stored, totpContext(identityId));
}
