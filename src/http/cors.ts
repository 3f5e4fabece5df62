import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * The routes a browser application reads from its own origin: the discovery documents, the JWKS and
 * the OAuth token endpoint (public clients, PKCE; docs/decisions.md "OAuth"). They carry no ambient
 * credential (no cookie: a code, a verifier or a refresh token travels in the body), so any origin may
 * read their answers, errors and Retry-After included. A browser posts the token request as a form
 * (a CORS "simple" request, no preflight). Every other route stays same-origin only.
 */
export async function readableFromAnyOrigin(_request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
  reply.header('access-control-allow-origin', '*');
  reply.header('access-control-expose-headers', 'Retry-After');
  return payload;
}
