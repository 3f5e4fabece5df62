// Compiles TypeScript when dist/ is missing or older than any source file, so `npm start` and the
// CLI always run current code without a build step on every start.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const marker = join(root, 'dist', 'src', 'main.js');

function newest(dir) {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return latest;
}

const sourcesChanged = () =>
  Math.max(newest(join(root, 'src')), statSync(join(root, 'tsconfig.json')).mtimeMs, statSync(join(root, 'tsconfig.build.json')).mtimeMs);

if (!existsSync(marker) || statSync(marker).mtimeMs < sourcesChanged()) {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  process.stderr.write('building (tsc)…\n');
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit', cwd: root });
  // tsc leaves unchanged outputs untouched; mark the build as current.
  const now = new Date();
  (await import('node:fs')).utimesSync(marker, now, now);
}
