import { pathToFileURL } from 'node:url';
import { reportFailure } from './failure.js';
import { loadConfig, ConfigError } from './config.js';
import { openDatabase } from './db/open.js';
import { SystemClock } from './clock.js';
import { boot } from './boot.js';
import { startWebhookWorker } from './modules/webhooks/worker.js';

/** How long a shutdown waits for requests in flight before it closes their connections. */
const SHUTDOWN_GRACE_MS = 10_000;
/** How long a shutdown then waits for the statements still running before it exits without them. */
const DATABASE_CLOSE_MS = 3_000;

/** Process entry: loadConfig → openDatabase → boot (migrate, build, keys, bootstrap) → listen; workers. */
export async function serve(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(1);
    }
    throw err;
  }
  const database = await openDatabase(config);
  const { app, deps } = await boot({ config, database, clock: new SystemClock() });
  // A rejection nobody handled is a bug, but it must not end every request this process serves (FT-4:
  // a database outage never stops the process). It is logged at error level with its stack instead.
  process.on('unhandledRejection', (err) => deps.log.error({ err }, 'unhandled promise rejection'));
  // Background work: the job scheduler and the continuous webhook delivery worker (both claim with
  // SKIP LOCKED, so every process may run them).
  const webhooks = config.workers ? startWebhookWorker(deps) : null;
  if (config.workers) deps.jobs.start();

  let closing = false;
  const close = async (signal: string) => {
    if (closing) return;
    closing = true;
    deps.log.info({ signal }, 'shutting down');
    // Requests in flight get up to this long to finish; then their connections are cut.
    const cut = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_GRACE_MS);
    cut.unref();
    await app.close();
    clearTimeout(cut);
    await deps.jobs.stop();
    await webhooks?.stop();
    // Closing the database waits for the statements still running. One of a request whose connection
    // the grace cut (a statement waiting on a lock another session holds) would keep the process alive
    // as long as that lock: the process exits without it, and PostgreSQL rolls its transaction back
    // when the connection drops.
    const closed = await Promise.race([
      database.close().then(
        () => true,
        (err) => {
          deps.log.error({ err }, 'closing the database failed');
          return true;
        },
      ),
      new Promise<false>((resolve) => setTimeout(resolve, DATABASE_CLOSE_MS, false)),
    ]);
    if (!closed) deps.log.warn({ waited_ms: DATABASE_CLOSE_MS }, 'statements of requests whose connections were closed are still running: exiting without them');
    process.exit(0);
  };
  process.on('SIGTERM', () => void close('SIGTERM'));
  process.on('SIGINT', () => void close('SIGINT'));

  await app.listen({ port: config.port, host: config.host });
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (invokedDirectly) {
  serve().catch((err) => {
    reportFailure('could not start', err);
    process.exit(1);
  });
}
