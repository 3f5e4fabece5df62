// npm test: the whole suite on embedded PostgreSQL (PGlite), then again on the PostgreSQL server of
// TEST_DATABASE_URL when it is set. Extra arguments are test files to run instead of all.
// The multi-process tests (test/security/multiprocess: real server processes sharing one database) run
// only on PostgreSQL: the embedded store belongs to one process, so that pass leaves them out.
// The test files run compiled: tsc writes src/ and test/ to .test-dist/ once (type errors stop the
// run), and each test process loads plain JavaScript with source maps. Through the tsx loader every
// test process spent about 2 s more CPU (some 80 processes per pass). `npx tsx --test <file>` still
// runs a single file from source.
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
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
// The operator CLI's tests run the CLI on embedded storage under DATA_DIR whatever TEST_DATABASE_URL
// says (they clear it): the PostgreSQL pass would repeat them unchanged.
const embeddedOnly = (file) => file.replace(/\\/g, '/') === 'test/foundation/cli.test.ts';
const runs = [{ name: 'embedded PostgreSQL (PGlite)', env: { TEST_DATABASE_URL: '' }, files: files.filter((f) => !multiProcess(f)), left: 'multi-process' }];
// On PostgreSQL the two-process security tests run the catalog's full counts (200 refresh races,
// 100 idempotency bursts, 10 kills…) unless MP_NO_BUDGET is set otherwise.
if (process.env.TEST_DATABASE_URL) {
  runs.push({ name: `PostgreSQL (${new URL(process.env.TEST_DATABASE_URL).host})`, env: { MP_NO_BUDGET: process.env.MP_NO_BUDGET ?? '1' }, files: files.filter((f) => !embeddedOnly(f)), left: 'embedded-only' });
}

const OUT = '.test-dist';
rmSync(join(root, OUT), { recursive: true, force: true });
const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json', '--outDir', OUT], { cwd: root, stdio: 'inherit' });
if (tsc.status !== 0) {
  console.error('npm test: tsc reported errors (above); no test ran.');
  process.exit(1);
}
const compiled = (file) => join(OUT, file.replace(/\.ts$/, '.js'));

let failed = false;
for (const run of runs) {
  const left = files.length - run.files.length;
  const where = run.left === 'multi-process' ? 'PostgreSQL' : 'PGlite';
  const note = !left ? '' : run.left === 'multi-process' && !process.env.TEST_DATABASE_URL ? ` (${left} multi-process files left out: they need TEST_DATABASE_URL)` : ` (${left} ${run.left} file${left === 1 ? '' : 's'}: ${where} pass only)`;
  console.log(`\n=== ${run.files.length} test files on ${run.name}${note} ===`);
  if (run.files.length === 0) continue;
  const result = spawnSync(
    process.execPath,
    ['--enable-source-maps', '--test', '--test-concurrency=4', '--test-timeout=600000', ...run.files.map(compiled)],
    { cwd: root, stdio: 'inherit', env: { ...process.env, ...run.env, NODE_ENV: 'test' } },
  );
  if (result.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
