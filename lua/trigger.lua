--[[ trigger — one extra run of a schedule now, through its overlap policy. The regular
occurrences are not moved. The run counts towards max_runs.

KEYS[1] schedules  KEYS[2] hash  KEYS[3] history  KEYS[4] pending  KEYS[5] stream
KEYS[6] op  KEYS[7] backlogs  KEYS[8] parked bucket ({p}:parked:<n>, see park.lua)
KEYS[9] parked ({p}:parked)  KEYS[10] runs (optional: the runs log, where a trigger the overlap
policy skips is recorded)
ARGV[1] id  ARGV[2] history cap  ARGV[3] cancel channel  ARGV[4] op_id (request id)

Returns {code, execution_id}: code FIRED=1, SKIPPED=2 by the overlap policy, BUFFERED=3
(buffer_one, buffer_all: pending behind the unfinished run);
{NOT_FOUND=-2} | {COMPLETED=-4} | {WRONG_TYPE=-6} a key has the wrong type, or the hash holds
fields rsched did not write (no task, a number field that is not a number). A re-sent call
returns the first result (the execution id is derived from the Redis time of the first call).
]]
-- @include common
-- @include marker
-- @include runs_log
-- @include fire_job
-- @include placement

local replay = op_replay(KEYS[6], ARGV[4])
if replay then return replay end
fire_job_runs(KEYS[10])
local k = {hash = KEYS[2], history = KEYS[3], pending = KEYS[4], stream = KEYS[5]}
if not (key_is(KEYS[1], 'zset') and key_is(k.hash, 'hash') and key_is(k.history, 'list')
        and key_is(k.pending, 'zset') and key_is(k.stream, 'stream')
        and key_is(KEYS[7], 'zset') and key_is(KEYS[8], 'zset') and key_is(KEYS[9], 'zset')) then
  return {-6}  -- WRONG_TYPE
end
local f = job_fields(k.hash)
if not f[F_VERSION] then return {-2} end  -- NOT_FOUND
if f[F_STATUS] == 'completed' then return {-4} end  -- COMPLETED
local p = hash_policy(f)
if not p or not fire_job_ok(f) then return {-6} end  -- WRONG_TYPE
local now = now_ms()
local sched = int_text(now)
local code, exec, run_until = fire_job(k.hash, k.history, k.pending, k.stream, ARGV[1], sched,
                                       now, 'manual', tonumber(ARGV[2]), ARGV[3], nil, f, p,
                                       false, KEYS[7])
if code > 0 and advance(k.hash, sched, '', code ~= 2, false, p, run_until and exec, run_until) then
  rcall('ZADD', KEYS[1], 'inf', ARGV[1])  -- completed (max_runs reached)
  unpark_one(KEYS[8], KEYS[9], ARGV[1])
end
return op_store(KEYS[6], ARGV[4], {code, exec})
