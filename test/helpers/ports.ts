// A loopback port for a server that must know its port before it listens (its public URL is part of
// its configuration), or for a peer that must be down. A port the kernel hands out (listen on 0, then
// close) is from the ephemeral range, where every other test process's listen(0) and every outgoing
// connection (to PostgreSQL, to a fake receiver, Chromium's) takes its ports too: on a loaded machine
// running four test processes, one of them took it between the check and the use. These ports are
// chosen below that range, where nothing takes a port unless it names it.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 12_000) return low;
  } catch {
    // no /proc (not Linux): the IANA dynamic range starts at 49152
  }
  return 49_152;
}

/** A loopback port nothing listens on, outside the ephemeral range (so free until someone names it). */
export async function unusedPort(): Promise<number> {
  const low = 10_000;
  const high = ephemeralLow();
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.unref();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free loopback port between ${low} and ${high} in 50 tries`);
}
