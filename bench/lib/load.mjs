// autocannon measurements of one request against one server.
import autocannon from 'autocannon';

export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** Sends the request once and checks the status, so a broken setup fails before the load run. */
export async function probe(baseUrl, request, expectStatus) {
  const res = await fetch(baseUrl + request.path, { method: request.method ?? 'GET', headers: request.headers, body: request.body });
  const text = await res.text();
  if (res.status !== expectStatus) {
    throw new Error(`${request.method ?? 'GET'} ${baseUrl}${request.path} answered ${res.status} (expected ${expectStatus}): ${text.slice(0, 300)}`);
  }
}

/**
 * Runs autocannon for `duration` seconds with `connections` connections and returns the raw
 * outcome. Latencies are kept for every response with the expected status, at sub-millisecond
 * precision (autocannon's own histogram rounds to whole milliseconds).
 */
export async function measure({ baseUrl, request, connections, duration, expectStatus = 200, overallRate }) {
  const latencies = [];
  const latenciesByStatus = {};
  let unexpected = 0;
  const instance = autocannon({
    url: baseUrl + request.path,
    method: request.method ?? 'GET',
    headers: request.headers ?? {},
    body: request.body,
    connections,
    duration,
    pipelining: 1,
    ...(overallRate ? { overallRate } : {}),
    timeout: 30,
    // A scenario whose requests change per call (e.g. rotating refresh tokens) supplies autocannon
    // request objects with setupRequest/onResponse hooks.
    ...(request.requests ? { requests: request.requests } : {}),
  });
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    (latenciesByStatus[statusCode] ??= []).push(responseTime);
    if (statusCode === expectStatus) latencies.push(responseTime);
    else unexpected++;
  });
  const result = await instance;
  const statusCodes = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([k, v]) => [k, v.count]));
  return { latencies, latenciesByStatus, seconds: result.duration, unexpected, errors: result.errors, timeouts: result.timeouts, statusCodes };
}

/** Merges the measurements (rounds) of one target: req_per_s counts expected responses only. */
export function summarize(runs) {
  const latencies = Float64Array.from(runs.flatMap((r) => r.latencies)).sort();
  const seconds = runs.reduce((s, r) => s + r.seconds, 0);
  const count = runs.reduce((s, r) => s + (r.count ?? r.latencies.length), 0);
  const statusCodes = {};
  for (const r of runs) for (const [k, v] of Object.entries(r.statusCodes)) statusCodes[k] = (statusCodes[k] ?? 0) + v;
  return {
    reqPerSec: seconds > 0 ? count / seconds : 0,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    unexpected: runs.reduce((s, r) => s + r.unexpected, 0),
    errors: runs.reduce((s, r) => s + r.errors, 0),
    timeouts: runs.reduce((s, r) => s + r.timeouts, 0),
    statusCodes,
  };
}

/**
 * A baseline measured inside the baseline process (no autocannon): POSTs the loop request and turns
 * its {verifications, seconds} answer into a measurement with `count` operations and no latencies.
 */
export async function measureLoop({ baseUrl, request }) {
  const res = await fetch(baseUrl + request.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(request.body) });
  if (res.status !== 200) throw new Error(`${baseUrl}${request.path} answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
  const { verifications, seconds } = await res.json();
  return { latencies: [], count: verifications, seconds, unexpected: 0, errors: 0, timeouts: 0, statusCodes: {} };
}

/**
 * The machine's ceiling for a route that signs one RS256 JWT per request: RSA-2048 signatures per
 * second through WebCrypto (what jose uses; it runs on libuv's thread pool, so on every core) with
 * `concurrency` in flight, and nothing else.
 */
export async function rs256SignRate({ seconds = 2, concurrency = 32 } = {}) {
  const { subtle } = globalThis.crypto;
  const algorithm = { name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' };
  const { privateKey } = await subtle.generateKey(algorithm, false, ['sign', 'verify']);
  const data = new TextEncoder().encode('eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c3JfMDEifQ');
  const end = performance.now() + seconds * 1000;
  const started = performance.now();
  let signs = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < end) {
      await subtle.sign('RSASSA-PKCS1-v1_5', privateKey, data);
      signs++;
    }
  }));
  return signs / ((performance.now() - started) / 1000);
}
