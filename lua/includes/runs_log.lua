-- Include: runs_log — one compact record per run that ended or occurrence that was dropped, on
-- the capped stream {p}:runs (the runs log across schedules, docs/keys.md).
-- Needs: common.lua.
--
-- A record is one field, 'r', holding a JSON array built by the caller (the worker encodes it
-- with the rest of its call): [execution id, schedule id, task, queue, status, scheduled ms,
-- fired ms, attempt, worker, duration ms, error type (a skip: its reason), error message],
-- null for what does not apply. A scheduled run's schedule id and scheduled ms are null: its
-- execution id, <schedule id>@<scheduled ms>, names them (rsched._store.runs_log.record_of). One field
-- rather than twelve: the script hands Redis 6 arguments instead of 28, which halves what a
-- record adds to a completed run's script, and Redis stores the value much as it would the
-- twelve (names once per stream node). The entry id is the record's time (the run's end, or
-- the drop). A job of the high or low level adds a second field, 'p', naming it (a reader of an
-- older rsched reads 'r' alone); the normal level adds none.
--
-- level_of(stream)
--   The priority level a queue stream's name ends with (q#high -> 'high'), nil for normal.
-- run_log(runs, cap, record, level)
--   XADD runs [MAXLEN ~ cap] * r record [p level]. cap nil: no trim (the fire path's rare
--   writes; the workers' writes and the leader's sweep keep the cap). level: level_of the
--   job's stream (nil: normal). Nothing is written when runs is nil
--   (a caller of an older rsched), record is not a non-empty string, or runs holds another
--   type: the log is bookkeeping, never a reason to refuse the outcome it records. The key's
--   type is checked once per script call.
-- run_skipped(runs, sid, task, queue, sched, reason)
--   The record of an occurrence that did not run (status 'skipped', the reason in the error
--   type's place): overlap, buffer_full (overlap policies), misfire (misfire=skip),
--   catch_up_limit. sched is the occurrence's ms as text (digits).
-- run_superseded(runs, stream, exec, task, attempt, worker)
--   The record of a job acknowledged unrun because a newer run of its schedule replaced it
--   (start.lua; status 'cancelled', reason 'superseded' in the error type's place): the queue
--   comes from the stream's name.

local runs_log_ok = nil

local function level_of(stream)
  return string.match(stream, '#(%a+)$')
end

local function run_log(runs, cap, record, level)
  if not runs or type(record) ~= 'string' or record == '' then return end
  if runs_log_ok == nil then runs_log_ok = key_is(runs, 'stream') end
  if not runs_log_ok then return end
  local entry = {'*', 'r', record}
  if level then entry[4], entry[5] = 'p', level end
  if cap and cap >= 1 then
    rcall('XADD', runs, 'MAXLEN', '~', cap, unpack(entry))
  else
    rcall('XADD', runs, unpack(entry))
  end
end

local function run_skipped(runs, sid, task, queue, sched, reason)
  -- A priority level's stream name (q#high) names the queue q.
  run_log(runs, nil, '[' .. json_str(sid .. '@' .. sched) .. ',null,' ..
                     json_str(task or '') .. ',' .. json_str(string.match(queue, '^[^#]*')) ..
                     ',"skipped",null,null,null,null,null,"' .. reason .. '",null]',
          level_of(queue))
end

local function run_superseded(runs, stream, exec, task, attempt, worker)
  local queue = string.match(stream, '}:queue:([^#]*)') or ''
  run_log(runs, nil, '[' .. json_str(exec) .. ',null,' ..
                     json_str(task or '') .. ',' .. json_str(queue) .. ',"cancelled",null' ..
                     ',null,' .. (tonumber(attempt) or 'null') .. ',' ..
                     json_str(worker) .. ',null,"superseded",null]', level_of(stream))
end
