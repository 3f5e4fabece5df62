// What the Application tests (test/access/applications-*.test.ts) share: a valid POST body and the
// POST and GET calls of /v1/applications.
import type { TestApp } from '../helpers/app.js';
import { call, slugOf } from './support.js';

/** A valid POST /v1/applications body for a user owner, with `extra` fields over it. */
export const base = (ownerId: string, extra: Record<string, unknown> = {}) => ({
  slug: slugOf(), name: 'App', launch_url: 'https://app.example.com', visibility: 'public', owner_user_id: ownerId, ...extra,
});

/** POST and GET of /v1/applications on the file's test app, read when called (before() builds it). */
export function applicationCalls(app: () => TestApp) {
  return {
    post: (cred: string, body: Record<string, unknown>) => call(app(), 'POST', '/v1/applications', cred, body),
    get: (cred: string, id: string) => call(app(), 'GET', `/v1/applications/${id}`, cred),
  };
}
