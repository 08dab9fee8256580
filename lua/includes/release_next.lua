-- Include: release_next(hash, pending, stream, history, cap, now, after, backlogs, sid) — queue
-- the oldest pending occurrence (pending_push.lua) of the hash's current generation into
-- `stream` under a fresh run marker, and record "released" in the history.
--
-- Occurrences of older generations are dropped (there are none unless the hash was edited by
-- hand, since an update or a removal deletes the pending set). after: the execution id whose end
-- released it, or '' when its marker expired. Returns the released execution id and its
-- marker's expiry (text), or nil when nothing was pending. backlogs (may be nil) is updated to
-- the new marker's expiry, or loses the schedule (sid) when nothing is left.
-- @include rcall
-- @include int_text
-- @include marker_ttl
-- @include exec_sched
-- @include esc
-- @include b62
-- @include hist_fields
-- @include rec_note

local function release_next(hash, pending, stream, history, cap, now, after, backlogs, sid)
  local gen = string.match(rcall('HGET', hash, 'version') or '', '^([^:]*):')
  while true do
    local popped = rcall('ZPOPMIN', pending)
    local member = popped[1]
    if not member then break end
    local ok, flat = pcall(cjson.decode, member)
    local f = {}
    -- Only a flat list of strings (what pending_push writes) may reach XADD, which would
    -- otherwise fail half-way through the script.
    if ok and type(flat) == 'table' and #flat > 0 and #flat % 2 == 0 then
      for i = 1, #flat, 2 do
        local name, value = flat[i], flat[i + 1]
        if type(name) ~= 'string' or type(value) ~= 'string' then
          f = {}
          break
        end
        f[name] = value
      end
    end
    if gen and f.execution_id and f.generation == gen then
      rcall('XADD', stream, '*', unpack(flat))
      local okj, opts = pcall(cjson.decode, f.opts or '{}')
      if not okj or type(opts) ~= 'table' then opts = {} end
      local run_until = int_text(now + marker_ttl(opts.timeout_s, opts.max_retries,
                                                  opts.retry_max_s))
      rcall('HSET', hash, 'run', f.execution_id, 'run_until', run_until)
      rcall('HDEL', hash, 'run_state', 'run_worker')
      -- "released": origin ('' = schedule) and the execution whose end released it, as
      -- its scheduled ms less this one's (none: the run's marker expired).
      local sched = exec_sched(f.execution_id) or tonumber(f.scheduled_at) or 0
      local origin, prev = f.origin, exec_sched(after)
      if origin == 'schedule' then origin = nil end
      rec_note(history, cap, sched, 'e', now, nil,
               hist_fields(origin and esc(origin), prev and b62(prev - sched)))
      if backlogs then
        if rcall('EXISTS', pending) == 1 then
          rcall('ZADD', backlogs, run_until, sid)
        else
          rcall('ZREM', backlogs, sid)
        end
      end
      return f.execution_id, run_until
    end
  end
  if backlogs then rcall('ZREM', backlogs, sid) end
  return nil
end
