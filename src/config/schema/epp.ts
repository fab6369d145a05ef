/**
 * `epp`: kvgate as an Endpoint Picker (`kvgate epp`, src/epp/). The ext_proc and health ports
 * default to llm-d's EPP (9002 and 9003).
 */
import { z } from 'zod';

const port = z.int().min(0).max(65535);

export const eppSection = z
  .strictObject({
    /** Where the proxy's ext_proc filter connects (gRPC, plaintext). */
    listen: z
      .strictObject({
        host: z.string().min(1).default('127.0.0.1'),
        port: port.default(9002),
      })
      .prefault({}),
    /** gRPC health services `liveness`, `readiness` and `envoy.service.ext_proc.v3.ExternalProcessor`, on listen.host. */
    healthPort: port.default(9003),
    /** HTTP on listen.host: /metrics, /health, /ready and /admin/* as the gateway answers them (no inference routes). */
    metricsPort: port.default(9090),
    /**
     * Endpoints named after the pick, in order, for the proxy to fall back to
     * (`x-gateway-destination-endpoint: ip:port,ip:port`). 0: the pick alone, which every gateway
     * accepts (agentgateway parses a single address).
     */
    fallbacks: z.int().min(0).max(8).default(0),
  })
  .prefault({});
