// Conventions (Part A 5, docs/conventions.md "Pagination"): "Results are newest first ...,
// keyset-paginated on (created_at, id)", walked with limit and page.next_cursor, on the lists whose
// own test files do not walk them (API keys, webhook subscriptions and deliveries, Entitlements).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';
import { assertStatus, call, grant, person, platformKey, setReview, newApp } from '../access/support.js';
import { buildApp, createWebhook } from '../webhooks/support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
});
after(() => t.close());

/** Follows page.next_cursor with limit=1 from the first page; the ids in the order served. */
async function walk(url: string, cred: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 50; page++) {
    const sep = url.includes('?') ? '&' : '?';
    const body = assertStatus(await call(t, 'GET', `${url}${sep}limit=1${cursor ? `&cursor=${cursor}` : ''}`, cred), 200);
    ids.push(...body.data.map((row: { id: string }) => row.id));
    assert.equal(body.page.has_more, body.page.next_cursor !== null, `${url}: has_more matches next_cursor`);
    if (!body.page.has_more) return ids;
    cursor = body.page.next_cursor;
  }
  throw new Error(`${url}: no last page`);
}

/** Three rows made one after another (ids and created_at ascending), by each list's own operation. */
const LISTS: { name: string; make: () => Promise<{ url: string; ids: string[]; cred?: string }> }[] = [
  {
    name: 'GET /v1/api-keys',
    make: async () => {
      const app = await newApp(t, admin);
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await createApiKey(t, { scope: app.id })).id);
      // API key management needs a User token (Part A Authentication 2).
      return { url: `/v1/api-keys?scope=${app.id}`, ids, cred: (await person(t, { roles: ['superadmin'] })).token };
    },
  },
  {
    name: 'GET /v1/webhooks',
    make: async () => {
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await createWebhook(t, admin, { scope: 'platform', url: `http://127.0.0.1:9/order-${i}` })).id);
      return { url: '/v1/webhooks?scope=platform', ids };
    },
  },
  {
    name: 'GET /v1/webhooks/{id}/deliveries',
    make: async () => {
      const sub = await createWebhook(t, admin, { scope: 'platform', url: 'http://127.0.0.1:9/order-deliveries' });
      for (let i = 0; i < 3; i++) assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin, {}), 202);
      const url = `/v1/webhooks/${sub.id}/deliveries`;
      const all = assertStatus(await call(t, 'GET', `${url}?limit=100`, admin), 200).data.map((d: { id: string }) => d.id);
      return { url, ids: [...all].sort() };
    },
  },
  {
    name: 'GET /v1/entitlements',
    make: async () => {
      const app = await newApp(t, admin);
      await setReview(t, app.id, 'approved');
      const ids = [];
      for (let i = 0; i < 3; i++) ids.push((await grant(t, admin, (await person(t)).id, app.id)).id);
      return { url: `/v1/entitlements?application_id=${app.id}`, ids };
    },
  },
  {
    name: 'GET /v1/users/{id}/entitlements',
    make: async () => {
      const user = await person(t);
      const ids = [];
      for (let i = 0; i < 3; i++) {
        const app = await newApp(t, admin);
        await setReview(t, app.id, 'approved');
        ids.push((await grant(t, admin, user.id, app.id)).id);
      }
      return { url: `/v1/users/${user.id}/entitlements`, ids };
    },
  },
];

for (const list of LISTS) {
  test(`list pagination: ${list.name} is "newest first, keyset-paginated on (created_at, id)": a limit=1 walk returns each row once, the newest first`, async () => {
    const { url, ids, cred } = await list.make();
    assert.equal(ids.length, 3, `${list.name}: three rows made`);
    assert.deepEqual(await walk(url, cred ?? admin), [...ids].reverse(), `${list.name}: newest first, each row once`);
  });
}
