-- Include: job_run — a job's history events and the end of a schedule's run (overlap policies).
-- Needs: common.lua, marker.lua.
--
-- job_event(history, cap, event, exec, attempt, now, extra)
--   Push {"event":…,"execution_id":…,"attempt":…,"at":…<extra>} on the schedule's history;
--   extra is '' or a JSON fragment starting with a comma (built by the worker with a JSON
--   encoder, so it is always well formed).
-- schedule_keys_ok(history, hash, pending)
--   True when the schedule's keys are absent or of rsched's types; a key someone overwrote is
--   left alone (the job's own outcome is still recorded on the queue).
-- schedule_exists(hash)
--   True while the schedule exists. A job that ends (or starts) after its schedule was removed
--   writes nothing under the schedule's id: its history would otherwise come back as a key
--   nothing removes again.
-- finish_run(hash, pending, stream, history, cap, exec, now)
--   The run of `exec` is over (success, dead letter or cancellation; not between retries):
--   clear the schedule's run marker when it still names `exec` (a cancel_previous successor
--   keeps its own), then, unless another run holds the marker, release the oldest pending
--   occurrence (marker.lua) into the stream of the schedule's queue and priority under a fresh
--   marker. Returns 1 when one was released. A removed schedule (no hash, no pending set) gets
--   nothing written. The scheduler's index of backlogs is left for its sweep to bring up to
--   date (release.lua): worker scripts keep their keys.
-- decode_fields(text)
--   A job's fields from a JSON list (delayed members, dead letters), or nil when malformed.
-- stream_of(fields, normal, high, low)
--   The stream of a job's priority level (its 'priority' field): high or low when given, else
--   normal (a caller of an older rsched passes only the normal stream).
-- dedup_finish(key)
--   An enqueued job with its own execution id ended: the id stays taken for the window its key
--   holds (ms), counted from now. Nothing when the key is gone or of another type.

local function job_event(history, cap, event, exec, attempt, now, extra)
  hist(history, cap, '{"event":"' .. event .. '","execution_id":' .. json_str(exec) ..
       ',"attempt":' .. int_text(tonumber(attempt) or 0) ..
       ',"at":' .. int_text(now) .. extra .. '}')
end

local function schedule_keys_ok(history, hash, pending)
  return key_is(history, 'list') and key_is(hash, 'hash') and key_is(pending, 'zset')
end

local function schedule_exists(hash)
  return rcall('EXISTS', hash) == 1
end

local function finish_run(hash, pending, stream, history, cap, exec, now)
  local owner, stored = marker_of(hash, now)
  if owner and owner ~= exec then return 0 end
  if stored then marker_clear(hash) end
  if rcall('EXISTS', pending) == 0 then return 0 end
  -- Into the stream of the schedule's queue and priority, which is the ending job's unless the
  -- spec moved it while the job ran (what is pending is of the new spec: an update drops the
  -- rest).
  local target = stream
  local prefix = string.match(stream, '^(.-}:queue:)')
  if prefix then
    local spec = rcall('HMGET', hash, 'queue', 'priority')
    target = schedule_stream(prefix, spec[1], spec[2])
    if target ~= stream and not key_is(target, 'stream') then return 0 end
  end
  if release_next(hash, pending, target, history, cap, now, exec, nil, nil) then return 1 end
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
