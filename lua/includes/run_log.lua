-- Include: run_log(runs, cap, record, level) — add one record to the runs log {p}:runs, the
-- capped stream of every run that ended or occurrence that was dropped, across schedules
-- (docs/keys.md).
--
-- A record is one field, 'r', holding a JSON array built by the caller (the worker encodes it
-- with the rest of its call): [execution id, status, task, worker, duration ms, fired (ms after
-- the scheduled time; since the epoch when there is none), attempt (null: 1; 0: none), queue
-- (null: default), error type (a skip: its reason), error message, [schedule id, scheduled ms]],
-- trailing nulls left out (a completed first attempt on the default queue ends at fired). A
-- scheduled run's execution id, <schedule id>@<scheduled ms>, names its schedule and time, so the
-- last value is written only for another (rsched._store.runs_log.record_of, which also reads the
-- twelve values of earlier versions). One field rather than eleven: the script hands Redis 6
-- arguments instead of 26, which halves what a record adds to a completed run's script, and
-- Redis stores the value much as it would the eleven (names once per stream node).
-- The entry id is the record's time (the run's end, or the drop). A job of the high or low level
-- adds a second field, 'p', naming it (level: level_of the job's stream; nil: normal, which adds
-- none). A job with labels has them after the array, on a line of their own ("[...]\nk=v,k=v",
-- rsched._store.runs_log.run_record): they go in a field of their own, 'l', which a reader that
-- does not know it leaves alone; a record without labels is stored as before. A labelled record
-- is also indexed by its labels (run_index.lua) in the index keys the caller declared.
--
-- XADD runs [MAXLEN ~ cap] * r record [p level]. cap nil: no trim (the fire path's rare writes;
-- the workers' writes and the leader's sweep keep the cap). Nothing is written when runs is nil
-- (the caller has no runs log to write), record is not a non-empty string, or runs holds another
-- type: the log is bookkeeping, never a reason to refuse the outcome it records. The key's type
-- is checked once per script call.
-- @include rcall
-- @include key_is
-- @include run_index

local runs_log_ok = nil

local function run_log(runs, cap, record, level)
  if not runs or type(record) ~= 'string' or record == '' then return end
  if runs_log_ok == nil then runs_log_ok = key_is(runs, 'stream') end
  if not runs_log_ok then return end
  local entry = {'*', 'r', record}
  local cut = string.find(record, '\n', 1, true)
  if cut then entry[3] = string.sub(record, 1, cut - 1) end
  if level then entry[#entry + 1], entry[#entry + 2] = 'p', level end
  if cut then entry[#entry + 1], entry[#entry + 2] = 'l', string.sub(record, cut + 1) end
  local id
  if cap and cap >= 1 then
    id = rcall('XADD', runs, 'MAXLEN', '~', cap, unpack(entry))
  else
    id = rcall('XADD', runs, unpack(entry))
  end
  if cut then run_index(runs, id, string.sub(record, cut + 1)) end
end
