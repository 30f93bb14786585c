-- rotate.lua plus a count of the Cache-Status detail of every response: prints WRKSTATUS {"disk": n, "other": n}.
-- Parsing each response's headers in Lua slows wrk down, so the runner uses this only for a short check run,
-- never for the timed ones.
local paths = {}
local index = 1
local counter = 0
local threads = {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then table.insert(paths, line) end
  end
  index = ((id or 1) * 7919) % #paths + 1
  disk = 0
  other = 0
end

function request()
  local path = paths[index]
  index = index % #paths + 1
  return wrk.format("GET", path)
end

function response(status, headers, body)
  local value = headers["Cache-Status"] or headers["cache-status"] or ""
  if string.find(value, "detail=disk", 1, true) then disk = disk + 1 else other = other + 1 end
end

function done(summary, latency, requests)
  local d, o = 0, 0
  for _, thread in ipairs(threads) do
    d = d + (thread:get("disk") or 0)
    o = o + (thread:get("other") or 0)
  end
  io.write(string.format('WRKSTATUS {"disk": %d, "other": %d, "requests": %d}\n', d, o, summary.requests))
end
