-- Include: runs_log — one compact record per run that ended or occurrence that was dropped, on
-- the capped stream {p}:runs (the runs log across schedules, docs/keys.md).
-- Needs: common.lua.
--
-- RUN_FIELDS: the record's field names, always all of them and in this order, so that Redis
--   stores the names once per stream node ("same fields" entries) and each record costs only
--   its values. The entry id is the record's time (the run's end, or the drop).
-- run_log(runs, cap, values)
--   XADD runs MAXLEN ~ cap * RUN_FIELDS[i] values[i] … . values is a list of #RUN_FIELDS
--   strings or numbers, built by the caller ('' for what does not apply). Nothing is written
--   when runs is nil or '' (a caller of an older rsched), values is malformed, or runs holds
--   another type: the log is bookkeeping, never a reason to refuse the outcome it records.

local RUN_FIELDS = {'exec', 'sid', 'task', 'queue', 'status', 'sched', 'fired', 'attempt',
                    'worker', 'dur', 'etype', 'error'}

local function run_log(runs, cap, values)
  if not runs or runs == '' or type(values) ~= 'table' or #values ~= #RUN_FIELDS then return end
  if not cap or cap < 1 or not key_is(runs, 'stream') then return end
  local args = {'MAXLEN', '~', cap, '*'}
  for i = 1, #RUN_FIELDS do
    local v = values[i]
    if type(v) ~= 'string' and type(v) ~= 'number' then return end
    args[#args + 1] = RUN_FIELDS[i]
    args[#args + 1] = v
  end
  rcall('XADD', runs, unpack(args))
end
