--[[ limit_resume — start the jobs waiting on limit keys that are ready (docs/limits.md).

A key is ready when a hold on it was released, its rate window opened, or an operator changed
its numbers (the ready set, scored by when). The ready keys take turns: each turn, every ready
key's first waiting job (by level, then arrival) is looked at, so that a key with thousands
waiting never delays another key's first job by more than one turn. A job that may now hold
all its keys takes them (limit_grant: the hold lasts ARGV[1] ms until the worker that reads it
renews it) and goes back on its stream, where the next read of any worker finds it, holding
its keys; one that another of its keys stops waits on that key instead. A key whose first job
is of a stream this caller was not given is left ready for a worker of that queue.
Lapsed holds and starts out of their window are purged first. Running it twice moves what is
ready then: nothing twice.

KEYS[1]..KEYS[11] the limits' keys (rsched._core.keys.Keys.limits; lua/includes/limit_keys.lua)
KEYS[12..]        the streams of the caller's queues, every level (partition 0)
ARGV[1] hold ms   ARGV[2] most jobs moved by the call

Returns {moved, ms until the next ready key is due (-1: none)} | {WRONG_TYPE=-6} a limits key
or a stream has another type (nothing done).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_purge
-- @include limit_head
-- @include limit_check
-- @include limit_grant
-- @include limit_waits

local L = limit_keys(1)
local hold_ms, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
if not limit_keys_ok(L) then return {WRONG_TYPE} end
local served = {}
for i = 12, #KEYS do
  if not key_is(KEYS[i], 'stream') then return {WRONG_TYPE} end
  served[KEYS[i]] = true
end
local now = now_ms()
local cache = {}
local moved = 0

-- One turn of a ready key: start its first waiting job, or learn that the key gives no more
-- now. Returns true when the key may give another job this call.
local function turn(key)
  local head = limit_head(L, key)
  if not head then
    rcall('ZREM', L.ready, key)
    return false
  end
  local order, exec = string.match(head, '^.-%z([^%z]*)%z(.*)$')
  local ok, rec = pcall(cjson.decode, rcall('HGET', L.jobs, exec or '') or '')
  if not (order and ok and type(rec) == 'table' and type(rec.f) == 'table'
          and type(rec.l) == 'table' and type(rec.s) == 'string') then
    -- Not a waiting job rsched wrote: dropped, so that it cannot block the key.
    rcall('ZREM', L.waiting, head)
    if exec then rcall('HDEL', L.jobs, exec) end
    return true
  end
  if not served[rec.s] then return false end
  rcall('ZREM', L.waiting, head)
  local plan, stop, when = limit_check(L, now, exec, order, rec.l, cache)
  if plan then
    limit_grant(L, now, exec, plan, now + hold_ms)
    rcall('XADD', rec.s, '*', unpack(rec.f))
    rcall('HDEL', L.jobs, exec)
    limit_waits(L, rec, -1)
    moved = moved + 1
    return true
  end
  -- Stopped again: it waits on the key that stops it, keeping its place.
  rcall('ZADD', L.waiting, 0, stop .. '\0' .. order .. '\0' .. exec)
  if stop ~= key then
    limit_waits(L, rec, -1)
    rec.k = stop
    limit_waits(L, rec, 1)
    rcall('HSET', L.jobs, exec, cjson.encode(rec))
    if when >= 0 then rcall('ZADD', L.ready, 'LT', when, stop) end
    return true
  end
  if when >= 0 then rcall('ZADD', L.ready, when, key) else rcall('ZREM', L.ready, key) end
  return false
end

limit_purge(L, now)
local keys = rcall('ZRANGEBYSCORE', L.ready, '-inf', now, 'LIMIT', 0, budget)
-- Turns that move no job (a job passed to another key, a record dropped) are bounded too.
local turns = 0
while #keys > 0 and moved < budget and turns < budget * 4 do
  local again = {}
  for _, key in ipairs(keys) do
    if moved >= budget then break end
    turns = turns + 1
    if turn(key) then again[#again + 1] = key end
  end
  keys = again
end
local nxt = rcall('ZRANGE', L.ready, 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return {moved, wait}
