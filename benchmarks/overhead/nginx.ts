/**
 * nginx configurations for bench overhead: the C stand-in worker (nginx with the echo module,
 * answering exactly what the Node stand-in answers, each SSE event flushed on its own) and nginx
 * as a plain reverse proxy, the reference for what a proxy costs.
 */
import { chunks, completion, metrics, MODEL } from './responses.js';

/** Where Debian's libnginx-mod-http-echo puts the module. */
export const ECHO_MODULE = '/usr/lib/nginx/modules/ngx_http_echo_module.so';

/** nginx single-quoted string literal. */
const q = (s: string): string => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;

function common(dir: string): string {
  return `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  server_tokens off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
`;
}

/** The stand-in worker on `port`. vLLM decides streaming from the body, and so does this. */
export function upstreamConf(dir: string, port: number): string {
  const sse = [...chunks, 'data: [DONE]\n\n'].map((c) => `      echo -n ${q(c)};\n      echo_flush;\n`).join('');
  return `load_module ${ECHO_MODULE};
${common(dir)}  client_body_buffer_size 64k;   # request bodies stay in memory, so $request_body is set
  client_max_body_size 1m;
  map $request_body $completion_target {
    "~\\"stream\\"\\s*:\\s*true" /_sse;
    default /_json;
  }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    location = /v1/chat/completions { echo_read_request_body; echo_exec $completion_target; }
    location = /_json { internal; default_type application/json; return 200 ${q(completion)}; }
    location = /_sse {
      internal;
      default_type text/event-stream;
      add_header Cache-Control no-cache;
${sse}    }
    location = /metrics { default_type 'text/plain; version=0.0.4'; return 200 ${q(metrics)}; }
    location = /v1/models { default_type application/json; return 200 ${q(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'bench' }] }))}; }
    location / { return 200 ''; }
  }
}
`;
}

/** nginx as a plain reverse proxy on `port` in front of `upstreamPort`, upstream keep-alive. */
export function proxyConf(dir: string, port: number, upstreamPort: number): string {
  return `${common(dir)}  upstream up { server 127.0.0.1:${upstreamPort}; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${port} backlog=4096;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}
