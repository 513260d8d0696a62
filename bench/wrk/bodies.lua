-- bodies.lua: wrk script of the benchmark suite (bench/run).
--
--   wrk -t1 -c16 -d10s -s bench/wrk/bodies.lua http://127.0.0.1:PORT -- FILE
--
-- FILE has one request per line, "PATH<TAB>JSON BODY" (bench/loadgen bodies).
-- With $HF3FS_AUTHORIZATION set, every request carries it as Authorization.
-- The requests are formatted once, in init(); request() hands them out in
-- turn. done() prints one machine-readable line (latencies in microseconds):
--   requests=R seconds=S rps=X p50_us=A p99_us=B errors=E
-- where errors counts connect/read/write errors, timeouts and answers that
-- are not 2xx/3xx.

local requests = {}
local next_index = 1

function init(args)
  local file = assert(io.open(args[1], "r"), "cannot open " .. tostring(args[1]))
  local headers = { ["Content-Type"] = "application/json" }
  -- bench/auth_cost.py: the Authorization header of every request
  local authorization = os.getenv("HF3FS_AUTHORIZATION")
  if authorization then headers["Authorization"] = authorization end
  for line in file:lines() do
    local path, body = line:match("^([^\t]+)\t(.*)$")
    if path then
      requests[#requests + 1] = wrk.format("POST", path, headers, body)
    end
  end
  file:close()
  assert(#requests > 0, "no requests in " .. args[1])
  -- each thread starts at its own place in the list
  next_index = (math.floor(os.clock() * 1000003) % #requests) + 1
end

function request()
  local r = requests[next_index]
  next_index = next_index % #requests + 1
  return r
end

function done(summary, latency, _)
  local seconds = summary.duration / 1e6
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.status + e.timeout
  io.write(string.format("requests=%d seconds=%.2f rps=%.0f p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, seconds, summary.requests / seconds,
    latency:percentile(50), latency:percentile(99), errors))
end
