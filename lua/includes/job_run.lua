-- Include: job_run — a job's history events and the end of a schedule's run (overlap policies).
-- Needs: common.lua, marker.lua (which brings history.lua).
--
-- job_event(history, cap, event, exec, attempt, now, extra)
--   Record a worker's event (running, completed, cancelled, failed, timed_out, retry, dead,
--   waiting) on the record of its run (history.lua): token `r` (running: attempt, deliveries),
--   or an outcome's code with duration, attempt, retry_in_ms, reason, error_type, error,
--   deliveries, by (the newer run that superseded it). extra is '' or a JSON fragment starting
--   with a comma (built by the worker with a JSON encoder); its other fields (the worker's id)
--   are not kept: the runs log has them. An event of another name, or of an execution id that
--   is not <id>@<ms>, is pushed as a JSON object {"event":…,"execution_id":…,"attempt":…,
--   "at":…<extra>}, as rsched before compact records wrote every event. Returns false when the
--   history key holds another type (nothing written), so a caller need not check it first.
-- schedule_keys_ok(history, hash, pending)
--   True when the schedule's keys are absent or of rsched's types; a key someone overwrote is
--   left alone (the job's own outcome is still recorded on the queue).
-- schedule_live(hash)
--   True while the schedule exists and its key is a hash: schedule_exists and the hash's part of
--   schedule_keys_ok in one command (the worker scripts run it for every job).
-- schedule_exists(hash)
--   True while the schedule exists. A job that ends (or starts) after its schedule was removed
--   writes nothing under the schedule's id: its history would otherwise come back as a key
--   nothing removes again.
-- finish_run(hash, pending, stream, history, cap, exec, now)
--   The run of `exec` is over (success, dead letter or cancellation; not between retries):
--   clear the schedule's run marker when it still names `exec` (a cancel_previous successor
--   keeps its own), then, unless another run holds the marker, release the oldest pending
--   occurrence (marker.lua) into `stream` under a fresh marker. Returns 1 when one was
--   released. A removed schedule (no hash, no pending set) gets nothing written. The
--   scheduler's index of backlogs is left for its sweep to bring up to date (release.lua):
--   worker scripts keep their keys.
--   `stream` is the ending job's, the only stream the caller declares. When the spec moved the
--   schedule to another queue or priority while the job ran, what is pending belongs in the
--   new spec's stream, which this script may not touch (undeclared, it may be on another node
--   while the slot migrates): the marker is then left expired rather than cleared, so the
--   schedule's next fire (fire_job), or else the scheduler's sweep once the marker's own
--   expiry comes (release.lua), releases it into the right stream. Returns 0 then.
-- decode_fields(text)
--   A job's fields from a JSON list (delayed members, dead letters), or nil when malformed.
-- stream_of(fields, normal, high, low)
--   The stream of a job's priority level (its 'priority' field): high or low when given, else
--   normal (a caller of an older rsched passes only the normal stream).
-- dedup_finish(key)
--   An enqueued job with its own execution id ended: the id stays taken for the window its key
--   holds (ms), counted from now. Nothing when the key is gone or of another type.

local JOB_CODES = {running = 'r', completed = 'c', cancelled = 'C', failed = 'F',
                   timed_out = 'T', retry = 'R', dead = 'D', waiting = 'W'}

-- A field of the worker's extra as the record's text: a number in base 62, a string escaped.
local function job_num(v)
  v = tonumber(v)
  if v then return b62(math.floor(v + 0.5)) end
  return nil
end
local function job_text(v)
  if type(v) == 'string' and v ~= '' then return esc(v) end
  return nil
end

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

local function schedule_keys_ok(history, hash, pending)
  return key_is(history, 'list') and key_is(hash, 'hash') and key_is(pending, 'zset')
end

local function schedule_live(hash)
  return rcall('TYPE', hash)['ok'] == 'hash'
end

local function schedule_exists(hash)
  return rcall('EXISTS', hash) == 1
end

local function finish_run(hash, pending, stream, history, cap, exec, now)
  local owner, stored = marker_of(hash, now)
  if owner and owner ~= exec then return 0 end
  if rcall('EXISTS', pending) == 0 then
    if stored then marker_clear(hash) end
    return 0
  end
  -- What is pending is of the current spec (an update drops the rest): its stream is the ending
  -- job's unless the spec moved the schedule meanwhile.
  local prefix = string.match(stream, '^(.-}:queue:)')
  if prefix then
    local spec = rcall('HMGET', hash, 'queue', 'priority')
    if schedule_stream(prefix, spec[1], spec[2]) ~= stream then
      -- (A marker, even expired, is what makes a fire look at the pending set.)
      rcall('HSET', hash, 'run', stored or exec, 'run_until', int_text(now))
      rcall('HDEL', hash, 'run_state', 'run_worker')
      return 0
    end
  end
  if stored then marker_clear(hash) end
  if release_next(hash, pending, stream, history, cap, now, exec, nil, nil) then return 1 end
  return 0
end

-- A job's fields as a JSON list [field, value, …] (delayed members, dead letters) decoded and
-- checked: nil unless it is a non-empty flat list of strings, so XADD can never fail half-way.
local function decode_fields(text)
  local ok, f = pcall(cjson.decode, text)
  if not ok or type(f) ~= 'table' or #f == 0 or #f % 2 ~= 0 or #f > 200 then return nil end
  for i = 1, #f do
    if type(f[i]) ~= 'string' then return nil end
  end
  return f
end

local function stream_of(fields, normal, high, low)
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'priority' then
      local level = fields[i + 1]
      if level == 'high' and high then return high end
      if level == 'low' and low then return low end
      return normal
    end
  end
  return normal
end

local function dedup_finish(key)
  if not key_is(key, 'string') then return end
  local window = tonumber(rcall('GET', key))
  if not window then return end
  if window <= 0 then rcall('DEL', key) else rcall('PEXPIRE', key, window) end
end
