import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { Database } from '../db/types.js';
import type { Clock } from '../clock.js';

const ALGORITHM = 'aes-256-gcm';
const PREFIX = 'enc:v1:';

interface Key {
  kid: string;
  key: Buffer;
}

const keyOf = (key: Buffer): Key => ({ kid: createHash('sha256').update(key).digest('hex').slice(0, 12), key });

/**
 * Secrets the service must read back (TOTP secrets) are stored sealed with AES-256-GCM, never in
 * plaintext. The key comes from ENCRYPTION_KEY (the first one seals, every one opens, so keys can be
 * rotated); without it, from the database's encryption_keys row (docs/decisions.md "Secrets at rest").
 * A sealed value is bound to its use (`context`, e.g. the identity it belongs to): it cannot be moved
 * to another row. Values written before sealing existed are read as they are and resealed at start.
 */
export class SecretBox {
  private sealing: Key | null = null;
  private readonly opening = new Map<string, Buffer>();

  constructor(
    private readonly database: Database,
    private readonly clock: Clock,
    configured: readonly Buffer[],
  ) {
    for (const key of configured.map(keyOf)) {
      this.sealing ??= key;
      this.opening.set(key.kid, key.key);
    }
  }

  /** Loads the database's key (made by the first process when ENCRYPTION_KEY is unset; it then seals). */
  async ensure(): Promise<void> {
    const db = this.database.scoped('system');
    if (!this.sealing) {
      const fresh = keyOf(randomBytes(32));
      // One row for every process: of processes starting together, the first insert wins, the rest read it.
      await db.query(`INSERT INTO encryption_keys (slot, kid, key, created_at) VALUES ('default', $1, $2, $3) ON CONFLICT (slot) DO NOTHING`, [
        fresh.kid, fresh.key.toString('base64'), this.clock.now(),
      ]);
    }
    const { rows } = await db.query<{ kid: string; key: string }>('SELECT kid, key FROM encryption_keys');
    for (const row of rows) {
      const stored = { kid: row.kid, key: Buffer.from(row.key, 'base64') };
      this.sealing ??= stored;
      if (!this.opening.has(stored.kid)) this.opening.set(stored.kid, stored.key);
    }
  }

  /** Whether a stored value is sealed with the key that seals now (else it is resealed at start). */
  isCurrent(stored: string): boolean {
    return this.sealing !== null && stored.startsWith(`${PREFIX}${this.sealing.kid}:`);
  }

  /**
   * At start: seals the text columns' values stored in the clear (written before sealing existed)
   * and reseals those sealed with a key that no longer seals (ENCRYPTION_KEY set or rotated). A
   * value changed meanwhile is left to its writer. Returns how many values were rewritten.
   */
  async resealColumns(table: string, columns: readonly string[], context: (id: string) => string, key = 'id'): Promise<number> {
    const db = this.database.scoped('system');
    const { rows } = await db.query<Record<string, string | null>>(
      `SELECT ${key} AS id, ${columns.join(', ')} FROM ${table} WHERE ${columns.map((c) => `${c} IS NOT NULL`).join(' OR ')}`,
    );
    let resealed = 0;
    for (const row of rows) {
      const id = row.id!;
      for (const column of columns) {
        const stored = row[column];
        if (stored === null || this.isCurrent(stored)) continue;
        const sealed = this.seal(this.open(stored, context(id)), context(id));
        const { rowCount } = await db.query(`UPDATE ${table} SET ${column} = $2 WHERE ${key} = $1 AND ${column} = $3`, [id, sealed, stored]);
        resealed += rowCount;
      }
    }
    return resealed;
  }

  seal(plain: string, context: string): string {
    if (!this.sealing) throw new Error('SecretBox.ensure() has not run');
    const iv = randomBytes(12);
    const cipher = createCipheriv(ALGORITHM, this.sealing.key, iv);
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return `${PREFIX}${this.sealing.kid}:${iv.toString('base64url')}:${body.toString('base64url')}`;
  }

  open(stored: string, context: string): string {
    if (!stored.startsWith(PREFIX)) return stored;
    const [kid, iv, body] = stored.slice(PREFIX.length).split(':');
    const key = this.opening.get(kid);
    if (!key) throw new Error(`no key ${kid} to open a sealed secret: was ENCRYPTION_KEY changed without keeping the old key?`);
    const data = Buffer.from(body, 'base64url');
    const decipher = createDecipheriv(ALGORITHM, key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(context));
    decipher.setAuthTag(data.subarray(data.length - 16));
    return Buffer.concat([decipher.update(data.subarray(0, data.length - 16)), decipher.final()]).toString('utf8');
  }
}

/** ENCRYPTION_KEY: one or more comma-separated 32-byte keys, as 64 hex digits or base64; null if malformed. */
export function parseEncryptionKeys(value: string): Buffer[] | null {
  const keys: Buffer[] = [];
  for (const part of value.split(',').map((p) => p.trim())) {
    const key = /^[0-9a-fA-F]{64}$/.test(part) ? Buffer.from(part, 'hex') : /^[A-Za-z0-9+/_-]{43}=?$/.test(part) ? Buffer.from(part, 'base64') : null;
    if (!key || key.length !== 32) return null;
    keys.push(key);
  }
  return keys;
}
