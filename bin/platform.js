#!/usr/bin/env node
// The operator CLI (`npx platform <command>`): runs the compiled sources, building them first if needed.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
execFileSync(process.execPath, [join(root, 'scripts', 'build-if-needed.mjs')], { stdio: 'inherit' });
await import(join(root, 'dist', 'src', 'cli.js'));
