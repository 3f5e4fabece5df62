// One fuzzed request: planned by fast-check (caller, path, query, headers, body and which of them is
// mutated), then materialized (Lazy markers, callers that need setup) and sent with app.inject.
import fc from 'fast-check';
import { Lazy, materialize, stripeSignature } from './lazy.js';
import { bodyRecipe, fieldHint, pathParamHint } from './hints.js';
import { SchemaArbitraries, type Schema } from './schema-arbitraries.js';
import type { Operation } from './operations.js';
import type { Principal, World } from './world.js';
import type { InjectResponse } from '../../helpers/http.js';

export type CallerKind = 'actor' | 'key' | 'self' | 'owner' | 'starterOwner' | 'anonymous' | 'none' | 'invitee';

export interface Planned {
  variant: 'valid' | 'boundary' | 'invalid';
  where: 'body' | 'query' | 'path' | 'header' | '-';
  note: string;
  caller: CallerKind;
  params: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, unknown>;
  body: unknown;
  form: boolean;
}

export interface Sent {
  method: string;
  url: string;
  caller: CallerKind;
  headers: Record<string, string>;
  /** The materialized values, as the oracle validates them against the published schemas. */
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
  payload: string | undefined;
}

/** The query parameters as one object schema (the shape Fastify validates). */
export function querySchema(op: Operation): Schema {
  return {
    type: 'object',
    properties: Object.fromEntries(op.queryParams.map((p) => [p.name, p.schema])),
    required: op.queryParams.filter((p) => p.required).map((p) => p.name),
  };
}

/** The operation's request arbitrary, and `valid`: its unmutated requests (the probes start from one). */
export function requestArb(op: Operation, world: World, components: Schema): { arb: fc.Arbitrary<Planned>; valid: fc.Arbitrary<Planned> } {
  const arbs = new SchemaArbitraries(components, fieldHint(world, op));
  const independent = fc.record(Object.fromEntries(op.pathParams.map((p) => [p.name, pathParamHint(world, op, p.name) ?? arbs.valid(p.schema, p.name)])));
  const pairs: Record<string, unknown>[] = [...(world.pairs.get(op.path) ?? []), ...(SELF_PAIRS[op.path] ?? [])];
  const params: fc.Arbitrary<Record<string, unknown>> = pairs.length ? fc.oneof({ arbitrary: independent, weight: 1 }, { arbitrary: fc.constantFrom(...pairs), weight: 2 }) : independent;
  const query = op.queryParams.length ? arbs.valid(querySchema(op)) : fc.constant({});
  const recipe = bodyRecipe(world, op);
  const generic = op.body ? arbs.valid(op.body.schema) : fc.constant(undefined);
  const body = recipe ? (op.body ? fc.oneof({ arbitrary: recipe, weight: 3 }, { arbitrary: generic, weight: 1 }) : recipe) : generic;
  const base = fc.record({
    caller: callerArb(op),
    params,
    query: query as fc.Arbitrary<Record<string, unknown>>,
    headers: headersArb(op),
    body,
    form: fc.boolean().map((b) => b && !!op.body?.media.includes('application/x-www-form-urlencoded')),
  }).map((r) => ({ ...r, variant: 'valid' as const, where: '-' as const, note: 'valid' }));

  const variants: fc.WeightedArbitrary<Planned>[] = [{ arbitrary: base, weight: 10 }];
  if (op.body || recipe) {
    const schema = op.body?.schema ?? {};
    variants.push({ arbitrary: base.chain((b) => arbs.mutate(schema, b.body).map((m) => ({ ...b, body: m.value, variant: m.mutation.kind, where: 'body' as const, note: `${pathText(m.path)} ${m.mutation.note}` }))), weight: 6 });
  }
  if (op.queryParams.length) {
    const schema = querySchema(op);
    variants.push({ arbitrary: base.chain((b) => arbs.mutate(schema, b.query).map((m) => ({ ...b, query: (m.value ?? {}) as Record<string, unknown>, variant: m.mutation.kind, where: 'query' as const, note: `${pathText(m.path)} ${m.mutation.note}` }))), weight: 3 });
  }
  if (op.pathParams.length) {
    const mutatePath = (b: Planned) =>
      fc.constantFrom(...op.pathParams).chain((p) =>
        arbs.mutations(p.schema, b.params[p.name], [p.name]).map((m) => ({ ...b, params: { ...b.params, [p.name]: m.value }, variant: m.kind, where: 'path' as const, note: `${p.name} ${m.note}` })),
      );
    variants.push({ arbitrary: base.chain(mutatePath), weight: 3 });
  }
  if (op.headerParams.length) variants.push({ arbitrary: base.chain((b) => headerMutation(op).map((h) => ({ ...b, headers: { ...b.headers, ...h.headers }, variant: 'invalid' as const, where: 'header' as const, note: h.note }))), weight: 1 });
  return { arb: fc.oneof(...variants), valid: base };
}

// A caller acting on its own rows: its current session.
const SELF_PAIRS: Record<string, Record<string, unknown>[]> = {
  '/v1/users/{id}/sessions/{sessionId}': [{ id: 'me', sessionId: new Lazy('caller_session') }, { id: new Lazy('caller_id'), sessionId: new Lazy('caller_session') }],
};

const pathText = (path: (string | number)[]) => (path.length ? path.join('.') : '(root)');

function callerArb(op: Operation): fc.Arbitrary<CallerKind> {
  if (!op.bearer) return fc.constant('none');
  if (op.key === 'POST /v1/organizations/{id}/members/me/accept') return fc.constantFrom<CallerKind>('invitee', 'invitee', 'actor', 'self');
  // Owners hold the grant and the Tenants that app tokens, codes, checkout and portal need;
  // self-service operations (password, MFA, sessions, logout) want an ordinary user acting on itself.
  const owned = /\/billing\/|\/applications\/|app-tokens|authorization-codes/.test(op.path);
  const selfService = /\/(mfa|password|sessions|logout|export|profile)/.test(op.path);
  const kinds: fc.WeightedArbitrary<CallerKind>[] = [
    { arbitrary: fc.constant('actor'), weight: 20 },
    { arbitrary: fc.constant('self'), weight: selfService ? 20 : 6 },
    { arbitrary: fc.constant('owner'), weight: owned ? 12 : 2 },
    { arbitrary: fc.constant('starterOwner'), weight: owned ? 6 : 1 },
    { arbitrary: fc.constant('anonymous'), weight: 2 },
  ];
  if (op.keyAllowed) kinds.push({ arbitrary: fc.constant('key'), weight: 6 });
  return fc.oneof(...kinds);
}

function headersArb(op: Operation): fc.Arbitrary<Record<string, unknown>> {
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  if (op.idempotency) model['idempotency-key'] = fc.constant(new Lazy('idempotency_key'));
  if (op.headerParams.some((p) => p.name.toLowerCase() === 'if-match')) model['if-match'] = fc.constantFrom(new Lazy('etag'), new Lazy('etag'), '"stale"', '*', undefined);
  if (op.key === 'POST /v1/billing/processor-events') model['stripe-signature'] = fc.constantFrom(new Lazy('stripe_signature'), new Lazy('stripe_signature'), new Lazy('stripe_signature'), new Lazy('stripe_signature'), 't=1,v1=00', 'garbage', undefined);
  return fc.record(model);
}

function headerMutation(op: Operation): fc.Arbitrary<{ headers: Record<string, unknown>; note: string }> {
  const out: { headers: Record<string, unknown>; note: string }[] = [];
  if (op.idempotency) {
    out.push({ headers: { 'idempotency-key': undefined }, note: 'Idempotency-Key missing' });
    out.push({ headers: { 'idempotency-key': `fz-${'k'.repeat(253)}` }, note: 'Idempotency-Key of 256 characters' });
  }
  if (op.headerParams.some((p) => p.name.toLowerCase() === 'if-match')) out.push({ headers: { 'if-match': `"${'e'.repeat(250)}"` }, note: 'If-Match over maxLength' });
  return fc.constantFrom(...out);
}

/** Materializes a plan (callers, Lazy values) and sends it. */
export async function send(world: World, op: Operation, plan: Planned): Promise<{ sent: Sent; res: InjectResponse }> {
  const caller = await principal(world, plan.caller);
  const ctx = { world, caller, path: op.path, params: {} as Record<string, string> };
  const rawParams = (await materialize(plan.params, ctx)) as Record<string, unknown>;
  const params = Object.fromEntries(Object.entries(rawParams).map(([k, v]) => [k, wellFormed(asText(v)) || ' ']));
  ctx.params = params;
  if (plan.caller === 'invitee' && caller) await world.call('POST', `/v1/organizations/${encodeSegment(params.id)}/members`, world.actor.token, { email: caller.email });
  const query = toSearchParams((await materialize(plan.query, ctx)) as Record<string, unknown>);
  const body = await materialize(plan.body, ctx);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries((await materialize(plan.headers, ctx)) as Record<string, unknown>)) if (v !== undefined) headers[k] = String(v);
  let payload: string | undefined;
  let sentBody = body;
  if (body !== undefined) {
    const form = plan.form && !!body && typeof body === 'object' && !Array.isArray(body);
    payload = form ? new URLSearchParams(Object.entries(body as object).map(([k, v]) => [k, wellFormed(asText(v))])).toString() : JSON.stringify(body);
    headers['content-type'] = form ? 'application/x-www-form-urlencoded' : 'application/json';
    if (form) sentBody = Object.fromEntries(new URLSearchParams(payload)); // what the server parses
  }
  if (headers['stripe-signature'] === 'stripe_signature') headers['stripe-signature'] = stripeSignature(world.t.config.stripeWebhookSecret ?? '', payload ?? '');
  if (caller) headers.authorization = `Bearer ${caller.token}`;
  else if (plan.caller === 'anonymous' && payload && payload.length % 2) headers.authorization = 'Bearer plat_live_not-a-real-key';
  const search = query.toString();
  const url = op.path.replace(/\{(\w+)\}/g, (_, name) => encodeSegment(params[name])) + (search ? `?${search}` : '');
  const res = await world.t.app.inject({ method: op.method as any, url, headers, ...(payload === undefined ? {} : { payload }) });
  return { sent: { method: op.method, url, caller: plan.caller, headers, params, query, body: sentBody, payload }, res };
}

async function principal(world: World, kind: CallerKind): Promise<Principal | null> {
  switch (kind) {
    case 'actor':
      return world.actor;
    case 'key':
      return { ...world.actor, token: world.key.secret };
    case 'owner':
      return world.owner;
    case 'starterOwner':
      return world.starterOwner;
    case 'self':
    case 'invitee':
      return world.newPerson();
    default:
      return null;
  }
}

/** URLs carry UTF-8 bytes, which cannot hold a lone surrogate: those become U+FFFD as a browser would send them. */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');

const asText = (v: unknown): string => (typeof v === 'string' ? v : v === undefined ? '' : JSON.stringify(v));

/** A path segment; dots too, so "." and ".." stay parameter values instead of path navigation. */
export const encodeSegment = (v: string) => encodeURIComponent(v).replace(/\./g, '%2E');

function toSearchParams(query: Record<string, unknown>): URLSearchParams {
  const out = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v === undefined) continue;
    for (const item of Array.isArray(v) ? v : [v]) out.append(k, wellFormed(asText(item)));
  }
  return out;
}
