// Deterministic probes run before the random requests of every operation (fast-check `examples`),
// so the classic edge cases are tried whatever FUZZ_RUNS is: U+0000 in a path parameter, a query
// parameter and a body field; a path parameter past the router's limit; `me` with an API key; a
// required Idempotency-Key left out. Each starts from one valid request of the operation.
import type { Operation } from './operations.js';
import type { Planned } from './requests.js';
import type { Schema } from './schema-arbitraries.js';

const NUL = 'a\u0000b';
const USER_PARAM = /\/users\/\{id\}|\/members\/\{userId\}/;

const firstString = (props: Record<string, Schema> | undefined) =>
  Object.entries(props ?? {}).find(([, s]) => s.type === 'string' || s.anyOf?.some((a: Schema) => a.type === 'string'))?.[0];

export function probesFor(op: Operation, base: Planned): Planned[] {
  const probe = (note: string, where: Planned['where'], change: Partial<Planned>, variant: Planned['variant'] = 'invalid'): Planned => ({ ...base, ...change, variant, where, note: `probe: ${note}` });
  const out: Planned[] = [];
  const param = op.pathParams[0]?.name;
  if (param) {
    out.push(probe(`U+0000 in path.${param}`, 'path', { params: { ...base.params, [param]: NUL } }, 'boundary'));
    out.push(probe(`path.${param} of 201 characters (over the router's maxParamLength)`, 'path', { params: { ...base.params, [param]: 'p'.repeat(201) } }));
  }
  const queryField = firstString(Object.fromEntries(op.queryParams.map((p) => [p.name, p.schema])));
  if (queryField) out.push(probe(`U+0000 in query.${queryField}`, 'query', { query: { ...base.query, [queryField]: NUL } }, 'boundary'));
  const bodyField = firstString(op.body?.schema.properties);
  if (bodyField && base.body && typeof base.body === 'object' && Object.getPrototypeOf(base.body) === Object.prototype) {
    out.push(probe(`U+0000 in ${bodyField}`, 'body', { body: { ...(base.body as object), [bodyField]: NUL } }, 'boundary'));
  }
  const userParam = op.pathParams.find((p) => USER_PARAM.test(op.path) && (p.name === 'userId' || (p.name === 'id' && op.path.startsWith('/v1/users/'))));
  if (op.bearer && op.keyAllowed && userParam) out.push(probe(`"me" as ${userParam.name} with an API key`, 'path', { caller: 'key', params: { ...base.params, [userParam.name]: 'me' } }, 'valid'));
  if (op.idempotency === 'required') out.push(probe('required Idempotency-Key left out', 'header', { caller: op.bearer ? 'actor' : base.caller, headers: { ...base.headers, 'idempotency-key': undefined } }));
  return out;
}
