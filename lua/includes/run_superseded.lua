-- Include: run_superseded(runs, stream, exec, task, attempt, worker) — the runs log record
-- (run_log) of a job acknowledged unrun because a newer run of its schedule replaced it
-- (start.lua; status 'cancelled', reason 'superseded' in the error type's place): the queue
-- comes from the stream's name.
-- @include json_str
-- @include level_of
-- @include run_log

local function run_superseded(runs, stream, exec, task, attempt, worker)
  local queue = string.match(stream, '}:queue:([^#]*)') or ''
  run_log(runs, nil, '[' .. json_str(exec) .. ',null,' ..
                     json_str(task or '') .. ',' .. json_str(queue) .. ',"cancelled",null' ..
                     ',null,' .. (tonumber(attempt) or 'null') .. ',' ..
                     json_str(worker) .. ',null,"superseded",null]', level_of(stream))
end
