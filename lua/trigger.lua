--[[ trigger — one extra run of a schedule now, through its overlap policy. The regular
occurrences are not moved. The run counts towards max_runs.

KEYS[1] schedules  KEYS[2] hash  KEYS[3] history  KEYS[4] pending  KEYS[5] stream
KEYS[6] op  KEYS[7] backlogs  KEYS[8] parked bucket ({p}:parked:<n>, see park.lua)
KEYS[9] parked ({p}:parked)  KEYS[10] runs (the runs log, where a trigger the overlap policy
skips is recorded)  KEYS[11] delayed ({p}:delayed:<queue of the schedule>, where the job of a
schedule with a debounce waits)  KEYS[12] audit ({p}:audit, docs/audit.md)
KEYS[13] activity (optional: the partition's activity counters {p}:activity, activity.lua: a
manual run counts as fired, or skipped by the policy)
KEYS[14..] (optional, after KEYS[13]) the runs log's label index keys of the schedule's labels
(runs_log.label_index_keys, run_index.lua), where a skipped trigger's record, which carries the
labels, is indexed: the caller read them before the call, and a pair it did not declare (the
labels changed meanwhile) is not indexed
ARGV[1] id  ARGV[2] history cap  ARGV[3] cancel channel  ARGV[4] op_id (request id)
ARGV[5] audit  who and from where (lua/includes/audit_ctx.lua)
ARGV[6] optional: the W3C traceparent the job carries ("00-<trace id>-<span id>-<flags>",
        lowercase hex; absent or '': none), sent only by a client that traces

Appends one record to the audit trail (action trigger; its note: the execution id and what
became of it).

Returns {code, execution_id}: code FIRED=1, SKIPPED=2 by the overlap policy, BUFFERED=3
(buffer_one, buffer_all: pending behind the unfinished run), DEBOUNCED=9 merged into the
schedule's open debounce window (the execution id is the window's);
{NOT_FOUND=-2} | {COMPLETED=-4} | {WRONG_TYPE=-6} a key has the wrong type, or the hash holds
fields rsched did not write (no task, a number field that is not a number) | {BAD_ARGS=-7} the
audit argument or the traceparent is malformed (nothing written). A re-sent call
returns the first result (the execution id is derived from the Redis time of the first call,
or the millisecond after the schedule's last run when that is later: each trigger's execution
id is its own).
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store
-- @include job_fields
-- @include hash_plan
-- @include job_state
-- @include fire_job
-- @include advance
-- @include unpark_one
-- @include audit_ctx
-- @include audit
-- @include activity
-- @include traceparent

local schedules_key, hash, history, pending, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op_key, backlogs_key, bucket_key, parked_key, runs_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9],
  KEYS[10]
local delayed, audit_key = KEYS[11], KEYS[12]
local sid, cap, cancel_channel, op_id = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local tp = traceparent(ARGV[6])
if tp == false then return {BAD_ARGS} end

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(schedules_key, 'zset') and key_is(hash, 'hash') and key_is(history, 'list')
        and key_is(pending, 'zset') and key_is(stream, 'stream') and key_is(backlogs_key, 'zset')
        and key_is(bucket_key, 'zset') and key_is(parked_key, 'zset')
        and key_is(delayed, 'zset')) then
  return {WRONG_TYPE}
end
local ctx, refused = audit_ctx(audit_key, ARGV[5])
if not ctx then return {refused} end
local f = job_fields(hash)
if not f[F_VERSION] then return {NOT_FOUND} end
if f[F_STATUS] == 'completed' then return {COMPLETED} end
local p = hash_plan(f)
local runs, gen = job_state(f)
if not p or not runs then return {WRONG_TYPE} end
p.delayed = delayed
local now = now_ms()
local shared = {now = now, cap = cap, cancel = cancel_channel, backlogs = backlogs_key,
                runs = runs_key}
-- Two triggers in one millisecond (or a trigger in the millisecond of a fire) would write two
-- jobs of one execution id: the run takes the next millisecond after the last run instead.
local last = tonumber(rcall('HGET', hash, 'last_run'))
local sched = int_text((last and last >= now) and last + 1 or now)
local code, exec, run_until = fire_job(shared, hash, history, pending, stream, sid, sched,
                                       'manual', nil, f, gen, p, false, nil, tp)
if code > 0 and advance(hash, sched, '', code == FIRED or code == BUFFERED, false, p, runs,
                        run_until and exec, run_until) then
  rcall('ZADD', schedules_key, 'inf', sid)  -- completed (max_runs reached)
  unpark_one(bucket_key, parked_key, sid)
end
if code == FIRED or code == SKIPPED then
  activity(KEYS[13], now, {fired = code == FIRED and 1 or 0, skipped = code == SKIPPED and 1 or 0})
end
local outcomes = {[FIRED] = 'fired', [SKIPPED] = 'skipped', [BUFFERED] = 'buffered',
                  [DEBOUNCED] = 'debounced'}
audit(ctx, 'trigger', sid, tonumber(gen), tonumber(gen), nil,
      exec .. ' ' .. (outcomes[code] or tostring(code)))
return op_store(op_key, op_id, {code, exec})
