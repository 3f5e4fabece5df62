// A test-only resource that exercises the shared mechanisms (idempotency, PATCH merge) through HTTP
// exactly as a real module would: route metadata, a service verb, a transaction. Below it, what the
// tests use it with: a holder that stops a create request, and its create call.
import { Type } from '@sinclair/typebox';
import type { Module } from '../../src/modules/types.js';
import { ctxOf } from '../../src/http/gate.js';
import { applyPatch, mergeCustom } from '../../src/http/patch.js';
import { ApiError } from '../../src/errors.js';
import { newId } from '../../src/ids.js';
import type { TestApp } from './app.js';
import { bearer } from './fixtures.js';

export const PROBE_TABLES = `
  CREATE TABLE IF NOT EXISTS probe_items (
    id text PRIMARY KEY, name text NOT NULL, note text, custom jsonb NOT NULL DEFAULT '{}', calls integer NOT NULL DEFAULT 0);
  GRANT SELECT, INSERT, UPDATE, DELETE ON probe_items TO platform_app;`;

const Item = Type.Object({ id: Type.String(), name: Type.String(), note: Type.Union([Type.String(), Type.Null()]), custom: Type.Record(Type.String(), Type.Unknown()) });

/**
 * `hold`, when given, is awaited by the create handler after its claim and before its write (a test
 * decides when a request that holds an Idempotency-Key claim goes on).
 */
const deadlocked = new Set<string>();

export const probeModule = (opts: { delayMs?: number; hold?: (name: string) => Promise<void> } = {}): Module => ({
  name: 'probe',
  routes: (app, deps) => {
    app.post('/v1/_probe/items', {
      schema: { body: Type.Object({ name: Type.String({ minLength: 1 }), fail: Type.Optional(Type.Boolean()), unserializable: Type.Optional(Type.Boolean()), deadlock_once: Type.Optional(Type.Boolean()) }), response: { 201: Item } },
      config: { meta: { auth: 'any', idempotency: 'required' } },
      handler: async (request, reply) => {
        const ctx = ctxOf(deps, request);
        if (opts.hold) await opts.hold(request.body.name);
        if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
        const item = await ctx.db.transaction(async (tx) => {
          const { rows } = await tx.query(`INSERT INTO probe_items (id, name) VALUES ($1, $2) RETURNING id, name, note, custom`, [newId('obx'), request.body.name]);
          return rows[0];
        });
        // A failure after the write: the write must roll back with it.
        if (request.body.fail) throw new ApiError('internal_error');
        // PostgreSQL's answer to a deadlock victim (40P01), once per name: its transaction did nothing.
        if (request.body.deadlock_once && !deadlocked.has(request.body.name)) {
          deadlocked.add(request.body.name);
          throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
        }
        reply.code(201);
        // A payload its response schema cannot serialize (a bug of the kind a 500 is for).
        if (request.body.unserializable) return { ...item, custom: { n: 1n } } as any;
        return item as any;
      },
    });
    app.patch('/v1/_probe/items/:id', {
      schema: {
        params: Type.Object({ id: Type.String() }),
        body: Type.Object(
          { name: Type.Optional(Type.String({ minLength: 1 })), note: Type.Optional(Type.Union([Type.String(), Type.Null()])), custom: Type.Optional(Type.Record(Type.String(), Type.Unknown())) },
          { additionalProperties: false },
        ),
        response: { 200: Item },
      },
      config: { meta: { auth: 'any', idempotency: 'optional' } },
      handler: async (request) => {
        const ctx = ctxOf(deps, request);
        return ctx.db.transaction(async (tx) => {
          const { rows } = await tx.query(`SELECT id, name, note, custom FROM probe_items WHERE id = $1 FOR UPDATE`, [request.params.id]);
          if (!rows[0]) throw new ApiError('not_found');
          const current = rows[0] as { id: string; name: string; note: string | null; custom: Record<string, unknown> };
          const { next } = applyPatch(current, request.body as Partial<typeof current>, ['name', 'note']);
          const custom = request.body.custom ? mergeCustom(current.custom, request.body.custom) : current.custom;
          const updated = await tx.query(`UPDATE probe_items SET name = $2, note = $3, custom = $4, calls = calls + 1 WHERE id = $1 RETURNING id, name, note, custom`, [
            current.id, next.name, next.note, JSON.stringify(custom),
          ]);
          return updated.rows[0] as any;
        });
      },
    });
  },
});

/**
 * Stops the next create request of an item name in a probe module's handler (after its
 * Idempotency-Key claim, before its write): `arrived` resolves there, `release()` lets it go on.
 */
export function holder() {
  const gates = new Map<string, { arrive: () => void; released: Promise<void> }>();
  return {
    hold: async (name: string) => {
      const gate = gates.get(name);
      if (!gate) return;
      gates.delete(name);
      gate.arrive();
      await gate.released;
    },
    gate(name: string) {
      let arrive!: () => void;
      let release!: () => void;
      const arrived = new Promise<void>((resolve) => (arrive = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      gates.set(name, { arrive, released });
      return { arrived, release };
    },
  };
}

/**
 * The probe's create call (with an Idempotency-Key, or none for null) and a count of its items by
 * name, on the file's test app, read when called (before() builds it).
 */
export function probeCalls(app: () => TestApp) {
  const countItems = async (name: string) =>
    (await app().database.scoped('system').query<{ n: number }>('SELECT count(*)::int AS n FROM probe_items WHERE name = $1', [name])).rows[0].n;

  const post = (token: string, key: string | null, body: object) =>
    app().app.inject({
      method: 'POST',
      url: '/v1/_probe/items',
      headers: { ...bearer(token), ...(key === null ? {} : { 'idempotency-key': key }) },
      payload: body,
    });

  return { countItems, post };
}
