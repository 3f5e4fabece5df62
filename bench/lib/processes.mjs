// Child processes of a bench run: the service (dist/src/main.js) and the baseline (bench/baseline.mjs).
import { fork, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Child output goes to our stderr, prefixed, so stdout carries only the JSON result lines. */
function forward(child, label) {
  for (const stream of [child.stdout, child.stderr]) {
    let buffered = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop();
      for (const line of lines) process.stderr.write(`[${label}] ${line}\n`);
    });
    stream.on('end', () => buffered && process.stderr.write(`[${label}] ${buffered}\n`));
  }
}

function exited(child) {
  return child.exitCode !== null || child.signalCode !== null;
}

/** SIGTERM, then SIGKILL if it has not exited after `graceMs`. */
async function stop(child, graceMs = 5000) {
  if (exited(child)) return;
  const done = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => !exited(child) && child.kill('SIGKILL'), graceMs);
  await done;
  clearTimeout(timer);
}

/** Node options from an environment variable, space-separated (e.g. `--cpu-prof --cpu-prof-dir=…`). */
const nodeArgsFrom = (name) => (process.env[name] ?? '').split(' ').filter(Boolean);

/** The Node options in package.json's `start` script (`node --flag… dist/src/main.js`). */
function startFlags(root) {
  const start = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts.start;
  return start.split(/\s+/).filter((a) => a.startsWith('--'));
}

/** Starts the compiled service and waits until GET /health answers 200. */
export async function startService({ root, env, timeoutMs = 60_000 }) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const childEnv = { ...process.env, ...env, PORT: String(port), HOST: '127.0.0.1', PUBLIC_URL: url };
  for (const [k, v] of Object.entries(childEnv)) if (v === undefined) delete childEnv[k];
  // The service runs with the Node options of `npm start` (package.json), plus any given here.
  const nodeArgs = [...startFlags(root), ...nodeArgsFrom('BENCH_SERVICE_NODE_ARGS')];
  const child = spawn(process.execPath, [...nodeArgs, join(root, 'dist', 'src', 'main.js')], { cwd: root, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  forward(child, 'service');
  const service = { url, child, stop: () => stop(child) };
  const deadline = Date.now() + timeoutMs;
  while (true) {
    if (exited(child)) throw new Error(`service exited during start (code ${child.exitCode}, signal ${child.signalCode})`);
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      if (res.status === 200) return service;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await service.stop();
      throw new Error(`service did not answer /health within ${timeoutMs} ms`);
    }
    await sleep(100);
  }
}

/** Forks bench/baseline.mjs, sends it its setup and waits for the port it listens on. */
export async function startBaseline({ script, setup, timeoutMs = 60_000 }) {
  const child = fork(script, [], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: nodeArgsFrom('BENCH_BASELINE_NODE_ARGS') });
  forward(child, 'baseline');
  const baseline = { child, url: null, stop: () => stop(child) };
  try {
    const port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`baseline not ready within ${timeoutMs} ms`)), timeoutMs);
      child.on('message', (msg) => {
        if (msg?.type === 'ready') {
          clearTimeout(timer);
          resolve(msg.port);
        } else if (msg?.type === 'failed') {
          clearTimeout(timer);
          reject(new Error(`baseline failed to start: ${msg.error}`));
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`baseline exited during start (code ${code}, signal ${signal})`));
      });
      child.send({ type: 'setup', ...setup });
    });
    baseline.url = `http://127.0.0.1:${port}`;
    return baseline;
  } catch (err) {
    await baseline.stop();
    throw err;
  }
}
