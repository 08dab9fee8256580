-- Include: job_event(history, cap, event, exec, attempt, now, extra) — record a worker's event
-- (running, completed, cancelled, failed, timed_out, retry, dead, waiting, expired) on the history
-- record of its run (rec_first.lua).
--
-- Token `r` (running: attempt, deliveries), or an outcome's code with duration, attempt,
-- retry_in_ms, reason, error_type, error, deliveries, by (the newer run that superseded it).
-- extra is '' or a JSON fragment starting with a comma (built by the worker with a JSON
-- encoder); its other fields (the worker's id) are not kept: the runs log has them. An event of
-- another name, or of an execution id that is not <id>@<ms>, is pushed as a JSON object
-- {"event":…,"execution_id":…,"attempt":…,"at":…<extra>}. Returns false when the history key
-- holds another type (nothing written), so a caller need not check it first.
-- @include int_text
-- @include json_str
-- @include b62
-- @include esc
-- @include hist_fields
-- @include hist_first
-- @include rec_note
-- @include exec_sched
-- @include job_num
-- @include job_text

local JOB_CODES = {running = 'r', completed = 'c', cancelled = 'C', failed = 'F',
                   timed_out = 'T', retry = 'R', dead = 'D', waiting = 'W',
                   expired = 'E'}

local function job_event(history, cap, event, exec, attempt, now, extra)
  local code, sched = JOB_CODES[event], exec_sched(exec)
  local x = {}
  if code and sched and extra ~= '' then
    -- What "running" and "completed" keep, on the path of every job, without a JSON decode
    -- (the worker encodes the fragment: its id, a host:pid:random, holds no quote).
    local dur = code ~= 'r' and string.match(extra, '^,"duration_ms":([%d%.eE+-]+)$')
    if code == 'r' then
      local at = string.find(extra, '"deliveries":', 1, true)
      x.deliveries = at and tonumber(string.match(extra, '^%d+', at + 13))
    elseif dur then
      x.duration_ms = tonumber(dur)
    else
      local ok, t = pcall(cjson.decode, '{' .. string.sub(extra, 2) .. '}')
      if ok and type(t) == 'table' then x = t else code = nil end
    end
  end
  if not (code and sched) then -- not an execution of this schedule: an event as JSON
    return hist_first(history, cap, '{"event":"' .. event .. '","execution_id":' ..
                      json_str(exec) .. ',"attempt":' .. int_text(tonumber(attempt) or 0) ..
                      ',"at":' .. int_text(now) .. extra .. '}')
  end
  local a = tonumber(attempt) or 0
  if a == 1 then a = nil else a = b62(a) end
  if code == 'r' then
    local deliveries = tonumber(x.deliveries)
    if deliveries == 1 then deliveries = nil end
    local fields = ''
    if a or deliveries then fields = hist_fields(a, job_num(deliveries)) end
    return rec_note(history, cap, sched, code, now, nil, fields)
  end
  local dur = tonumber(x.duration_ms)
  if dur then dur = math.floor(dur + 0.5) end
  if not (x.retry_in_ms or x.reason or x.error_type or x.error or x.deliveries or x.by) then
    local fields = '' -- a run that completed: its duration, and its attempt unless the first
    if a then fields = ',' .. a end
    return rec_note(history, cap, sched, code, now, dur, fields)
  end
  local by = exec_sched(x.by)
  if by then by = b62(by - sched) elseif x.by then by = '=' .. esc(x.by) end
  return rec_note(history, cap, sched, code, now, dur,
                  hist_fields(a, job_num(x.retry_in_ms), job_text(x.reason),
                              job_text(x.error_type), job_text(x.error), job_num(x.deliveries),
                              by))
end
