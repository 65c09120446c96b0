-- wrk script for scripts/bench/recommend-http.ts: GET /recommend/{id}?k=K for random users,
-- a share of them unknown to the model (cold start), and one JSON summary line at the end.
--   WRK_IDS_FILE       known user ids, one per line
--   WRK_UNKNOWN_SHARE  share of requests for unknown users (default 0.2)
--   WRK_K              k (default 10)
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

local known = {}
local unknown_share, k
unknown_sent = 0   -- global: done() reads it from each thread

function init(args)
  local f = assert(io.open(os.getenv("WRK_IDS_FILE"), "r"))
  for line in f:lines() do
    if line ~= "" then table.insert(known, tonumber(line)) end
  end
  f:close()
  unknown_share = tonumber(os.getenv("WRK_UNKNOWN_SHARE") or "0.2")
  k = os.getenv("WRK_K") or "10"
  math.randomseed(1234 + id)
end

function request()
  local user
  if math.random() < unknown_share then
    user = 900000000 + math.random(1, 99999999)   -- never a known id
    unknown_sent = unknown_sent + 1
  else
    user = known[math.random(#known)]
  end
  return wrk.format("GET", "/recommend/" .. user .. "?k=" .. k)
end

function done(summary, latency, requests)
  local unknown = 0
  for _, thread in ipairs(threads) do unknown = unknown + (thread:get("unknown_sent") or 0) end
  local e = summary.errors
  io.write(string.format(
    '{"wrk":true,"requests":%d,"duration_us":%d,"bytes":%d,"unknown_sent":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p95":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes, unknown,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max, latency.mean))
end
