-- Include: fire_job — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
-- Needs: common.lua, marker.lua.
--
-- job_fields(hash): the schedule fields a fire uses, as one HMGET in JOB_FIELDS order
--   (version, status, task, payload, overlap, queue, opts, runs, max_runs and the run marker).
--   A fire costs one read of the hash; each field read costs about as much as a small command,
--   which is why the job options live in one `opts` field.
-- fire_job_ok(f): true when those fields are usable (a task, numbers where numbers belong, opts
--   a JSON object); keeps what it decoded (runs, max_runs, marker ttl, generation) in `fx` for
--   fire_job and advance. Call it before the first write: a hash edited by hand must be refused
--   whole rather than fail halfway, which Redis would not roll back.
-- fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f)
--   k: {hash=, history=, buffered=, stream=} key names of this schedule
--   sched: scheduled time (ms, string), origin: schedule|misfire|manual|backfill
--   extra: string appended inside the history JSON object (e.g. ',"missed":3'), or ''
--   f: job_fields(k.hash)
--   The schedule id must be one rsched accepts (letters, digits, '. _ - :'; the scheduler and
--   the SDK check): it goes into the history's JSON unescaped.
--   Returns code, execution id, run_until: code 1 fired, 2 skipped by the overlap policy,
--   3 buffered (overlap=buffer_one), or -6 when the history key holds another type (nothing
--   written). When a job was written under an overlap policy, run_until is the expiry of its
--   run marker: the caller writes the marker into the hash with the fields it updates anyway
--   (advance), so marking the run costs no call of its own. The caller has checked the
--   stream's type, fire_job_ok, and that the schedule may fire.
-- advance(hash_key, sched, nxt, fired, move_next, f, run, run_until)
--   count the run and complete the schedule when it is done; writes the run marker of `run`
--   (when not nil) in the same HSET.
--   Returns the schedule's new index score ('inf' when completed, nxt when moved on) or nil
--   when the index entry stays: the caller writes it (fire.lua does a whole batch at once).

local JOB_FIELDS = {'version', 'status', 'task', 'payload', 'overlap', 'queue', 'opts', 'runs',
                    'max_runs', 'run', 'run_until'}
local F_VERSION, F_STATUS, F_TASK, F_PAYLOAD, F_OVERLAP, F_QUEUE = 1, 2, 3, 4, 5, 6
local F_OPTS, F_RUNS, F_MAX_RUNS, F_RUN, F_RUN_UNTIL = 7, 8, 9, 10, 11
local DEFAULT_TTL = marker_ttl(nil, nil, nil)

local function job_fields(hash)
  return rcall('HMGET', hash, unpack(JOB_FIELDS))
end

-- The number in a field's value, `default` when the field is absent, nil when not a number.
local function number_or(value, default)
  if not value then return default end
  return tonumber(value)
end

-- What fire_job_ok derived from the last fields it accepted, for fire_job and advance. One
-- table reused for every item: adding these keys to each item's own table cost a rehash or
-- three per item, a large part of a fire's Lua time.
local fx = {runs = 0, max_runs = false, ttl = DEFAULT_TTL, gen = '0'}

local function fire_job_ok(f)
  if not f[F_TASK] then return false end
  local runs, max_runs = number_or(f[F_RUNS], 0), number_or(f[F_MAX_RUNS], false)
  if not runs or max_runs == nil or number_or(f[F_RUN_UNTIL], 0) == nil then return false end
  local ttl = DEFAULT_TTL
  local opts = f[F_OPTS]
  if opts and opts ~= '{}' then
    local ok, o = pcall(cjson.decode, opts)
    if not ok or type(o) ~= 'table' then return false end
    ttl = marker_ttl(o.timeout_s, o.max_retries, o.retry_max_s)
  end
  local version = f[F_VERSION] or ''
  local colon = string.find(version, ':', 1, true)
  fx.runs, fx.max_runs, fx.ttl = runs, max_runs, ttl
  fx.gen = colon and string.sub(version, 1, colon - 1) or '0'
  return true
end

-- Scheduled times as numbers: the occurrences of a batch mostly share a few.
local SCHED_MS = {}
local function sched_ms(sched)
  local v = SCHED_MS[sched]
  if not v then
    v = tonumber(sched)
    SCHED_MS[sched] = v
  end
  return v
end

-- Retry and timeout settings travel with the job, so a worker never has to read a schedule
-- that may have changed or gone since the fire; absent means all defaults (a field less).
local function opts_pair(opts)
  if opts and opts ~= '{}' then return 'opts', opts end
end

-- The job entry's field/value pairs.
local function job_pairs(exec, sid, sched, at, origin, f)
  return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
         'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
         'attempt', '1', 'generation', fx.gen, 'origin', origin, opts_pair(f[F_OPTS])
end

-- A history event of an occurrence: `head` is the event's first fields. One concatenation per
-- event (each one costs a new string), hence the many arguments.
local function event_json(head, sched, at, late, exec, origin, extra)
  return '{"event":' .. head .. ',"scheduled_at":' .. sched .. ',"at":' .. at .. ',"late_ms":' ..
         late .. ',"execution_id":"' .. exec .. '","origin":"' .. origin .. '"' .. extra .. '}'
end

local function fire_job(k, sid, sched, now, origin, cap, cancel_channel, extra, f)
  local exec = sid .. '@' .. sched
  local overlap = f[F_OVERLAP] or 'skip'
  local at = int_text(now)
  local late = int_text(now - sched_ms(sched))

  -- The history push is each path's first write and checks the history key's type by itself
  -- (hist_first): a history list someone else overwrote refuses the occurrence whole (-6).
  local prev = nil
  if overlap ~= 'allow' then
    prev = marker_live(f[F_RUN], f[F_RUN_UNTIL], now)
    if prev and overlap == 'skip' then
      local event = event_json('"skipped","reason":"overlap"', sched, at, late, exec, origin, extra)
      if not hist_first(k.history, cap, event) then return -6, exec end
      return 2, exec
    elseif prev and overlap == 'buffer_one' then
      if rcall('EXISTS', k.buffered) == 1 then
        local event = event_json('"skipped","reason":"buffer_full"', sched, at, late, exec, origin,
                                 extra)
        if not hist_first(k.history, cap, event) then return -6, exec end
        return 2, exec
      end
      local event = event_json('"buffered"', sched, at, late, exec, origin, extra)
      if not hist_first(k.history, cap, event) then return -6, exec end
      rcall('HSET', k.buffered, job_pairs(exec, sid, sched, at, origin, f))
      return 3, exec
    end
  end

  local fired = event_json('"fired"', sched, at, late, exec, origin, extra)
  if prev then -- cancel_previous: the new run replaces the marker; the old handler is told to stop
    local event = event_json('"cancel_requested","cancelled":' .. json_str(prev), sched, at, late,
                             exec, origin, extra)
    if not hist_first(k.history, cap, event) then return -6, exec end
    hist(k.history, cap, fired)
  elseif not hist_first(k.history, cap, fired) then
    return -6, exec
  end
  rcall('XADD', k.stream, '*', job_pairs(exec, sid, sched, at, origin, f))
  local run_until = nil
  if overlap ~= 'allow' then
    -- The state and worker of an earlier (expired or cancelled) run must not survive into
    -- this run's marker.
    if f[F_RUN] then rcall('HDEL', k.hash, 'run_state', 'run_worker') end
    run_until = int_text(now + fx.ttl)
  end
  if prev then rcall('PUBLISH', cancel_channel, prev) end
  return 1, exec, run_until
end

-- Advance a schedule after an occurrence was handled: count the run, move next_run (or complete
-- the schedule when nxt is '' or max_runs is reached), all hash fields in one HSET together
-- with the run marker. `fired` is true when a job was written (only then is there a marker).
local function advance(hash_key, sched, nxt, fired, move_next, f, run, run_until)
  local runs, max_runs = fx.runs, fx.max_runs
  if fired then runs = runs + 1 end
  local done = (max_runs and runs >= max_runs) or (move_next and nxt == '')
  if fired and done then
    rcall('HSET', hash_key, 'status', 'completed', 'runs', int_text(runs), 'last_run', sched,
          marker_pairs(run, run_until))
  elseif fired then
    rcall('HSET', hash_key, 'runs', int_text(runs), 'last_run', sched, marker_pairs(run, run_until))
  elseif done then
    rcall('HSET', hash_key, 'status', 'completed')
  end
  -- The next run lives in the index only (its score), not in the hash.
  if done then return 'inf' end
  if move_next then return nxt end
  return nil
end
