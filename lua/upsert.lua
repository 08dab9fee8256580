--[[ upsert — create or replace a schedule's spec; every write bumps its generation.

The spec fields replace the old ones whole (absent = default); engine state (creation time,
runs, last_run, the run marker) is kept. A buffered occurrence of the old spec is dropped so the
old spec never fires. The hash's "version" field is "<generation>:<created_at>" (ms): what
fire.lua compares, one field where two would cost 16 bytes more a schedule.

KEYS[1] schedules  ZSET of schedules by next run
KEYS[2] hash       {p}:schedule:<id>
KEYS[3] buffered   {p}:buffered:<id>
KEYS[4] queues     SET of queue names
KEYS[5] op         {p}:ops:<minute> (replay protection)
ARGV[1] id
ARGV[2] mode       'add' (fail if it exists) | 'upsert' | 'replace' (fail if it does not exist)
ARGV[3] expect_gen generation the caller read ('0' = must not exist yet), or '' for any
ARGV[4] next_ms    first run computed by the client from Redis TIME, or '' when none is left
ARGV[5] paused     '1' or '0'
ARGV[6] queue      queue name (for the queues set)
ARGV[7] wake       pub/sub channel told when the schedule is due earlier than any before
ARGV[8] op_id      request id of this call
ARGV[9] created_ms creation time the client computed next_ms with (used for a new schedule)
ARGV[10..] spec    field, value, field, value, … (non-default spec fields only)

Returns {OK=5, generation, created(0/1)} | {EXISTS=-9} (add) | {NOT_FOUND=-2} (replace) |
{CONFLICT=-3, generation} the generation moved since the caller read it | {WRONG_TYPE=-6} a key
has the wrong type (or the stored generation/runs are not numbers) | {BAD_ARGS=-7} malformed
arguments
]]
-- @include common
-- @include marker

local schedules_key, hash_key, buffered_key, queues_key, op_key = KEYS[1], KEYS[2], KEYS[3],
    KEYS[4], KEYS[5]
local id, mode, expect_gen, next_ms, paused = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local queue, wake, op_id, created_ms = ARGV[6], ARGV[7], ARGV[8], ARGV[9]

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(schedules_key, 'zset') and key_is(hash_key, 'hash') and
        key_is(queues_key, 'set') and key_is(buffered_key, 'hash')) then
  return {-6}  -- WRONG_TYPE
end

local MODES = {add = true, upsert = true, replace = true}
if not MODES[mode] or not (next_ms == '' or tonumber(next_ms)) or not tonumber(created_ms)
    or op_id == '' or (#ARGV - 9) % 2 ~= 0 then
  return {-7}  -- BAD_ARGS
end

-- The state a new spec inherits: version, runs, last_run, then the run marker (marker.lua).
local old = rcall('HMGET', hash_key, 'version', 'runs', 'last_run', unpack(MARKER))
local exists = old[1] ~= false
local old_gen, created = version_parts(old[1])
-- State fields edited by hand would make the arithmetic below fail after the first write.
if (exists and not old_gen) or (old[2] and not tonumber(old[2])) then return {-6} end  -- WRONG_TYPE
if mode == 'add' and exists then return {-9} end  -- EXISTS
if mode == 'replace' and not exists then return {-2} end  -- NOT_FOUND
if expect_gen ~= '' and tostring(old_gen or 0) ~= expect_gen then
  return {-3, old_gen or 0}  -- CONFLICT
end

local now = int_text(now_ms())
local gen = (old_gen or 0) + 1
local runs = tonumber(old[2] or '0')

local spec = {}
local max_runs = nil
for i = 10, #ARGV, 2 do
  spec[#spec + 1] = ARGV[i]
  spec[#spec + 1] = ARGV[i + 1]
  if ARGV[i] == 'max_runs' then max_runs = tonumber(ARGV[i + 1]) end
end

rcall('DEL', hash_key, buffered_key)
rcall('HSET', hash_key, 'version', gen .. ':' .. (created or created_ms), unpack(spec))
-- A schedule never changed since its creation has no updated_at (readers take created_at): at
-- 100k schedules the field would cost ~30 bytes each for nothing.
if exists then rcall('HSET', hash_key, 'updated_at', now) end
if runs > 0 then rcall('HSET', hash_key, 'runs', runs) end
if old[3] then rcall('HSET', hash_key, 'last_run', old[3]) end
-- A run of the old spec still counts for the overlap policy of the new one.
for i = 1, #MARKER do
  if old[3 + i] then rcall('HSET', hash_key, MARKER[i], old[3 + i]) end
end

local score = 'inf'
if next_ms == '' or (max_runs and runs >= max_runs) then
  rcall('HSET', hash_key, 'status', 'completed')
elseif paused == '1' then
  rcall('HSET', hash_key, 'status', 'paused')
else
  score = next_ms  -- the next run lives in the index only (its score), not in the hash
end

local head = rcall('ZRANGE', schedules_key, 0, 0, 'WITHSCORES')
rcall('ZADD', schedules_key, score, id)
rcall('SADD', queues_key, queue)
if score ~= 'inf' and (not head[2] or tonumber(score) < tonumber(head[2])) then
  rcall('PUBLISH', wake, score)
end
local created = 1
if exists then created = 0 end
return op_store(op_key, op_id, {5, gen, created})  -- OK
