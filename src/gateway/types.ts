/** Contracts shared by the gateway and the services and stages that plug into it. */

/**
 * Something that runs alongside the gateway (a KV-event subscriber set, a cache connection):
 * started after the server listens, closed after in-flight requests are done.
 */
export interface GatewayService {
  readonly name: string;
  start?(): void | Promise<void>;
  close?(): void | Promise<void>;
}
