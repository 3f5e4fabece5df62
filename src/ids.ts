import { randomBytes, randomFillSync, createHash } from 'node:crypto';
import { monotonicFactory } from 'ulid';

export const ID_PREFIXES = [
  'usr', 'ses', 'rtk', 'mfa', 'atk', 'key', 'ent', 'org', 'tnt', 'tcr', 'whk', 'wev', 'dlv', 'evt', 'req',
  // internal records (never shown as resource ids in the spec)
  'idn', 'eml', 'obx', 'sig',
] as const;
export type IdPrefix = (typeof ID_PREFIXES)[number];

// ulid's own PRNG asks the CSPRNG for one byte per character (16 calls per id); this one draws the
// same CSPRNG bytes from a refilled pool.
const pool = new Uint8Array(4096);
let poolAt = pool.length;
function prng(): number {
  if (poolAt === pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  return pool[poolAt++] / 256;
}
const ulid = monotonicFactory(prng);

/** Type prefix plus a ULID, e.g. `usr_01J…`. Ids sort by creation time. */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${ulid()}`;
}

/** An unguessable token: prefix plus 32 random bytes, base64url. */
export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString('base64url')}`;
}

/** Secrets (API key secrets, refresh and one-time tokens) are stored only as this hash. */
export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}
