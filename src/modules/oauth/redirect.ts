/**
 * The registered redirect_uri with the authorization response's parameters added to its query
 * (RFC 6749 §4.1.2 and §4.1.2.1). The registered URI is kept as registered, its query included
 * (§3.1.2: "MUST be retained when adding additional query parameters"): only the parameters the
 * response sets are dropped from it, so each appears once, with the server's value. Re-serializing the
 * whole URI (URL.searchParams) rewrote what the client registered (`?next=/home&flag` came back as
 * `?next=%2Fhome&flag=`). Registered URIs carry no fragment (validateRedirectUris). Characters
 * beyond ASCII are percent-encoded (UTF-8), as the URL parser would: a Location header cannot carry them
 * (Node refuses the header, a 500), and every browser reads the encoded form as the same address.
 */
export function withResponseParams(redirectUri: string, params: Record<string, string | undefined>): string {
  const given = Object.entries(params).filter((e): e is [string, string] => e[1] !== undefined);
  const names = new Set(given.map(([name]) => name));
  const q = redirectUri.indexOf('?');
  const base = q === -1 ? redirectUri : redirectUri.slice(0, q);
  const kept = q === -1 ? [] : redirectUri.slice(q + 1).split('&').filter((pair) => pair !== '' && !names.has(nameOf(pair)));
  return `${ascii(base)}?${[...kept.map(ascii), new URLSearchParams(given).toString()].join('&')}`;
}

/** Text with every character beyond printable ASCII percent-encoded as UTF-8 (redirect_uris hold no white space or controls). */
const ascii = (text: string): string => text.replace(/[^\x21-\x7e]/gu, (c) => encodeURIComponent(c));

/** A query pair's name as a form-encoded query is read (`+` a space, %XX decoded). */
const nameOf = (pair: string): string => [...new URLSearchParams(pair).keys()][0] ?? '';
