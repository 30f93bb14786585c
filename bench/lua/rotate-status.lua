-- rotate.lua plus a count of the Cache-Status detail of every response: prints WRKSTATUS {"disk": n, "other": n}.
-- Parsing each response's headers in Lua slows wrk down, so the runner uses this only for a short check run,
-- never for the timed ones. rotate.lua is loaded from this script's directory; its setup, init and request are
-- kept, its done replaced.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "rotate.lua")

local threads = {}
local rotate_setup, rotate_init = setup, init

function setup(thread)
  rotate_setup(thread)
  table.insert(threads, thread)
end

function init(args)
  rotate_init(args)
  disk = 0
  other = 0
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
