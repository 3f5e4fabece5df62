// A loopback webhook receiver for the [MP] tests: records every delivery and answers 200, except
// the ones `hold` picks, which it leaves unanswered (a receiver that never replies) until closed.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Delivery {
  id: string;
  type: string;
  data: Record<string, any>;
  attempt: number;
  headers: IncomingMessage['headers'];
  /** The body exactly as received (the signed bytes). */
  body: string;
  /** The sender's TCP port: whose process sent it (socketPorts). */
  remotePort: number;
  receivedAt: number;
}

export class Receiver {
  readonly deliveries: Delivery[] = [];
  /** Requests not answered yet, by Platform-Delivery-Id, and the most ever open at once for one id. */
  private readonly open = new Map<string, number>();
  maxConcurrentPerDelivery = 0;
  /** Deliveries to leave unanswered. */
  hold: ((d: Delivery) => boolean) | null = null;
  private readonly server = createServer((req, res) => {
    const deliveryId = String(req.headers['platform-delivery-id'] ?? '');
    this.open.set(deliveryId, (this.open.get(deliveryId) ?? 0) + 1);
    this.maxConcurrentPerDelivery = Math.max(this.maxConcurrentPerDelivery, this.open.get(deliveryId)!);
    res.on('close', () => this.open.set(deliveryId, this.open.get(deliveryId)! - 1));
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let delivery: Delivery | null = null;
      try {
        const raw = Buffer.concat(chunks).toString('utf8');
        const body = JSON.parse(raw);
        delivery = {
          id: body.id, type: body.type, data: body.data, attempt: Number(req.headers['platform-delivery-attempt'] ?? 0),
          headers: req.headers, body: raw, remotePort: req.socket.remotePort ?? 0, receivedAt: Date.now(),
        };
        this.deliveries.push(delivery);
      } catch {
        /* not an event: ignored */
      }
      if (delivery && this.hold?.(delivery)) return;
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

  /** The first delivery matching `match`, waiting up to `ms` for it; null if none came. */
  async next(match: (d: Delivery) => boolean, ms: number): Promise<Delivery | null> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.deliveries.find(match);
      if (found || Date.now() > deadline) return found ?? null;
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
