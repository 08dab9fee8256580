-- Include: marker — a schedule's unfinished run (what the overlap policies look at), kept in
-- the schedule's own hash so that a fire writes it with the fields it updates anyway:
--   run        execution id of the run, present while it is queued or running
--   run_state  absent while the job waits in its queue, 'running' once a worker started it
--              (the fire writes no state: one field less in the HSET of every fire)
--   run_until  ms after which the marker no longer counts: a lost worker never blocks the
--              schedule forever (a hash field has no TTL of its own on Redis 7.0)
--   run_worker the worker running it (with run_state 'running')
-- A marker dies with its hash: removing a schedule ends it, and a re-created schedule of the
-- same id starts without one. Needs: common.lua; brings history.lua.
--
-- marker_live(run, run_until, now): the execution id when the marker counts, else nil.
-- marker_of(hash, now): marker_live of the stored marker, and the stored `run` (live or not).
-- marker_fields(exec, now, ttl_ms): field/value pairs of a fresh marker for HSET.
-- marker_pairs(exec, run_until): the same with its expiry given as text; nothing when exec is
--   nil (so that it can end an HSET's arguments either way).
-- marker_ttl(timeout_s, max_retries, retry_max_s): how long a marker may live, in ms.
-- marker_clear(hash): delete the marker fields.
--
-- The pending occurrences of a schedule ({p}:pending:<id>, a ZSET scored by scheduled time,
-- each member the job's fields as a JSON list) wait for its run to end: buffer_one and
-- buffer_all hold back what comes due meanwhile, and catch_up and backfill runs queue behind one
-- another under any overlap policy but allow. A schedule holds pending occurrences only while
-- its hash holds a marker (live or expired): a fire with no marker never has to look at them.
-- pending_push(pending, backlogs, sid, sched, fields, run_until): add one occurrence (its job
--   fields as a Lua list) and list the schedule in backlogs ({p}:backlogs, by when its marker
--   expires: where the scheduler finds a backlog whose run was lost); backlogs may be nil.
-- schedule_stream(stream_prefix, queue, priority)
--   The stream a schedule's jobs go to: its queue's ("{p}:queue:<queue>"), or that of its
--   priority level ("…#high", "…#low"); queue and priority as the hash holds them (nil: default).
-- release_next(hash, pending, stream, history, cap, now, after, backlogs, sid)
--   queue the oldest pending occurrence of the hash's current generation (older generations'
--   are dropped; there are none unless the hash was edited by hand, since an update or a
--   removal deletes the pending set) into `stream` under a fresh marker, and record "released"
--   (after: the execution id whose end released it, or '' when its marker expired). Returns the
--   released execution id and its marker's expiry (text), or nil when nothing was pending.
--   backlogs (may be nil) is updated to the new marker's expiry, or loses the schedule (sid)
--   when nothing is left.

-- @include history

local MARKER = {'run', 'run_state', 'run_until', 'run_worker'}

local function schedule_stream(stream_prefix, queue, priority)
  local name = stream_prefix .. (queue or 'default')
  if priority == 'high' or priority == 'low' then return name .. '#' .. priority end
  return name
end

local function marker_live(run, run_until, now)
  if run and (not run_until or (tonumber(run_until) or 0) > now) then return run end
  return nil
end

local function marker_of(hash, now)
  local m = rcall('HMGET', hash, 'run', 'run_until')
  return marker_live(m[1], m[2], now), m[1]
end

-- The marker outlives any plausible run (timeout x attempts, plus backoff), unless its end is
-- recorded first.
local function marker_ttl(timeout, max_retries, retry_max)
  local attempts = (tonumber(max_retries) or 3) + 1
  return math.floor(((tonumber(timeout) or 3600) + (tonumber(retry_max) or 3600)) * attempts
                    * 1000) + 60000
end

local function marker_pairs(exec, run_until)
  if exec then return 'run', exec, 'run_until', run_until end
end

local function marker_fields(exec, now, ttl)
  return marker_pairs(exec, int_text(now + ttl))
end

local function marker_clear(hash)
  rcall('HDEL', hash, unpack(MARKER))
end

local function pending_push(pending, backlogs, sid, sched, fields, run_until)
  rcall('ZADD', pending, sched, cjson.encode(fields))
  if backlogs then rcall('ZADD', backlogs, 'LT', run_until or 0, sid) end
end

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
