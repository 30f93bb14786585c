-- wrk script: each thread walks a list of paths (one per line, file named by the first script argument),
-- starting at its own offset, or with a second argument "lockstep" every thread from the first path, so the clients
-- ask for the same URLs at about the same moment, as a crawler fleet walking one list does (the lock-step
-- revalidation scenario); done() prints one JSON line the runner parses.
local paths = {}
local index = 1
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then table.insert(paths, line) end
  end
  if args[2] == "lockstep" then
    index = 1
  else
    index = ((id or 1) * 7919) % #paths + 1
  end
end

function request()
  local path = paths[index]
  index = index % #paths + 1
  return wrk.format("GET", path)
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
                 + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    'WRKJSON {"requests": %d, "bytes": %d, "duration_us": %d, "errors": %d, "p50_us": %d, "p99_us": %d, "p999_us": %d, "mean_us": %d, "max_us": %d}\n',
    summary.requests, summary.bytes, summary.duration, errors,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.mean, latency.max))
end
