// A loopback webhook receiver for the [MP] tests: records every delivery and answers 200.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Delivery {
  id: string;
  type: string;
  data: Record<string, any>;
  attempt: number;
  headers: IncomingMessage['headers'];
}

export class Receiver {
  readonly deliveries: Delivery[] = [];
  private readonly server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        this.deliveries.push({ id: body.id, type: body.type, data: body.data, attempt: Number(req.headers['platform-delivery-attempt'] ?? 0), headers: req.headers });
      } catch {
        /* not an event: ignored */
      }
      res.writeHead(200).end('ok');
    });
  });

  static async start(): Promise<Receiver> {
    const receiver = new Receiver();
    await new Promise<void>((resolve) => receiver.server.listen(0, '127.0.0.1', resolve));
    return receiver;
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${path}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
