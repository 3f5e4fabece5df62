// node scripts/test-weights.mjs < npm-test.log
// Records what each test file cost in a full `npm test` run (its wall seconds inside its process, per
// pass) into scripts/test-weights.json, which scripts/test.mjs balances its groups by. Every file runs
// inside a describe() named after its pass and itself (`[pglite] test/…`), so the report's top-level
// entries are the files.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const out = join(dirname(fileURLToPath(import.meta.url)), 'test-weights.json');
const lines = readFileSync(0, 'utf8').split('\n');
const weights = { pglite: {}, postgres: {} };
let pass = null;
let file = null;
for (const line of lines) {
  const entry = /^(?:not )?ok \d+ - \[(pglite|postgres)\] ((?:test|src)\/\S+\.test\.ts)$/.exec(line);
  if (entry) [, pass, file] = entry;
  const duration = /^ {2}duration_ms: ([\d.]+)$/.exec(line);
  if (duration && file && pass) {
    weights[pass][file] = Math.max(1, Math.round(Number(duration[1]) / 1000));
    file = null;
  }
}
const counts = Object.fromEntries(Object.entries(weights).map(([p, w]) => [p, Object.keys(w).length]));
if (counts.pglite === 0) {
  console.error('no file entries found: feed the output of a full `npm test` run');
  process.exit(1);
}
const sorted = (w) => Object.fromEntries(Object.entries(w).sort(([a], [b]) => a.localeCompare(b)));
writeFileSync(out, `${JSON.stringify({ pglite: sorted(weights.pglite), postgres: sorted(weights.postgres) }, null, 1)}\n`);
console.log(`recorded ${JSON.stringify(counts)} files in ${out}`);
