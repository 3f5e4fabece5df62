import { parseArgs, type ParseArgsConfig } from 'node:util';
import { loadConfig, ConfigError, type Config } from './config.js';
import { ApiError } from './errors.js';
import { isEmailAddress } from './http/validation.js';
import { reportFailure } from './failure.js';
import type { boot } from './boot.js';

// The service itself (storage, the app, every module) is imported by the commands that use it, so the
// usage or a usage error answers at once, without loading it.

const USAGE = `usage: platform <command>

  serve                          start the API (same as npm start)
  migrate                        apply pending database migrations
  bootstrap-admin [--email E] [--password P]
                                 create the superadmin unless a live user has that email
                                 (defaults: BOOTSTRAP_ADMIN_EMAIL, BOOTSTRAP_ADMIN_PASSWORD)
  keys rotate                    new signing key: in every JWKS within a minute, signs 7 minutes
                                 later; the old key signs until then and verifies 24 hours more
  keys rotate --retire-now       for a key that leaked: the new key signs at once and every older
                                 key stops verifying at once (its tokens refused within a minute)
  jobs run <job>                 run one background job now and wait for it
  jobs list                      list the background jobs

Settings come from the environment (see README). Commands follow the development clock only with
DEV_CLOCK=1, like the server.`;

/** A command's storage: it reads a few pages, so embedded storage starts with a small buffer (PgliteOptions). */
async function openForCommand(config: Config) {
  const { openDatabase } = await import('./db/open.js');
  return openDatabase(config, { sharedBuffers: '16MB' });
}

async function withServices<T>(fn: (booted: Awaited<ReturnType<typeof boot>>) => Promise<T>, env = process.env): Promise<T> {
  const config = { ...loadConfig(env), bootstrapAdminEmail: null, bootstrapAdminPassword: null };
  const [database, { boot }, { SystemClock }] = await Promise.all([openForCommand(config), import('./boot.js'), import('./clock.js')]);
  // Logs go to stderr: stdout carries only the command's result (jobs run prints JSON).
  const logger = { level: config.logLevel === 'info' ? 'warn' : config.logLevel, stream: process.stderr };
  const booted = await boot({ config, database, clock: new SystemClock(), logger, compileSchemas: 'on-first-use' });
  try {
    return await fn(booted);
  } finally {
    await booted.app.close();
    await database.close();
  }
}

const HELP = ['--help', '-h'];

/**
 * A command's own arguments: the options it takes and at most `positionals` words. Anything else is a
 * usage error (exit 2) and nothing runs: an option a command does not take (`migrate --dry-run`,
 * `jobs run test-purge --dry-run`, `serve --port 9000`) is never ignored while the command goes ahead.
 * `--help` or `-h` prints the usage (stdout, exit 0) and runs nothing. A number is the exit status.
 */
function commandArgs(
  name: string,
  args: string[],
  options: ParseArgsConfig['options'] = {},
  positionals = 0,
): { values: Record<string, string | boolean | undefined>; positionals: string[] } | number {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (err) {
    console.error(`platform ${name}: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (parsed.values.help) {
    console.log(USAGE);
    return 0;
  }
  if (parsed.positionals.length > positionals) {
    console.error(`platform ${name}: unexpected argument "${parsed.positionals[positionals]}"\n\n${USAGE}`);
    return 2;
  }
  return parsed as { values: Record<string, string | boolean | undefined>; positionals: string[] };
}

export async function runCli(argv: string[]): Promise<number> {
  const [command, sub] = argv;
  // `platform keys --help`, `platform jobs -h`: the usage, as for `platform --help`.
  if ((command === 'keys' || command === 'jobs') && HELP.includes(sub!)) {
    console.log(USAGE);
    return 0;
  }
  const code = await runCommand(argv);
  if (code !== undefined) return code;
  console.error(`${usageProblem(command, sub)}\n\n${USAGE}`);
  return 2;
}

/** The named command's exit status (-1: it keeps running); undefined when the command line names none. */
async function runCommand(argv: string[]): Promise<number | undefined> {
  const [command, sub, ...rest] = argv;
  switch (command) {
    case 'help':
    case '--help':
    case '-h':
      // Asked for, the usage is the answer: stdout, exit 0 (a usage error prints it to stderr, exit 2).
      console.log(USAGE);
      return 0;
    case 'serve':
      return runServe(argv.slice(1));
    case 'migrate':
      return runMigrate(argv.slice(1));
    case 'bootstrap-admin':
      return runBootstrapAdmin(argv.slice(1));
    case 'keys':
      return sub === 'rotate' ? runKeysRotate(rest) : undefined;
    case 'jobs':
      if (sub === 'list') return runJobsList(rest);
      return sub === 'run' ? runJobsRun(rest) : undefined;
  }
  return undefined;
}

async function runServe(args: string[]): Promise<number> {
  const parsed = commandArgs('serve', args);
  if (typeof parsed === 'number') return parsed;
  await (await import('./main.js')).serve();
  return -1; // keeps running
}

async function runMigrate(args: string[]): Promise<number> {
  const parsed = commandArgs('migrate', args);
  if (typeof parsed === 'number') return parsed;
  const config = loadConfig();
  const [database, { migrate, newerMigrations }] = await Promise.all([openForCommand(config), import('./db/migrate.js')]);
  try {
    const applied = await migrate(database);
    console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
    const newer = await newerMigrations(database);
    if (newer.length) console.error(`platform migrate: the database also holds migrations this version does not ship (${newer.join(', ')}): a newer version migrated it`);
  } finally {
    await database.close();
  }
  return 0;
}

async function runBootstrapAdmin(args: string[]): Promise<number> {
  const parsed = commandArgs('bootstrap-admin', args, { email: { type: 'string' }, password: { type: 'string' } });
  if (typeof parsed === 'number') return parsed;
  const values = parsed.values as { email?: string; password?: string };
  // Each flag wins over its own setting: --email with BOOTSTRAP_ADMIN_PASSWORD (a password kept out
  // of the command line) is a whole pair, not the half-set pair the server refuses at start.
  const setting = (name: string) => (process.env[name] === '' ? undefined : process.env[name]);
  const email = values.email ?? setting('BOOTSTRAP_ADMIN_EMAIL');
  const password = values.password ?? setting('BOOTSTRAP_ADMIN_PASSWORD');
  if (!email || !password) {
    console.error('bootstrap-admin needs --email and --password (or BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD)');
    return 2;
  }
  // The same check as BOOTSTRAP_ADMIN_EMAIL at start: the superadmin signs in with an address.
  if (!isEmailAddress(email)) {
    console.error(`bootstrap-admin: --email must be an email address (got "${email}")`);
    return 2;
  }
  return withServices(async ({ deps }) => {
    const { bootstrapAdmin } = await import('./modules/users/bootstrap.js');
    const result = await bootstrapAdmin(deps, email, password);
    console.log(result.created ? `created superadmin ${result.userId}` : `a live user already has that email: ${result.userId}`);
    return 0;
  }, { ...process.env, BOOTSTRAP_ADMIN_EMAIL: email, BOOTSTRAP_ADMIN_PASSWORD: password });
}

async function runKeysRotate(args: string[]): Promise<number> {
  const parsed = commandArgs('keys rotate', args, { 'retire-now': { type: 'boolean' } });
  if (typeof parsed === 'number') return parsed;
  const retireNow = parsed.values['retire-now'] === true;
  return withServices(async ({ deps }) => {
    const { kid, signsFrom } = await deps.keys.rotate({ retireNow });
    console.log(
      retireNow
        ? `new signing key: ${kid} (signs from ${signsFrom.toISOString()}); every older key stopped verifying: its tokens are refused in every process within a minute`
        : `new signing key: ${kid} (in every process's JWKS within a minute, signs from ${signsFrom.toISOString()})`,
    );
    return 0;
  });
}

async function runJobsList(args: string[]): Promise<number> {
  const parsed = commandArgs('jobs list', args);
  if (typeof parsed === 'number') return parsed;
  return withServices(async ({ deps }) => {
    console.log(deps.jobs.names.join('\n'));
    return 0;
  });
}

/** `jobs run <job>`; undefined when no job is named (a usage error). */
async function runJobsRun(args: string[]): Promise<number | undefined> {
  const parsed = commandArgs('jobs run', args, {}, 1);
  if (typeof parsed === 'number') return parsed;
  const [job] = parsed.positionals;
  if (!job) return undefined;
  // A name that is no job is a usage error, like an unknown command: exit 2, the known names. The
  // names are known without a database, so a typo is refused before anything is opened or migrated.
  const names = (await import('./modules/index.js')).jobNames();
  if (!names.includes(job)) {
    console.error(`jobs run: no job named "${job}"; the jobs are: ${names.join(', ')}`);
    return 2;
  }
  return withServices(async ({ deps }) => {
    const result = await deps.jobs.runNow(job);
    console.log(JSON.stringify({ job, result }));
    return 0;
  });
}

/** The first line of a usage error: what was wrong with the command line, naming the word. */
function usageProblem(command: string | undefined, sub: string | undefined): string {
  if (!command) return 'platform: no command given';
  if (!['keys', 'jobs'].includes(command)) return `platform: unknown command "${command}"`;
  if (command === 'jobs' && sub === 'run') return 'platform jobs run: name the job to run';
  return sub ? `platform ${command}: unknown subcommand "${sub}"` : `platform ${command}: a subcommand is needed`;
}

runCli(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    if (err instanceof ConfigError) console.error(err.message);
    else if (err instanceof ApiError) console.error(`${err.code}: ${err.message} ${JSON.stringify(err.details)}`);
    else reportFailure(process.argv[2] === 'serve' ? 'could not start' : `${commandLine(process.argv.slice(2))} failed`, err);
    process.exit(1);
  },
);

/** The command as typed, for error lines, with the value of --password left out. */
export function commandLine(args: readonly string[]): string {
  return args.map((arg, i) => (args[i - 1] === '--password' ? '***' : arg.startsWith('--password=') ? '--password=***' : arg)).join(' ');
}
