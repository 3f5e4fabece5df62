import { test, after, before } from 'node:test';
import { buildTestApp, type TestApp } from '../helpers/app.js';
let t: TestApp;
before(async () => { t = await buildTestApp({ devClock: true }); });
after(() => t.close());
test('probe', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  console.log(JSON.stringify(res.json(), null, 1).slice(0, 20000));
  console.log(t.app.printRoutes({ commonPrefix: false }));
  console.log(t.app.printRoutes({ commonPrefix: false, method: 'DELETE' } as any));
});
