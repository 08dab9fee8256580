--[[ finish — the schedule's side of a run whose job ran from another partition's stream: a
job holding limits runs from partition 0, where every limit lives (docs/limits.md), while its
schedule's history and run marker stay in the schedule's partition. Called after the script
that acknowledged the job there: records the attempt's event in the schedule's history and,
when the run is over (not between retries), ends it (run marker cleared, the oldest pending
occurrence released into the schedule's stream, finish_run.lua) and, for a schedule that pauses
after failed runs, counts it (failure_streak.lua: a dead run may pause the schedule).
Nothing is written for a removed schedule. A call re-sent after a lost reply records the event
a second time; the run is ended, and counted, once.

KEYS[1] stream   {p}:queue:<queue>[#level] of the schedule's partition (what waits is released
                 there)
KEYS[2] history  {p}:history:<id>   KEYS[3] hash {p}:schedule:<id>   KEYS[4] pending {p}:pending:<id>
ARGV[1] history cap   ARGV[2] execution id   ARGV[3] attempt   ARGV[4] event
ARGV[5] extra (JSON fragment, '' or ',…')   ARGV[6] '1' when the run is over, else '0'
ARGV[7] optional: '1' when the job says its schedule pauses after failed runs (its end is
        counted: a completed run clears the count, a dead one adds to it)
ARGV[8] optional, with ARGV[7]: the run's error (for the pause note, at most 300 characters)

Returns OK=5 ({OK=5, count} when the schedule paused itself after count failed runs in a row) |
WRONG_TYPE=-6 a key has another type (nothing written).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include job_event
-- @include schedule_keys_ok
-- @include schedule_exists
-- @include finish_run
-- @include failure_streak

local stream, history, hash, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cap, exec, attempt, event, extra = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not (key_is(stream, 'stream') and schedule_keys_ok(history, hash, pending)) then
  return WRONG_TYPE
end
local paused = nil
if schedule_exists(hash) then
  local now = now_ms()
  job_event(history, cap, event, exec, attempt, now, extra)
  if ARGV[6] == '1' then
    finish_run(hash, pending, stream, history, cap, exec, now)
    if ARGV[7] == '1' and (event == 'completed' or event == 'dead') then
      paused = failure_streak(hash, exec, event == 'dead', ARGV[8] or '', now)
    end
  end
end
if paused then return {OK, paused} end
return OK
