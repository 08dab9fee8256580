--[[ dead — move a job to its queue's dead-letter stream (retries exhausted, poison, unknown
task, malformed entry, timeout).

Guarantees: acknowledge + delete the entry, write the dead letter, record "dead" (in the
schedule's history while the schedule exists, and in the runs log), end the schedule's run and,
for a schedule that pauses after failed runs, count it (failure_streak.lua: the schedule may
pause itself), all in one step. Running it twice does nothing the second time (the entry is
no longer pending). The dead-letter stream keeps about ARGV[3] newest entries.

KEYS[1] stream    {p}:queue:<queue>
KEYS[2] dead      {p}:dead:<queue>
KEYS[3] history   {p}:history:<id>   (these three are ignored when ARGV[5] is '0')
KEYS[4] hash      {p}:schedule:<id>
KEYS[5] pending   {p}:pending:<id>
KEYS[6] dedup     optional: {p}:dedup:<execution id> of an enqueued job with its own id (its
                  window now counts from this end); any key of another type (the stream) when
                  there is none but KEYS[7] is given
KEYS[7] runs      optional: the runs log {p}:runs (run_log.lua); when given, ARGV[10] and
                  ARGV[11] are the log's cap and the record, and the dead letter fields start
                  at ARGV[12]
ARGV[1] group     ARGV[2] entry id   ARGV[3] dead-letter cap (entries)   ARGV[4] history cap
ARGV[5] has schedule '1' | '0' | '2' (it has one, and the job says its schedule pauses after
        failed runs: this run is counted, with the last error in the argument before the dead
        letter fields)
ARGV[6] execution id   ARGV[7] attempt
ARGV[8] first event  '' or an event recorded before "dead" (e.g. 'timed_out')
ARGV[9] extra        JSON fragment for the history events ('' or ',…')
ARGV[10..] dead letter fields (field, value, …; dead_at is added here), or with KEYS[7]:
ARGV[10] runs log cap   ARGV[11] the record (JSON array, run_log.lua)   ARGV[12..] the fields
KEYS[8] activity  optional, with KEYS[7]: the partition's activity counters {p}:activity
                  (activity.lua: counts the dead run)
then, with KEYS[7], the runs log's label index keys of the record's labels (after the limits'
         keys when there are any; runs_log.run_index_keys, run_index.lua; none without labels)
KEYS[9..19] optional, with KEYS[8]: the limits' keys (rsched._core.keys.Keys.limits); ARGV[12]
         is then the limits the job holds ([ [key, template], … ], released here) and the fields start
         at ARGV[13]
then, for a flow step's job (its dead letter fields name its 'flow' and 'step'), its flow's hash
         {p}:flow:<id> and the streams of the steps its end may release (flow_end.lua: with
         on_failure "fail" the flow fails, with "continue" its children get the error record)
With ARGV[5] '2', the argument where the fields would start is the run's error (for the pause
note, at most 300 characters) and the fields start after it.

Returns {OK=5, dead-letter entry id} ({OK=5, id, count} when the schedule paused itself after
count failed runs in a row) | {NOT_PENDING=-10} the entry was not pending (nothing done) |
{WRONG_TYPE=-6} wrong key type | {BAD_ARGS=-7} the limit keys are not a JSON array.
]]
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include now_ms
-- @include job_event
-- @include schedule_keys_ok
-- @include schedule_exists
-- @include finish_run
-- @include dedup_finish
-- @include level_of
-- @include run_log
-- @include limit_keys
-- @include limit_keys_ok
-- @include limit_release
-- @include failure_streak
-- @include activity
-- @include flow_end

local stream, dead, history, hash, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dedup = KEYS[6]
local group, id, dead_max, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local has_schedule, exec, attempt = ARGV[5] ~= '0', ARGV[6], ARGV[7]
local counted = ARGV[5] == '2'
local first, extra = ARGV[8], ARGV[9]
local runs, runs_cap, run, from = KEYS[7], nil, nil, 10
if runs then runs_cap, run, from = tonumber(ARGV[10]), ARGV[11], 12 end
local L, held = nil, nil
if KEYS[9] and string.find(KEYS[9], '}:limits:', 1, true) then
  L = limit_keys(9)
  local ok
  ok, held = pcall(cjson.decode, ARGV[12])
  if not ok or type(held) ~= 'table' then return {BAD_ARGS} end
  if not limit_keys_ok(L) then return {WRONG_TYPE} end
  from = 13
end
local err = ''
if counted then
  err = ARGV[from]
  from = from + 1
end

if not (key_is(stream, 'stream') and key_is(dead, 'stream')) then return {WRONG_TYPE} end
if rcall('XACK', stream, group, id) == 0 then return {NOT_PENDING} end
rcall('XDEL', stream, id)
local now = now_ms()
local fields = {}
for i = from, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'dead_at'
fields[#fields + 1] = int_text(now)
local dead_id = rcall('XADD', dead, 'MAXLEN', '~', dead_max, '*', unpack(fields))
if dedup then dedup_finish(dedup) end
local paused = nil
if has_schedule and schedule_keys_ok(history, hash, pending) and schedule_exists(hash) then
  if first ~= '' then job_event(history, cap, first, exec, attempt, now, extra) end
  job_event(history, cap, 'dead', exec, attempt, now, extra)
  finish_run(hash, pending, stream, history, cap, exec, now)
  if counted then paused = failure_streak(hash, exec, true, err, now) end
end
if runs then run_log(runs, runs_cap, run, level_of(stream)) end
if L then limit_release(L, now, exec, held) end
activity(KEYS[8], now, {dead = 1})
local flow, step, etype, emsg
for i = from, #ARGV - 1, 2 do
  local name = ARGV[i]
  if name == 'flow' then flow = ARGV[i + 1]
  elseif name == 'step' then step = ARGV[i + 1]
  elseif name == 'error_type' then etype = ARGV[i + 1]
  elseif name == 'error_message' then emsg = ARGV[i + 1] end
end
if flow and flow ~= '' and step then
  flow_end(stream, flow, step, 'd', attempt, cjson.encode({error = etype or '', message = emsg or ''}), now)
end
if paused then return {OK, dead_id, paused} end
return {OK, dead_id}
