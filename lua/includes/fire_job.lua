-- Include: fire_job — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
-- Needs: common.lua, marker.lua.
--
-- job_fields(hash): the schedule fields a fire uses, as one HMGET in JOB_FIELDS order
--   (version, status, task, payload, overlap, the six JOB_OPTS, runs, max_runs and the run
--   marker). A fire costs one read of the hash.
-- fire_job_ok(f): true when those fields are usable (a task, numbers where numbers belong).
--   Call it before the first write: a hash edited by hand must be refused whole rather than
--   fail halfway, which Redis would not roll back.
-- fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f)
--   k: {hash=, history=, buffered=, stream=} key names of this schedule
--   sched: scheduled time (ms, string), origin: schedule|misfire|manual|backfill
--   extra: string appended inside the history JSON object (e.g. ',"missed":3'), or ''
--   f: job_fields(k.hash)
--   Returns code, execution id, marker: code 1 fired, 2 skipped by the overlap policy,
--   3 buffered (overlap=buffer_one), or -6 when the history key holds another type (nothing
--   written). When a job was written under an overlap policy, `marker` holds the field/value
--   pairs of its run marker: the caller writes them into the hash with the fields it updates
--   anyway (advance), so marking the run costs no call of its own. The caller has checked the
--   stream's type, fire_job_ok, and that the schedule may fire.
-- advance(hash_key, sched, nxt, fired, move_next, f, marker)
--   count the run and complete the schedule when it is done; writes `marker` (or nil) too.
--   Returns the schedule's new index score ('inf' when completed, nxt when moved on) or nil
--   when the index entry stays: the caller writes it (fire.lua does a whole batch at once).

local JOB_OPTS = {'max_retries', 'retry_base_s', 'retry_multiplier', 'retry_max_s',
                  'retry_jitter', 'timeout_s'}
local JOB_FIELDS = {'version', 'status', 'task', 'payload', 'overlap', 'max_retries',
                    'retry_base_s', 'retry_multiplier', 'retry_max_s', 'retry_jitter',
                    'timeout_s', 'runs', 'max_runs', 'run', 'run_until'}
local F_VERSION, F_STATUS, F_TASK, F_PAYLOAD, F_OVERLAP = 1, 2, 3, 4, 5
local F_OPTS, F_RUNS, F_MAX_RUNS, F_RUN, F_RUN_UNTIL = 6, 12, 13, 14, 15
local F_MAX_RETRIES, F_RETRY_MAX, F_TIMEOUT = F_OPTS, F_OPTS + 3, F_OPTS + 5

local function job_fields(hash)
  return rcall('HMGET', hash, unpack(JOB_FIELDS))
end

local function fire_job_ok(f)
  if not f[F_TASK] then return false end
  for i = F_OPTS, F_MAX_RUNS do
    if f[i] and not tonumber(f[i]) then return false end
  end
  return not f[F_RUN_UNTIL] or tonumber(f[F_RUN_UNTIL]) ~= nil
end

-- JSON string of an execution id: ids rsched writes hold no quote or backslash, so the common
-- case needs no encoder.
local function exec_json(exec)
  if string.find(exec, '["\\%c]') then return json_str(exec) end
  return '"' .. exec .. '"'
end

local function fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f)
  local exec = sid .. '@' .. sched
  local overlap = f[F_OVERLAP] or 'skip'
  local at = int_text(now)
  local base = '"scheduled_at":' .. sched .. ',"at":' .. at .. ',"late_ms":' ..
               int_text(now - tonumber(sched)) .. ',"execution_id":' ..
               exec_json(exec) .. ',"origin":"' .. origin .. '"' .. extra

  -- Retry and timeout settings travel with the job (only those not at their default), so a
  -- worker never has to read a schedule that may have changed or gone since the fire.
  local opts = {}
  for i = 1, #JOB_OPTS do
    local v = f[F_OPTS - 1 + i]
    if v then opts[#opts + 1] = '"' .. JOB_OPTS[i] .. '":' .. v end
  end
  local job = {'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
               'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
               'attempt', '1', 'generation', string.match(f[F_VERSION] or '', '^(%d+)') or '0',
               'origin', origin, 'opts', '{' .. table.concat(opts, ',') .. '}'}

  -- The history push is each path's first write and checks the history key's type by itself
  -- (hist_first): a history list someone else overwrote refuses the occurrence whole (-6).
  local prev = nil
  if overlap ~= 'allow' then
    prev = marker_live(f[F_RUN], f[F_RUN_UNTIL], now)
    if prev and overlap == 'skip' then
      if not hist_first(k.history, cap, '{"event":"skipped","reason":"overlap",' .. base .. '}') then
        return -6, exec
      end
      return 2, exec
    elseif prev and overlap == 'buffer_one' then
      if rcall('EXISTS', k.buffered) == 1 then
        if not hist_first(k.history, cap,
                          '{"event":"skipped","reason":"buffer_full",' .. base .. '}') then
          return -6, exec
        end
        return 2, exec
      end
      if not hist_first(k.history, cap, '{"event":"buffered",' .. base .. '}') then
        return -6, exec
      end
      rcall('HSET', k.buffered, unpack(job))
      return 3, exec
    end
  end

  if prev then -- cancel_previous: the new run replaces the marker; the old handler is told to stop
    if not hist_first(k.history, cap, '{"event":"cancel_requested","cancelled":' ..
                      json_str(prev) .. ',' .. base .. '}') then
      return -6, exec
    end
    hist(k.history, cap, '{"event":"fired",' .. base .. '}')
  elseif not hist_first(k.history, cap, '{"event":"fired",' .. base .. '}') then
    return -6, exec
  end
  rcall('XADD', k.stream, '*', unpack(job))
  local marker = nil
  if overlap ~= 'allow' then
    -- A worker id left from an earlier (expired or cancelled) run must not survive into this
    -- run's marker.
    if f[F_RUN] then rcall('HDEL', k.hash, 'run_worker') end
    marker = {marker_fields(exec, now, marker_ttl(f[F_TIMEOUT], f[F_MAX_RETRIES],
                                                  f[F_RETRY_MAX]))}
  end
  if prev then rcall('PUBLISH', cancel_channel, prev) end
  return 1, exec, marker
end

-- Advance a schedule after an occurrence was handled: count the run, move next_run (or complete
-- the schedule when nxt is '' or max_runs is reached), all hash fields in one HSET together
-- with the run marker. `fired` is true when a job was written.
local function advance(hash_key, sched, nxt, fired, move_next, f, marker)
  local set = marker or {}
  local n = #set
  local runs = tonumber(f[F_RUNS] or '0')
  if fired then
    runs = runs + 1
    set[n + 1], set[n + 2], set[n + 3], set[n + 4] = 'runs', int_text(runs), 'last_run', sched
    n = n + 4
  end
  local done = (f[F_MAX_RUNS] and runs >= tonumber(f[F_MAX_RUNS])) or (move_next and nxt == '')
  if done then set[n + 1], set[n + 2] = 'status', 'completed' end
  if #set > 0 then rcall('HSET', hash_key, unpack(set)) end
  -- The next run lives in the index only (its score), not in the hash.
  if done then return 'inf' end
  if move_next then return nxt end
  return nil
end
