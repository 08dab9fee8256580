--[[ fire — fire a batch of due occurrences, each exactly once. Called by the leading scheduler.

Guarantees: nothing is written unless the caller still holds the lease (fencing) and every
argument is well formed. For each item independently: it fires only if the schedule exists, is
active, has the version the scheduler computed from (an updated, or removed and re-created,
schedule never fires its old spec), still has its index score (its next run) equal to `expect`
(this occurrence has not fired yet: a re-sent call or a racing scheduler finds it moved and
does nothing), and `sched` is due by Redis TIME. Each item is validated (key types and stored
fields included) before its first write, so an item is applied whole or not at all, and one bad
item never stops the others. (The hash's type is checked by the HMGET that reads it, the
history's by the item's first write, a push that fails without writing anything when the key
holds another type; the run marker lives in the hash, see marker.lua.)

KEYS[1] leader      STRING lease value "<token>:<owner>"
KEYS[2] schedules   ZSET of schedules by next run
then 4 keys per item, in this order:
  hash      {p}:schedule:<id>
  history   {p}:history:<id>
  buffered  {p}:buffered:<id>
  stream    {p}:queue:<queue of the schedule>

ARGV[1] lease       the caller's lease value "<token>:<owner>"
ARGV[2] cap         history length cap
ARGV[3] cancel      pub/sub channel for cancel_previous
then 1 arg per item: "<id> <version> <expect> <sched> <next> <action> <missed>" (one string,
  fields separated by single spaces; packing them keeps a batch of thousands cheap to send):
  version  the hash's "version" field ("<generation>:<created_at>") the plan was computed
           from ('' = none)
  expect   the next_run the scheduler read (ms)   sched  the occurrence to run (ms)
  next     the following occurrence (ms), or '' when there is none
  action   'fire' (on time), 'misfire' (one run standing for `missed` late occurrences),
           'skip' (misfire policy skip: no job, only history)

Returns one string of comma-separated codes, one per item:
  1 fired   2 skipped by overlap policy   3 buffered (buffer_one)   4 misfire skipped
  0 stale (gone, paused, completed, other version, or already fired; the index entry is
    removed when the hash is gone, and set to +inf when the hash is paused or completed)
  -5 not due yet
  -6 a key of this schedule has the wrong type, or its hash lacks a task or holds a number
     field that is not a number (left untouched)
or a single code for the whole call, nothing written: '-1' the lease is not the caller's;
'-7' malformed arguments; '-8' the schedules index is not a sorted set.
]]
-- @include common
-- @include marker
-- @include fire_job

local leader_key, schedules_key = KEYS[1], KEYS[2]
local lease, cap, cancel_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local KEYS_PER = 4
local ACTIONS = {fire = true, misfire = true, skip = true}
local ITEM = '^(%S+) (%S*) (%-?%d+) (%-?%d+) (%-?%d*) (%a+) (%d+)$'

-- The index is read once for the whole batch (ZMSCORE) and written once at the end; `index`
-- holds each schedule's score as this batch leaves it (a catch_up batch may hold several
-- occurrences of one schedule, each seeing the move of the one before), `moved` the entries to
-- write: a score, or false to remove the entry.
local index, moved = {}, {}

-- A stale item whose index entry disagrees with its hash (hash deleted or edited by hand) would
-- come due again at once, forever: make the index agree with the hash instead. An active
-- schedule's next run lives only in the index, so that entry is left as it is.
local function heal_index(sid, exists, status, score)
  if not exists then
    if score then index[sid], moved[sid] = false, false end
  elseif status and score ~= 'inf' then
    index[sid], moved[sid] = 'inf', 'inf'
  end
end

local n = #ARGV - 3
if n < 0 or #KEYS ~= 2 + n * KEYS_PER or not cap or cap < 1 then return '-7' end
if n == 0 then return '' end
local items, sids = {}, {}
for i = 1, n do
  local it = {string.match(ARGV[3 + i], ITEM)}
  if not it[1] or not ACTIONS[it[6]] then return '-7' end
  items[i], sids[i] = it, it[1]
end
if rcall('GET', leader_key) ~= lease then return '-1' end
if not key_is(schedules_key, 'zset') then return '-8' end
for first = 1, n, 1000 do
  local last = math.min(n, first + 999)
  local scores = rcall('ZMSCORE', schedules_key, unpack(sids, first, last))
  for i = first, last do index[sids[i]] = scores[i - first + 1] end
end

local now = now_ms()
local results = {}
local stream_ok = {}  -- most batches share one queue stream: check its type once

for i = 1, n do
  local b = 3 + (i - 1) * KEYS_PER
  local k = {hash = KEYS[b], history = KEYS[b + 1], buffered = KEYS[b + 2], stream = KEYS[b + 3]}
  local sid, version, expect, sched, nxt, action, missed = unpack(items[i])
  local code, score
  -- One read of the hash (which is also its type check) gives the version check and everything
  -- fire_job and advance need.
  local f = pcall_read('HMGET', k.hash, unpack(JOB_FIELDS))
  if not f then
    code = -6
  elseif f[F_VERSION] ~= version or index[sid] ~= expect or f[F_STATUS] then
    code = 0  -- status is absent exactly when the schedule is active
    heal_index(sid, f[F_VERSION], f[F_STATUS], index[sid])
  elseif not fire_job_ok(f) then
    code = -6
  elseif tonumber(sched) > now then
    code = -5
  elseif action == 'skip' then
    if hist_first(k.history, cap, '{"event":"misfired","policy":"skip","missed":' .. missed ..
                  ',"scheduled_at":' .. sched .. ',"at":' .. int_text(now) ..
                  ',"late_ms":' .. int_text(now - tonumber(sched)) .. '}') then
      score = advance(k.hash, sched, nxt, false, true, f)
      code = 4
    else
      code = -6
    end
  else
    if stream_ok[k.stream] == nil then stream_ok[k.stream] = key_is(k.stream, 'stream') end
    if (f[F_OVERLAP] == 'buffer_one' and not key_is(k.buffered, 'hash'))
        or not stream_ok[k.stream] then
      code = -6
    else
      local origin, extra = 'schedule', ''
      if action == 'misfire' then origin, extra = 'misfire', ',"missed":' .. missed end
      local _, marker
      code, _, marker = fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f)
      if code > 0 then score = advance(k.hash, sched, nxt, code == 1, true, f, marker) end
    end
  end
  if score then index[sid], moved[sid] = score, score end
  results[i] = code
end

local zadd, zrem = {}, {}
for sid, score in pairs(moved) do
  if score then
    local z = #zadd
    zadd[z + 1], zadd[z + 2] = score, sid
  else
    zrem[#zrem + 1] = sid
  end
end
for first = 1, #zadd, 1000 do
  rcall('ZADD', schedules_key, unpack(zadd, first, math.min(#zadd, first + 999)))
end
for first = 1, #zrem, 1000 do
  rcall('ZREM', schedules_key, unpack(zrem, first, math.min(#zrem, first + 999)))
end
return table.concat(results, ',')
