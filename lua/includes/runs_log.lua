-- Include: runs_log — one compact record per run that ended or occurrence that was dropped, on
-- the capped stream {p}:runs (the runs log across schedules, docs/keys.md).
-- Needs: common.lua.
--
-- RUN_FIELDS: the record's field names, always all of them and in this order, so that Redis
--   stores the names once per stream node ("same fields" entries) and each record costs only
--   its values. The entry id is the record's time (the run's end, or the drop).
-- run_log(runs, cap, values)
--   XADD runs MAXLEN ~ cap * RUN_FIELDS[i] values[i] … . values is a list of #RUN_FIELDS
--   strings or numbers, built by the caller ('' for what does not apply). cap nil: no trim
--   (the fire path's rare writes; the workers' writes and the leader's sweep keep the cap).
--   Nothing is written when runs is nil or '' (a caller of an older rsched), values is
--   malformed, or runs holds another type: the log is bookkeeping, never a reason to refuse
--   the outcome it records.
-- run_skipped(runs, sid, task, queue, sched, reason)
--   The record of an occurrence that did not run (status 'skipped', the reason in 'etype'):
--   overlap, buffer_full (overlap policies), misfire (misfire=skip), catch_up_limit.

local RUN_FIELDS = {'exec', 'sid', 'task', 'queue', 'status', 'sched', 'fired', 'attempt',
                    'worker', 'dur', 'etype', 'error'}

local function run_log(runs, cap, values)
  if not runs or runs == '' or type(values) ~= 'table' or #values ~= #RUN_FIELDS then return end
  if not key_is(runs, 'stream') then return end
  local args = {'*'}
  if cap and cap >= 1 then args = {'MAXLEN', '~', cap, '*'} end
  for i = 1, #RUN_FIELDS do
    local v = values[i]
    if type(v) ~= 'string' and type(v) ~= 'number' then return end
    args[#args + 1] = RUN_FIELDS[i]
    args[#args + 1] = v
  end
  rcall('XADD', runs, unpack(args))
end

local function run_skipped(runs, sid, task, queue, sched, reason)
  -- A priority level's stream name (q#high) names the queue q.
  run_log(runs, nil, {sid .. '@' .. sched, sid, task or '', string.match(queue, '^[^#]*'),
                      'skipped', sched, '', '', '', '', reason, ''})
end
