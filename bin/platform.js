#!/usr/bin/env node
// The operator CLI (`npx platform <command>`): runs the compiled sources, building them first if needed
// (the check runs in this process: a second Node.js start per command would cost more than the check).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
await import(join(root, 'scripts', 'build-if-needed.mjs'));
await import(join(root, 'dist', 'src', 'cli.js'));
