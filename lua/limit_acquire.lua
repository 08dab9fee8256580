--[[ limit_acquire — jobs a worker read that hold limits (docs/limits.md) start, or wait aside.

For each item, in order: when the job may hold every one of its limit keys now (limit_check),
it takes them (a hold on each, renewed by the worker's heartbeat, and a start in the window of
each rated key) and the worker runs it. Otherwise it waits on the first key that stops it: its
entry is acknowledged and deleted from the stream, and the job (its fields, stream, limits and
waiting order) is kept in the limits' jobs hash, listed under the key in the waiting set, so
that a key at its limit never blocks the stream for other keys; a resume call (limit_resume.lua)
puts it back on its stream holding its keys once the key lets it start. The holds are taken in
this call only (all or none), so two jobs that share keys in any order never deadlock.
Lapsed holds (a dead worker's) and starts out of their window are purged first.
Running it twice: a job granted by the first call holds its keys (it runs, nothing counted
again); one parked by it is found waiting (LIMITED again, with its key).

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
KEYS[12..]        the streams the items were read from ({p}:queue:<queue>[#level], partition 0)
ARGV[1] group   ARGV[2] hold ms (a hold lapses this long after its grant or last renewal)
ARGV[3] items   JSON array of [stream (index into KEYS from 12 = 1), entry id, execution id,
                order ('' = a job not parked before: its level and entry id), limits
                [ [template, key, concurrency|null, rate count, rate ms], …] ]

Returns a JSON array of the items that may not run, each [item index (1-based), code, key]:
LIMITED=8 it waits on key (out of the stream) | NOT_PENDING=-10 the entry is gone (do not run
it); every other item holds its keys: OK=5, run it ('[]' when all may run: one string to parse,
not a reply per item). Or {BAD_ARGS=-7} when ARGV[3] is not a JSON array | {WRONG_TYPE=-6} a
limits key has another type (nothing done).
]]
-- @include codes
-- @include rcall
-- @include now_ms
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_purge
-- @include limit_check
-- @include limit_grant
-- @include limit_release
-- @include limit_park

local L = limit_keys(1)
local group, hold_ms = ARGV[1], tonumber(ARGV[2])
local ok, items = pcall(cjson.decode, ARGV[3])
if not ok or type(items) ~= 'table' then return {BAD_ARGS} end
if not limit_keys_ok(L) then return {WRONG_TYPE} end
local RANK = {high = '0', low = '2'}
local now = now_ms()
local cache = {}

-- A job's place among a key's waiting jobs: its level, then when it entered its stream (its
-- entry id: ms and sequence), so that jobs of one millisecond keep their order.
local function order_of(stream, given, id)
  if given ~= '' then return given end
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return (RANK[string.match(stream, '#(%a+)$') or ''] or '1')
         .. string.format('%013d%06d', tonumber(ms) or now, tonumber(seq) or 0)
end

-- The entry's fields, its order field set (a job parked again keeps its place).
local function fields_of(stream, id, order)
  local e = rcall('XRANGE', stream, id, id)[1]
  local f = {}
  if e then
    for i = 1, #e[2], 2 do
      if e[2][i] ~= 'limit_order' then
        f[#f + 1] = e[2][i]
        f[#f + 1] = e[2][i + 1]
      end
    end
  end
  f[#f + 1] = 'limit_order'
  f[#f + 1] = order
  return f
end

local function acquire(stream, id, exec, order, lims)
  -- A call re-sent after a lost reply finds the job it parked (a granted one holds its keys).
  local parked = rcall('HGET', L.jobs, exec)
  if parked then
    local dok, r = pcall(cjson.decode, parked)
    if dok and type(r) == 'table' and type(r.k) == 'string' then return LIMITED, r.k end
  end
  local plan, key, when = limit_check(L, now, exec, order, lims, cache)
  if plan then
    limit_grant(L, now, exec, plan, now + hold_ms)
    return OK
  end
  -- A reclaimed job may still hold some of its keys: waiting, it holds none.
  local keys = {}
  for i, lim in ipairs(lims) do keys[i] = {lim[2], lim[1]} end
  limit_release(L, now, exec, keys, cache)
  if rcall('XACK', stream, group, id) == 0 then return NOT_PENDING, '' end
  local rec = {o = order, s = stream, f = fields_of(stream, id, order), l = lims, t = now}
  rcall('XDEL', stream, id)
  limit_park(L, exec, order, key, when, rec)
  cache.waiting = true
  return LIMITED, key
end

limit_purge(L, now)
local out = {}
for i, it in ipairs(items) do
  local stream = KEYS[11 + tonumber(it[1])]
  local code, key = acquire(stream, it[2], it[3], order_of(stream, it[4], it[2]), it[5])
  if code ~= OK then out[#out + 1] = {i, code, key} end
end
if #out == 0 then return '[]' end
return cjson.encode(out)
