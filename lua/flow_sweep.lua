--[[ flow_sweep — the leader's repair of a running flow that stopped moving.

A flow whose last change (field `at`) is the one the caller read, and so has not moved since,
gets: each step of `lost` still queued or running (its job found nowhere: its stream, delayed
set or limit waits) recorded dead, with the error record {"error": "lost", ...}
(lua/includes/flow_end.lua: the flow fails, or goes on past a step of on_failure "continue");
each step of `release` not released yet whose parents all ended (by their states) released
(flow_release.lua);
and a flow whose steps all ended, ended. A flow that moved meanwhile is left alone (the caller
looks again at the next sweep).

KEYS[1] flow   {p}:flow:<flow id>
KEYS[2] stream a stream of the flow's partition ({p}:queue:<queue>: its tag)
KEYS[3..] the streams of the steps that may be released, and for a flow a schedule started, its
          history, hash, pending set and its starter's stream (flow_end.lua)
ARGV[1] flow id   ARGV[2] at (the `at` field the caller read)
ARGV[3] lost      step numbers, "3,4" ('' = none)
ARGV[4] release   step numbers, "5" ('' = none)

Returns {OK=5, steps changed} | {CONFLICT=-3} the flow moved or ended since the caller read it
(nothing done) | {WRONG_TYPE=-6} the key is of another type.
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include flow_end

local fkey, stream = KEYS[1], KEYS[2]
local fid, at, lost, release = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not key_is(fkey, 'hash') then return {WRONG_TYPE} end
local meta = rcall('HMGET', fkey, 'state', 'at')
if meta[1] ~= 'running' or (meta[2] or '') ~= at then return {CONFLICT} end
local now = now_ms()
local tag = string.match(stream, '^(.-}):queue:')
local changed = 0
for n in string.gmatch(lost, '%d+') do
  local s = rcall('HMGET', fkey, n .. '.s', n .. '.a')
  if s[1] == 'q' or s[1] == 'r' then
    flow_end(stream, fid, n, 'd', s[2] or '1',
             '{"error":"lost","message":"its job was found nowhere: removed by hand?"}', now)
    changed = changed + 1
  end
end
-- Whether every parent of step n ended (its definition names them).
local function parents_ended(def)
  local ok, d = pcall(cjson.decode, def)
  if not ok or type(d) ~= 'table' then return false end
  for p in string.gmatch(d[7] or '', '%d+') do
    if not FLOW_ENDED[rcall('HGET', fkey, p .. '.s') or ''] then return false end
  end
  return true
end

for n in string.gmatch(release, '%d+') do
  local s = rcall('HMGET', fkey, n, n .. '.s')
  if s[1] and not s[2] and rcall('HGET', fkey, 'state') == 'running' and parents_ended(s[1]) then
    rcall('HDEL', fkey, n .. '.w')
    flow_release(fkey, tag, fid, n, now)
    changed = changed + 1
  end
end
if rcall('HGET', fkey, 'state') == 'running' and (tonumber(rcall('HGET', fkey, 'left')) or 1) <= 0 then
  flow_over(fkey, now)
  changed = changed + 1
end
return {OK, changed}
