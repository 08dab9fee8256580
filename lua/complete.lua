--[[ complete — record the outcome of a batch of finished runs and acknowledge their entries.

For each item: XACK; when the entry was still pending, XDEL it (the stream holds only entries
not yet finished, so it stays bounded without ever trimming a pending one), record the event
on the schedule's history only while the schedule exists (a job that ends after its schedule
was removed leaves no key behind), end the schedule's run (run marker, release of what waits)
and append the run's record to the runs log.
An entry no longer pending (this call re-sent, or another worker that reclaimed it finished
first) is left alone, so nothing is recorded twice.

KEYS[1] stream  {p}:queue:<queue> (or a priority level's stream)
then per item, in item order: 3 keys when it has a schedule id
  (history {p}:history:<id>, hash {p}:schedule:<id>, pending {p}:pending:<id>), then 1 key
  when its 7th element is 1 (dedup {p}:dedup:<execution id>: an enqueued job with its own
  id, whose window now counts from this end)
ARGV[1] group   ARGV[2] history cap
ARGV[3] items   JSON array of [entry id, execution id, schedule id ('' = none), attempt,
                event ('completed' | 'cancelled'), extra (JSON fragment, '' or ',…'),
                dedup (optional: 1 = a dedup key follows, 0 = none),
                run (optional: the runs log record, a JSON array as text, run_log.lua; '' =
                none),
                limits (optional: the limits the job holds, [ [key, template], … ], released
                here; with ARGV[5]),
                counted (optional: 1 = its schedule pauses after failed runs: a completed run
                clears the count, failure_streak.lua),
                flow, step (optional: a flow step's job: its flow id and step number),
                parent result (optional, with flow: what the step's children get in its place
                in their parent_results, JSON; '' = null) ]
then the runs log's label index keys of the items' labelled records (runs_log.run_index_keys,
  run_index.lua; none when no item has labels), then the flows' hashes {p}:flow:<id> of the
  items that are flow steps with the streams of the steps their ends may release
  (flow_end.lua), then the runs log {p}:runs last
ARGV[4] runs log cap (entries; optional, with the runs key)
                (one argument: a batch of thousands costs the client one encode, not 6 per item)
ARGV[5] optional: the index of the first of the limits' keys (rsched._core.keys.Keys.limits, 11
        keys, given before the runs log) when an item holds limits ('' = none)
ARGV[6] optional: '1' = the last key is the partition's activity counters {p}:activity
        (activity.lua: the call's completed and cancelled runs, counted once), the runs log the
        one before it

Returns the number of items recorded (the others were no longer pending: nothing done), or
BAD_ARGS=-7 when ARGV[3] is not a JSON array, or WRONG_TYPE=-6 when a limits key has another
type (nothing done). (A count, not a code per item: a reply of thousands of
integers would cost the client more than the whole script.)
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include job_event
-- @include schedule_live
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

local stream = KEYS[1]
local group, cap = ARGV[1], tonumber(ARGV[2])
local ok, items = pcall(cjson.decode, ARGV[3])
if not ok or type(items) ~= 'table' then return BAD_ARGS end
-- The runs log is the last key (before the activity counters), given together with its cap.
local activity_key = ARGV[6] == '1' and KEYS[#KEYS] or nil
local runs_cap = tonumber(ARGV[4])
local runs = runs_cap and KEYS[#KEYS - (activity_key and 1 or 0)]
local level = level_of(stream)
local first_limit = tonumber(ARGV[5] or '')
local L = first_limit and limit_keys(first_limit)
local lcache = {}
if L and not limit_keys_ok(L) then return WRONG_TYPE end
local now = now_ms()
local recorded = 0
local counts = {completed = 0, cancelled = 0}
local k = 2
for i = 1, #items do
  local it = items[i]
  local id, exec, sid = it[1], it[2], it[3]
  local attempt, event, extra = it[4], it[5], it[6]
  local history, hash, pending, dedup
  if sid ~= '' then
    history, hash, pending = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    k = k + 3
  end
  if it[7] == 1 then
    dedup = KEYS[k]
    k = k + 1
  end
  if rcall('XACK', stream, group, id) == 1 then
    rcall('XDEL', stream, id)
    if dedup then dedup_finish(dedup) end
    -- The history's type is checked by its first write (job_event), before finish_run's.
    if sid ~= '' and schedule_live(hash) and key_is(pending, 'zset')
       and job_event(history, cap, event, exec, attempt, now, extra) then
      finish_run(hash, pending, stream, history, cap, exec, now)
      if it[10] == 1 and event == 'completed' then failure_streak(hash, exec, false) end
    end
    if runs and it[8] and it[8] ~= '' then run_log(runs, runs_cap, it[8], level) end
    if L and type(it[9]) == 'table' then limit_release(L, now, exec, it[9], lcache) end
    if it[11] and it[11] ~= '' then
      flow_end(stream, it[11], it[12], event == 'completed' and 'c' or 'x', attempt,
               it[13] or '', now)
    end
    recorded = recorded + 1
    if counts[event] then counts[event] = counts[event] + 1 end
  end
end
if recorded > 0 then activity(activity_key, now, counts) end
return recorded
