--[[ start — a worker is about to run a batch of schedule jobs it read.

For each item: when the schedule's run marker (marker.lua) names another execution, this job
was superseded (cancel_previous fired a newer occurrence meanwhile): it is acknowledged, deleted
from the stream and recorded as cancelled, and must not run. Otherwise the marker (when it
names this job) becomes run_state=running with the worker's id, "running" is recorded, and the
job runs. Keys of the wrong type are left alone (the job runs; nothing recorded for them), and
so is a schedule removed since the fire (the job runs; its history is not brought back).
Running it twice records "running" twice at most, "cancelled" once.

KEYS[1] stream  {p}:queue:<queue>
then 2 keys per item: history {p}:history:<id>, hash {p}:schedule:<id>
then, optionally, the runs log {p}:runs: a superseded job is recorded there as cancelled
  (run_log.lua), with the labels of its entry (read only then)
then, optionally, the runs log's label index keys of the items' labelled jobs
  (runs_log.label_index_keys, run_index.lua; none for jobs without labels), where such a record
  is indexed
ARGV[1] group   ARGV[2] history cap   ARGV[3] worker id
then 4 args per item: entry id, execution id, attempt, extra (JSON fragment, '' or ',…')

Returns one code per item: OK=5 run it | SUPERSEDED=-11 (already acknowledged, do not run).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include json_str
-- @include now_ms
-- @include job_event
-- @include schedule_live
-- @include marker_of
-- @include run_superseded

local stream = KEYS[1]
local group, cap, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local n = (#ARGV - 3) / 4
local runs = KEYS[2 + n * 2]
local now = now_ms()
local out = {}

-- The labels of the entry `id` of the stream ("k=v,k=v"), or nil: it has none.
local function entry_labels(id)
  local entry = rcall('XRANGE', stream, id, id)[1]
  local fields = entry and entry[2] or {}
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'labels' and fields[i + 1] ~= '' then return fields[i + 1] end
  end
  return nil
end
for i = 0, n - 1 do
  local history, hash = KEYS[2 + i * 2], KEYS[3 + i * 2]
  local id, exec, attempt, extra = ARGV[4 + i * 4], ARGV[5 + i * 4], ARGV[6 + i * 4],
                                   ARGV[7 + i * 4]
  local code = OK
  if schedule_live(hash) then
    local owner = marker_of(hash, now)
    if owner and owner ~= exec then
      if key_is(history, 'list') then
        if rcall('XACK', stream, group, id) == 1 then  -- recorded once, even if re-sent
          local labels = runs and entry_labels(id)
          rcall('XDEL', stream, id)
          job_event(history, cap, 'cancelled', exec, attempt, now,
                    ',"reason":"superseded","by":' .. json_str(owner))
          if runs then
            run_superseded(runs, stream, exec, rcall('HGET', hash, 'task'), attempt, worker,
                           labels)
          end
        end
        code = SUPERSEDED
      end
    -- The history's type is checked by its first write, before the marker's.
    elseif job_event(history, cap, 'running', exec, attempt, now, extra) and owner then
      rcall('HSET', hash, 'run_state', 'running', 'run_worker', worker)
    end
  end
  out[#out + 1] = code
end
return out
