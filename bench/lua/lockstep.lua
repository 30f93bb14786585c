-- wrk script: every thread walks the same list of paths (one per line, file named by the first script argument)
-- from the same first path, one path per request: the clients ask for the same URLs at about the same moment, as a
-- crawler fleet walking one list does (issue 27, hole 7). done() prints one JSON line the runner parses.
local paths = {}
local index = 1

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then table.insert(paths, line) end
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
