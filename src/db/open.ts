import { resolve } from 'node:path';
import type { Config } from '../config.js';
import type { Database } from './types.js';
import { openPglite, type PgliteOptions } from './pglite.js';
import { openPg } from './pg.js';

/** PostgreSQL server when DATABASE_URL is set, else embedded PostgreSQL under DATA_DIR. */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>, embedded: Pick<PgliteOptions, 'sharedBuffers'> = {}): Promise<Database> {
  if (config.databaseUrl) return openPg({ url: config.databaseUrl });
  return openPglite(resolve(config.dataDir, 'pglite'), embedded);
}
