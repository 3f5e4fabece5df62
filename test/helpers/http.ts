import assert from 'node:assert/strict';
import type { TestApp } from './app.js';
import { bearer } from './fixtures.js';

export type InjectResponse = Awaited<ReturnType<TestApp['app']['inject']>>;

/** Rows of a query on the unrestricted (system) connection, for asserting side effects. */
export async function sql<R = Record<string, any>>(t: TestApp, text: string, params: unknown[] = []): Promise<R[]> {
  return (await t.database.scoped('system').query<R>(text, params)).rows;
}

/** One HTTP call; cred is a User access token or an API key secret (null: anonymous). */
export function call(t: TestApp, method: string, url: string, cred: string | null, payload?: unknown, headers: Record<string, string> = {}): Promise<InjectResponse> {
  return t.app.inject({
    method: method as any,
    url,
    headers: { ...(cred ? bearer(cred) : {}), ...headers },
    ...(payload === undefined ? {} : { payload: payload as any }),
  });
}

/** Asserts the error envelope {error: {code, message, details}} with this status and code; returns error. */
export function assertError(res: InjectResponse, status: number, code: string): { code: string; message: string; details: Record<string, any> } {
  assert.equal(res.statusCode, status, `expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  const body = res.json();
  assert.equal(body.error?.code, code, res.body);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.details, 'object');
  assert.notEqual(body.error.details, null);
  return body.error;
}
