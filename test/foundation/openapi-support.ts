// What the OpenAPI tests read from the service's description (GET /v1/openapi.json).
export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

export interface Operation {
  method: string;
  path: string;
  op: any;
}

export function operationsOf(doc: any): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths ?? {})) {
    for (const method of Object.keys(item)) if (HTTP_METHODS.includes(method)) out.push({ method, path, op: item[method] });
  }
  return out;
}

/** A schema of the document with its $refs inlined from the components, so that it validates on its own. */
export function inlineRefsOf(doc: any, node: any): any {
  if (Array.isArray(node)) return node.map((item) => inlineRefsOf(doc, item));
  if (!node || typeof node !== 'object') return node;
  if (typeof node.$ref === 'string') return inlineRefsOf(doc, doc.components.schemas[node.$ref.split('/').pop()]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, inlineRefsOf(doc, v)]));
}
