-- Include: fire_job — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
-- Needs: common.lua.
--
-- job_fields(hash): the schedule fields fire_job and advance use, as one HMGET in JOB_FIELDS
--   order (task, payload, overlap, generation, the six JOB_OPTS, runs, max_runs). A caller
--   that already read them passes the result on, so a fire costs one read of the hash.
-- fire_job_ok(hash [, f]): true when those fields are usable (a task, numbers where numbers
--   belong). Call it before the first write: a hash edited by hand must be refused whole
--   rather than fail halfway, which Redis would not roll back.
-- fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra [, f [, running]])
--   k: {hash=, history=, running=, buffered=, stream=} key names of this schedule
--   sched: scheduled time (ms, string), origin: schedule|misfire|manual|backfill
--   extra: string appended inside the history JSON object (e.g. ',"missed":3'), or ''
--   f: job_fields(k.hash) when the caller has it; running: whether the running marker exists,
--   when the caller knows (see overlap_keys_ok)
--   Returns 1 fired, 2 skipped by the overlap policy, 3 buffered (overlap=buffer_one), or -6
--   when the history key holds another type (nothing written), plus the execution id. The
--   caller has checked the other key types (running and buffered only matter when the overlap
--   policy uses them, see overlap_keys_ok), fire_job_ok and that the schedule may fire.
-- advance(schedules_key, hash_key, sid, sched, nxt, fired, move_next [, f])
--   count the run and move next_run, or complete the schedule.

local JOB_OPTS = {'max_retries', 'retry_base_s', 'retry_multiplier', 'retry_max_s',
                  'retry_jitter', 'timeout_s'}
local JOB_FIELDS = {'task', 'payload', 'overlap', 'generation', 'max_retries', 'retry_base_s',
                    'retry_multiplier', 'retry_max_s', 'retry_jitter', 'timeout_s', 'runs',
                    'max_runs'}
local F_TASK, F_PAYLOAD, F_OVERLAP, F_GEN, F_OPTS, F_RUNS, F_MAX_RUNS = 1, 2, 3, 4, 5, 11, 12

local function job_fields(hash)
  return rcall('HMGET', hash, unpack(JOB_FIELDS))
end

local function fire_job_ok(hash, f)
  f = f or job_fields(hash)
  if not f[F_TASK] then return false end
  for i = F_OPTS, F_MAX_RUNS do
    if f[i] and not tonumber(f[i]) then return false end
  end
  return true
end

-- The keys besides hash, history and stream that a fire may write, by overlap policy: only
-- these need their type checked before the first write. Returns ok, and whether the running
-- marker exists (its TYPE answers both questions in one call).
local function overlap_keys_ok(k, overlap)
  overlap = overlap or 'skip'
  if overlap == 'allow' then return true, false end
  local t = rcall('TYPE', k.running)['ok']
  if t ~= 'none' and t ~= 'hash' then return false, false end
  return overlap ~= 'buffer_one' or key_is(k.buffered, 'hash'), t == 'hash'
end

-- JSON string of an execution id: ids rsched writes hold no quote or backslash, so the common
-- case needs no encoder.
local function exec_json(exec)
  if string.find(exec, '["\\%c]') then return json_str(exec) end
  return '"' .. exec .. '"'
end

local function fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f, running)
  f = f or job_fields(k.hash)
  local exec = sid .. '@' .. sched
  local overlap = f[F_OVERLAP] or 'skip'
  local at = string.format('%d', now)
  local late = string.format('%d', now - tonumber(sched))
  local base = '"scheduled_at":' .. sched .. ',"at":' .. at .. ',"late_ms":' .. late ..
               ',"execution_id":' .. exec_json(exec) .. ',"origin":"' .. origin .. '"' .. extra

  -- Retry and timeout settings travel with the job (only those not at their default), so a
  -- worker never has to read a schedule that may have changed or gone since the fire.
  local opts = {}
  for i = 1, #JOB_OPTS do
    local v = f[F_OPTS - 1 + i]
    if v then opts[#opts + 1] = '"' .. JOB_OPTS[i] .. '":' .. v end
  end
  local job = {'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
               'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
               'attempt', '1', 'generation', f[F_GEN], 'origin', origin,
               'opts', '{' .. table.concat(opts, ',') .. '}'}

  -- The history push is each path's first write and checks the history key's type by itself
  -- (hist_first): a history list someone else overwrote refuses the occurrence whole (-6).
  local prev = nil
  if running == nil then running = overlap ~= 'allow' and rcall('EXISTS', k.running) == 1 end
  if overlap ~= 'allow' and running then
    if overlap == 'skip' then
      if not hist_first(k.history, cap, '{"event":"skipped","reason":"overlap",' .. base .. '}') then
        return -6, exec
      end
      return 2, exec
    elseif overlap == 'buffer_one' then
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
    else -- cancel_previous: the new run replaces the marker; the old handler is told to stop
      prev = rcall('HGET', k.running, 'execution_id')
    end
  end

  if prev then
    if not hist_first(k.history, cap, '{"event":"cancel_requested","cancelled":' ..
                      json_str(prev) .. ',' .. base .. '}') then
      return -6, exec
    end
    rcall('DEL', k.running)
    hist(k.history, cap, '{"event":"fired",' .. base .. '}')
  elseif not hist_first(k.history, cap, '{"event":"fired",' .. base .. '}') then
    return -6, exec
  end
  rcall('XADD', k.stream, '*', unpack(job))
  if overlap ~= 'allow' then
    -- The marker outlives any plausible run (timeout x attempts, plus backoff) so a lost worker
    -- can never block the schedule forever; workers refresh it while the job runs. A marker
    -- left from an earlier run only exists here under cancel_previous, deleted above, so no
    -- stale field (worker, state) survives into this run's marker.
    local timeout = tonumber(f[F_OPTS + 5] or '3600')
    local attempts = tonumber(f[F_OPTS] or '3') + 1
    local backoff = tonumber(f[F_OPTS + 3] or '3600')
    local ttl = math.floor((timeout + backoff) * attempts * 1000) + 60000
    rcall('HSET', k.running, 'execution_id', exec, 'state', 'queued', 'since', at)
    rcall('PEXPIRE', k.running, ttl)
  end
  if prev then rcall('PUBLISH', cancel_channel, prev) end
  return 1, exec
end

-- Advance a schedule after an occurrence was handled: count the run, move next_run (or complete
-- the schedule when nxt is '' or max_runs is reached). `fired` is true when a job was written.
local function advance(schedules_key, hash_key, sid, sched, nxt, fired, move_next, f)
  local runs_raw, max_raw
  if f then
    runs_raw, max_raw = f[F_RUNS], f[F_MAX_RUNS]
  else
    local st = rcall('HMGET', hash_key, 'runs', 'max_runs')
    runs_raw, max_raw = st[1], st[2]
  end
  local runs = tonumber(runs_raw or '0')
  if fired then runs = runs + 1 end
  local done = (max_raw and runs >= tonumber(max_raw)) or (move_next and nxt == '')
  if done then
    if fired then
      rcall('HSET', hash_key, 'runs', runs, 'last_run', sched, 'status', 'completed')
    else
      rcall('HSET', hash_key, 'status', 'completed')
    end
    rcall('ZADD', schedules_key, 'inf', sid)
  elseif move_next then
    -- The next run lives in the index only (its score), not in the hash.
    if fired then rcall('HSET', hash_key, 'runs', runs, 'last_run', sched) end
    rcall('ZADD', schedules_key, nxt, sid)
  elseif fired then
    rcall('HSET', hash_key, 'runs', runs, 'last_run', sched)
  end
end
