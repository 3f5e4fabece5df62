// redirect_uris of an Application (Part B): where the hosted flow may send its authorization codes.
import ipaddr from 'ipaddr.js';
import { invalidField } from '../../errors.js';
import { hostOf, parseUrlAsSent } from '../../http/validation.js';

/** localhost, a name under it, 127.0.0.0/8, ::1 (IPv4-mapped too) or 0.0.0.0: whatever listens on the user's machine. */
function isLoopback(url: URL): boolean {
  const host = hostOf(url);
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  return ipaddr.isValid(host) && ['loopback', 'unspecified'].includes(ipaddr.process(host).range());
}

/**
 * redirect_uris: exact-match entries, https URLs or reverse-DNS private-use schemes
 * (com.example.app:/path); http://localhost and http://127.0.0.1 (any port) only on a test_mode
 * Application, and so is an https URL to a loopback host (a live Application's codes must not go to
 * whatever listens on the user's machine: the catalog's OA-3). No fragments, no userinfo (not even an
 * empty one).
 */
export function validateRedirectUris(uris: string[], testMode: boolean): void {
  const seen = new Set<string>();
  uris.forEach((value, i) => {
    const path = `redirect_uris.${i}`;
    const url = parseUrlAsSent(value);
    if (!url) throw invalidField(path, 'is not a URI (no white space or control characters)');
    // Any fragment or userinfo, an empty one too (`https://host/cb#`, `https://@host/`): the URL parser
    // reads an empty one as none (`hash` is ''), so the sent text is checked.
    if (value.includes('#') || url.username || url.password || /^[^:/?#]+:\/\/[^/?#]*@/.test(value)) throw invalidField(path, 'must not carry a fragment or credentials');
    const scheme = url.protocol.slice(0, -1);
    const loopback = scheme === 'http' && (url.hostname === 'localhost' || url.hostname === '127.0.0.1');
    const privateUse = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$/.test(scheme);
    if (loopback && !testMode) throw invalidField(path, 'http://localhost and http://127.0.0.1 are allowed only on test_mode applications');
    if (scheme === 'https' && !testMode && isLoopback(url)) throw invalidField(path, 'a loopback host (localhost, 127.0.0.0/8, ::1, 0.0.0.0) is allowed only on test_mode applications');
    if (!(scheme === 'https' || loopback || privateUse)) throw invalidField(path, 'must be https, a reverse-DNS private-use scheme, or loopback http on a test application');
    if (seen.has(value)) throw invalidField(path, 'is listed twice');
    seen.add(value);
  });
}
