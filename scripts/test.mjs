// npm test: the whole suite on embedded PostgreSQL (PGlite) and, when TEST_DATABASE_URL is set, again on
// that PostgreSQL server: two passes, run side by side in one node --test run (see below). Extra
// arguments are test files to run instead of all.
// The multi-process tests (test/security/multiprocess: real server processes sharing one database) run
// only on PostgreSQL: the embedded store belongs to one process, so that pass leaves them out.
// The test files run compiled: tsc writes src/ and test/ to .test-dist/ once (type errors stop the
// run), and each test process loads plain JavaScript with source maps. Through the tsx loader every
// test process spent about 2 s more CPU (some 80 processes per pass). `npx tsx --test <file>` still
// runs a single file from source.
// The whole suite runs its files in GROUPS, several files per test process: a process's first file
// pays about 6 s of CPU to load the service, compile PGlite's WebAssembly and warm the JIT, a later
// file in the same process about 1.5 s, and the suite is CPU-bound on a 2-core machine. Each file runs
// inside a describe() named after its pass and itself (`[postgres] test/…`), so its before/after hooks
// stay its own and the files of a group run one after another. Groups are balanced by each file's
// recorded cost in its pass (scripts/test-weights.json; a file missing from it counts as
// DEFAULT_WEIGHT). Files that start processes of their own (the multi-process tests, the CLI's) keep a
// process each, also wrapped in a describe() named after the file; so do the files named on the
// command line. The processes start heaviest first (groups and solo files alternating), so that a long
// file does not start last and run on alone.
// `node scripts/test-weights.mjs < npm-test.log` records the costs of a full run.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function find(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'node_modules') out.push(...find(path));
    else if (entry.name.endsWith('.test.ts')) out.push(relative(root, path));
  }
  return out;
}

const files = process.argv.length > 2 ? process.argv.slice(2).map((f) => relative(root, resolve(f))) : [...find(join(root, 'src')), ...find(join(root, 'test'))].sort();
const multiProcess = (file) => file.split(/[\\/]/).includes('multiprocess');
// The operator CLI's tests and FT-6 (a server process SIGKILLed on embedded storage) run on embedded
// storage under DATA_DIR whatever TEST_DATABASE_URL says (they clear it): the PostgreSQL pass would
// repeat them unchanged.
const EMBEDDED_ONLY = new Set(['test/foundation/cli.test.ts', 'test/security/core/ft-6-embedded-kill.test.ts']);
const embeddedOnly = (file) => EMBEDDED_ONLY.has(file.replace(/\\/g, '/'));
const runs = [{ name: 'embedded PostgreSQL (PGlite)', id: 'pglite', env: { TEST_DATABASE_URL: '' }, files: files.filter((f) => !multiProcess(f)), left: 'multi-process' }];
// On PostgreSQL the two-process security tests run the catalog's full counts (200 refresh races,
// 100 idempotency bursts, 10 kills…) unless MP_NO_BUDGET is set otherwise.
if (process.env.TEST_DATABASE_URL) {
  runs.push({ name: `PostgreSQL (${new URL(process.env.TEST_DATABASE_URL).host})`, id: 'postgres', env: { MP_NO_BUDGET: process.env.MP_NO_BUDGET ?? '1' }, files: files.filter((f) => !embeddedOnly(f)), left: 'embedded-only' });
}

const OUT = '.test-dist';
rmSync(join(root, OUT), { recursive: true, force: true });
const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json', '--outDir', OUT], { cwd: root, stdio: 'inherit' });
if (tsc.status !== 0) {
  console.error('npm test: tsc reported errors (above); no test ran.');
  process.exit(1);
}

const CONCURRENCY = 4;
// A hang guard per test process, not a budget: the operator CLI's file (30 tests, each spawning the
// built CLI on embedded storage) measures about 65 s alone but took 594 s for 29 of its tests beside
// three other processes on a loaded 2-core machine (2026-11-30), past the 600 s this was until then.
const FILE_TIMEOUT_MS = 1_200_000;
const GROUPS = 2 * CONCURRENCY;
const DEFAULT_WEIGHT = 10;
/** Seconds per file and pass ({ pglite: {file: s}, postgres: {file: s} }), as a full run measured them. */
const weights = JSON.parse(readFileSync(join(root, 'scripts', 'test-weights.json'), 'utf8'));
const weightOf = (file, pass) => weights[pass]?.[file.replace(/\\/g, '/')] ?? DEFAULT_WEIGHT;
const solo = (file) => multiProcess(file) || embeddedOnly(file);

/**
 * The units of a pass, heaviest first: its groups of files (balanced by weight) and its solo files,
 * a group, then a solo file, and so on: the multi-process files take turns on the database (one
 * cluster at a time, test/security/multiprocess/cluster.ts), so two of them started side by side would
 * leave a process waiting instead of running a group. Files named on the command line run one each.
 */
function units(runFiles, passName) {
  if (process.argv.length > 2) return runFiles.map((f) => ({ weight: weightOf(f, passName), files: [f] }));
  const weight = (file) => weightOf(file, passName);
  const bins = Array.from({ length: GROUPS }, () => ({ weight: 0, files: [] }));
  // Longest first, each to the lightest group so far.
  for (const file of runFiles.filter((f) => !solo(f)).sort((a, b) => weight(b) - weight(a))) {
    const bin = bins.reduce((min, b) => (b.weight < min.weight ? b : min));
    bin.files.push(file);
    bin.weight += weight(file);
  }
  const heaviestFirst = (a, b) => b.weight - a.weight;
  const groups = bins.filter((b) => b.files.length > 0).sort(heaviestFirst);
  const solos = runFiles.filter(solo).map((f) => ({ weight: weight(f), files: [f] })).sort(heaviestFirst);
  const out = [];
  while (groups.length > 0 || solos.length > 0) out.push(...groups.splice(0, 1), ...solos.splice(0, 1));
  return out;
}

// Both passes run in ONE node --test run, their processes taking turns in one queue (a unit of one
// pass, then one of the other): run one after the other, the first pass ended with a process or two
// running alone on an otherwise idle machine. Each entry file sets its pass's environment before it
// imports a test file, and names each file's describe() after its pass: `[pglite] test/…`.
const dir = join(OUT, 'groups');
mkdirSync(dir, { recursive: true });
const queues = runs.map((run) => units(run.files, run.id).map((unit) => ({ run, unit })));
const entries = [];
while (queues.some((q) => q.length > 0)) for (const q of queues) entries.push(...q.splice(0, 1));
const paths = entries.map(({ run, unit }, i) => {
  const path = join(dir, `${String(i + 1).padStart(3, '0')}-${run.id}.test.js`);
  const env = Object.entries(run.env).map(([name, value]) => `process.env[${JSON.stringify(name)}] = ${JSON.stringify(value)};`);
  const body = unit.files
    .map((f) => f.replace(/\\/g, '/'))
    .map((f) => `describe(${JSON.stringify(`[${run.id}] ${f}`)}, async () => { await import(${JSON.stringify(`../${f.replace(/\.ts$/, '.js')}`)}); });`);
  writeFileSync(path, `import { describe } from 'node:test';\n${env.join('\n')}\n${body.join('\n')}\n`);
  return path;
});

for (const run of runs) {
  const left = files.length - run.files.length;
  const where = run.left === 'multi-process' ? 'PostgreSQL' : 'PGlite';
  const note = !left ? '' : run.left === 'multi-process' && !process.env.TEST_DATABASE_URL ? ` (${left} multi-process files left out: they need TEST_DATABASE_URL)` : ` (${left} ${run.left} file${left === 1 ? '' : 's'}: ${where} pass only)`;
  console.log(`=== ${run.files.length} test files on ${run.name}${note}: [${run.id}] ===`);
}
if (paths.length === 0) process.exit(0);
const result = spawnSync(
  process.execPath,
  ['--enable-source-maps', '--test', `--test-concurrency=${CONCURRENCY}`, `--test-timeout=${FILE_TIMEOUT_MS}`, ...paths],
  { cwd: root, stdio: 'inherit', env: { ...process.env, NODE_ENV: 'test' } },
);
process.exit(result.status === 0 ? 0 : 1);
