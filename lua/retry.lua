--[[ retry — a run failed (or asked for another attempt) and has attempts left: schedule the next
attempt after a delay.

Guarantees: acknowledge + delete the entry and store the next attempt in one step, so a failed
job is never lost nor queued twice. Running it twice does nothing the second time (the entry
is no longer pending). The schedule's running marker is kept: the run is not over.

KEYS[1] stream   {p}:queue:<queue>
KEYS[2] delayed  {p}:delayed:<queue> (the next attempt keeps its level through its 'priority'
                 field: promote puts it back in that level's stream)
KEYS[3] history  {p}:history:<id> (ignored when ARGV[9] is '0')
KEYS[4] hash     optional: {p}:schedule:<id>; when given, the history is written only while
                 the schedule exists (a job retried after its schedule was removed leaves no
                 key behind)
KEYS[5] runs     optional: the runs log {p}:runs (run_log.lua), with ARGV[11] and ARGV[12]
ARGV[1] group
ARGV[2] entry id
ARGV[3] delay_ms        0 = back on the stream at once
ARGV[4] next attempt    the job's fields as a JSON list [field, value, …]
ARGV[5] history cap
ARGV[6] execution id    ARGV[7] attempt that failed
ARGV[8] event           'failed' | 'timed_out' | 'retry' (the handler raised rsched.Retry)
ARGV[9] has history     '1' | '0'
ARGV[10] extra          JSON fragment for the history event ('' or ',…')
ARGV[11] runs log cap (entries; with KEYS[5])
ARGV[12] the runs log record (JSON array, run_log.lua; with KEYS[5])
KEYS[6] activity optional, with KEYS[5]: the partition's activity counters {p}:activity
                 (activity.lua: a failed or timed-out attempt counts as failed)
KEYS[7..17] optional: the limits' keys (rsched._core.keys.Keys.limits, 11), with ARGV[13];
         then, with KEYS[5], the runs log's label index keys of the record's labels
         (runs_log.run_index_keys, run_index.lua; none for a job without labels)
KEYS[7..17] (the limits' keys) with
ARGV[13] the limits the job holds ([ [key, template], … ]): released here, the next attempt takes them
         again when it is read

Returns {OK=5, due ms} | {NOT_PENDING=-10} the entry was not pending (nothing done) |
{WRONG_TYPE=-6} wrong key type | {BAD_ARGS=-7} the next attempt is not a JSON list of strings.
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include decode_fields
-- @include job_event
-- @include schedule_exists
-- @include level_of
-- @include run_log
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_release
-- @include activity

local stream, delayed, history = KEYS[1], KEYS[2], KEYS[3]
local group, id, delay, member = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cap, exec, attempt, event = tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local has_history, extra = ARGV[9] == '1', ARGV[10]
local hash, runs = KEYS[4], KEYS[5]

if not (key_is(stream, 'stream') and key_is(delayed, 'zset')) then return {WRONG_TYPE} end
local fields = decode_fields(member)
if not fields then return {BAD_ARGS} end
local L, held = nil, nil
if KEYS[7] and not run_index_key(runs, KEYS[7]) then
  L = limit_keys(7)
  local ok
  ok, held = pcall(cjson.decode, ARGV[13] or '')
  if not ok or type(held) ~= 'table' then return {BAD_ARGS} end
  if not limit_keys_ok(L) then return {WRONG_TYPE} end
end
if rcall('XACK', stream, group, id) == 0 then return {NOT_PENDING} end
rcall('XDEL', stream, id)
local now = now_ms()
local due = now + math.max(0, math.floor(delay))
if due > now then
  rcall('ZADD', delayed, due, member)
else
  rcall('XADD', stream, '*', unpack(fields))
end
if has_history and key_is(history, 'list') and (not hash or schedule_exists(hash)) then
  job_event(history, cap, event, exec, attempt, now,
            ',"retry_in_ms":' .. int_text(due - now) .. extra)
end
if runs then run_log(runs, tonumber(ARGV[11]), ARGV[12], level_of(stream)) end
if L then limit_release(L, now, exec, held) end
if event ~= 'retry' then activity(KEYS[6], now, {failed = 1}) end
return {OK, int_text(due)}
