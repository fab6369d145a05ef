-- wrk script for bench overhead: POSTs one chat completion request and prints one JSON line
-- ("WRKJSON {...}") with the request count, duration, errors and latency percentiles (µs).
-- Env: BODY (request body), DELAY_MS (> 0: each connection waits this long before each request,
-- which paces the load to about connections × 1000 / (DELAY_MS + latency) requests per second).
local body = os.getenv("BODY")
local delay_ms = tonumber(os.getenv("DELAY_MS") or "0") or 0

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"errors":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
