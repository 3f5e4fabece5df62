import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Deps } from '../context.js';
import type { JobDefinition } from '../jobs/types.js';

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, TypeBoxTypeProvider>;

/** A resource module: its routes and its periodic jobs. Adding a resource is adding one of these. */
export interface Module {
  name: string;
  routes?: (app: App, deps: Deps) => void;
  jobs?: () => JobDefinition[];
}
