-- Include: fire_job — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
-- Needs: common.lua.
--
-- fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra)
--   k: {hash=, history=, running=, buffered=, stream=} key names of this schedule
--   sched: scheduled time (ms, string), origin: schedule|misfire|manual|backfill
--   extra: string appended inside the history JSON object (e.g. ',"missed":3'), or ''
-- Returns 1 fired, 2 skipped by the overlap policy, 3 buffered (overlap=buffer_one), plus the
-- execution id. The caller has checked key types, fire_job_ok and that the schedule may fire.

local JOB_OPTS = {'max_retries', 'retry_base_s', 'retry_multiplier', 'retry_max_s',
                  'retry_jitter', 'timeout_s'}

-- fire_job_ok(hash): true when the stored fields fire_job and advance read are usable (a task,
-- numbers where numbers belong). Call it before the first write: a hash edited by hand must
-- be refused whole rather than fail halfway, which Redis would not roll back.
local function fire_job_ok(hash)
  local f = rcall('HMGET', hash, 'task', 'runs', 'max_runs', unpack(JOB_OPTS))
  if not f[1] then return false end
  for i = 2, #f do
    if f[i] and not tonumber(f[i]) then return false end
  end
  return true
end

local function fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra)
  local f = rcall('HMGET', k.hash, 'task', 'payload', 'overlap', 'generation',
                  'max_retries', 'retry_base_s', 'retry_multiplier', 'retry_max_s',
                  'retry_jitter', 'timeout_s')
  local exec = sid .. '@' .. sched
  local overlap = f[3] or 'skip'
  local at = string.format('%d', now)
  local late = string.format('%d', now - tonumber(sched))
  local base = '"scheduled_at":' .. sched .. ',"at":' .. at .. ',"late_ms":' .. late ..
               ',"execution_id":' .. json_str(exec) .. ',"origin":"' .. origin .. '"' .. extra

  -- Retry and timeout settings travel with the job (only those not at their default), so a
  -- worker never has to read a schedule that may have changed or gone since the fire.
  local opts = {}
  for i = 1, #JOB_OPTS do
    if f[4 + i] then opts[#opts + 1] = '"' .. JOB_OPTS[i] .. '":' .. f[4 + i] end
  end
  local job = {'execution_id', exec, 'schedule_id', sid, 'task', f[1], 'payload', f[2] or '{}',
               'scheduled_at', sched, 'fired_at', at, 'attempt', '1', 'generation', f[4],
               'origin', origin, 'opts', '{' .. table.concat(opts, ',') .. '}'}

  local prev = nil
  if overlap ~= 'allow' and rcall('EXISTS', k.running) == 1 then
    if overlap == 'skip' then
      hist(k.history, cap, '{"event":"skipped","reason":"overlap",' .. base .. '}')
      return 2, exec
    elseif overlap == 'buffer_one' then
      if rcall('EXISTS', k.buffered) == 1 then
        hist(k.history, cap, '{"event":"skipped","reason":"buffer_full",' .. base .. '}')
        return 2, exec
      end
      rcall('HSET', k.buffered, unpack(job))
      hist(k.history, cap, '{"event":"buffered",' .. base .. '}')
      return 3, exec
    else -- cancel_previous: the new run replaces the marker; the old handler is told to stop
      prev = rcall('HGET', k.running, 'execution_id')
    end
  end

  rcall('XADD', k.stream, '*', unpack(job))
  if overlap ~= 'allow' then
    -- The marker outlives any plausible run (timeout x attempts, plus backoff) so a lost worker
    -- can never block the schedule forever; workers refresh it while the job runs.
    local timeout = tonumber(f[10] or '3600')
    local attempts = tonumber(f[5] or '3') + 1
    local backoff = tonumber(f[8] or '3600')
    local ttl = math.floor((timeout + backoff) * attempts * 1000) + 60000
    rcall('DEL', k.running)
    rcall('HSET', k.running, 'execution_id', exec, 'state', 'queued', 'since', at)
    rcall('PEXPIRE', k.running, ttl)
  end
  if prev then
    rcall('PUBLISH', cancel_channel, prev)
    hist(k.history, cap, '{"event":"cancel_requested","cancelled":' .. json_str(prev) .. ',' ..
         base .. '}')
  end
  hist(k.history, cap, '{"event":"fired",' .. base .. '}')
  return 1, exec
end

-- Advance a schedule after an occurrence was handled: count the run, move next_run (or complete
-- the schedule when nxt is '' or max_runs is reached). `fired` is true when a job was written.
local function advance(schedules_key, hash_key, sid, sched, nxt, fired, move_next)
  local st = rcall('HMGET', hash_key, 'runs', 'max_runs')
  local runs = tonumber(st[1] or '0')
  if fired then
    runs = runs + 1
    rcall('HSET', hash_key, 'runs', runs, 'last_run', sched)
  end
  local done = (st[2] and runs >= tonumber(st[2])) or (move_next and nxt == '')
  if done then
    rcall('HSET', hash_key, 'status', 'completed')
    rcall('HDEL', hash_key, 'next_run')
    rcall('ZADD', schedules_key, 'inf', sid)
  elseif move_next then
    rcall('HSET', hash_key, 'next_run', nxt)
    rcall('ZADD', schedules_key, nxt, sid)
  end
end
