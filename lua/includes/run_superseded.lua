-- Include: run_superseded(runs, stream, exec, task, attempt, worker, labels) — the runs log record
-- (run_log) of a job acknowledged unrun because a newer run of its schedule replaced it
-- (start.lua; status 'cancelled', reason 'superseded' in the error type's place): the queue
-- comes from the stream's name. labels: the job's "k=v,k=v" (its entry's labels field), or nil:
-- the record carries them and is indexed by them (run_log, run_index: in the index keys the
-- caller declared).
-- @include json_str
-- @include level_of
-- @include run_log

local function run_superseded(runs, stream, exec, task, attempt, worker, labels)
  local queue = string.match(stream, '}:queue:([^#]*)') or ''
  local n = tonumber(attempt)
  local record = '[' .. json_str(exec) .. ',"cancelled",' .. json_str(task or '') .. ',' ..
                 json_str(worker) .. ',null,null,' .. (n == 1 and 'null' or (n or 0)) .. ',' ..
                 (queue == 'default' and 'null' or json_str(queue)) .. ',"superseded"]'
  if labels then record = record .. '\n' .. labels end
  run_log(runs, nil, record, level_of(stream))
end
