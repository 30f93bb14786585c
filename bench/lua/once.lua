-- wrk script: every path of a list asked exactly once (file named by the first script argument; the second is the
-- number of wrk threads). Thread i of n takes the paths i, i+n, i+2n, ... in order. When its last answer is in it
-- prints one line, ONCEDONE {"requests": n, "fleet": n, "hit": n, "errors": n}, flushes, and stops; the runner
-- (bench/fleet.py) takes the time when every thread has said so and ends wrk itself. No path is asked twice: wrk
-- calls delay() once before each request() of a connection, so delay() hands out the paths (a delay of 0) and, when
-- none is left, parks the connection for an hour (wrk is ended long before that). "fleet" counts the answers whose
-- Cache-Status says detail=fleet (imagecached served it from its fleet tier), "hit" those whose Cache-Status says
-- hit or whose X-Cache says HIT (nginx, Varnish). A request lost to a connection error is never answered, so its
-- thread never reports: the runner's time limit ends the run and says so.
local mine = {}
local index = 1      -- the next path request() sends
local reserved = 0   -- paths handed out by delay(); index never passes it
local answered, fleet, hit, errors = 0, 0, 0, 0
local finished = false
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

function init(args)
  local n = tonumber(args[2]) or 1
  local i = 0
  for line in io.lines(args[1]) do
    if #line > 0 then
      if i % n == (id or 1) - 1 then table.insert(mine, line) end
      i = i + 1
    end
  end
end

function delay()
  if reserved < #mine then
    reserved = reserved + 1
    return 0
  end
  return 3600000
end

function request()
  if index > reserved then
    -- no delay() before it: wrk checking the script's request once at start, before any is sent
    return wrk.format("GET", mine[1] or "/")
  end
  local path = mine[index]
  index = index + 1
  return wrk.format("GET", path)
end

function response(status, headers, body)
  if finished then return end
  answered = answered + 1
  if status ~= 200 then errors = errors + 1 end
  local cs = headers["Cache-Status"] or headers["cache-status"] or ""
  if string.find(cs, "detail=fleet", 1, true) and not string.find(cs, "fleet-unavailable", 1, true) then
    fleet = fleet + 1
  end
  local xc = headers["X-Cache"] or headers["x-cache"] or ""
  if string.find(cs, "; hit", 1, true) or xc == "HIT" then hit = hit + 1 end
  if answered >= #mine then
    finished = true
    io.write(string.format('ONCEDONE {"requests": %d, "fleet": %d, "hit": %d, "errors": %d}\n', answered, fleet, hit, errors))
    io.flush()
    wrk.thread:stop()
  end
end
