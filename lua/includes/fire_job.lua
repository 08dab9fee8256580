-- Include: fire_job — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
-- Needs: common.lua, marker.lua (which brings history.lua), runs_log.lua.
--
-- A fire runs for each of thousands of schedules in a herd, and in Redis 7.0 every Lua function
-- call and table access here costs about as much as reading a hash field: the hot path keeps to
-- locals and few calls.
--
-- job_fields(hash): the schedule fields a fire uses, as one HMGET in JOB_FIELDS order: first the
--   STATE_FIELDS (version, status, task, payload, runs and the run marker), then the policy's
--   (overlap, queue, max_runs, opts, buffer_limit). fire.lua reads only the state fields: the
--   scheduler sends the policy fields of the version it planned with, which are the hash's when
--   the version matches (only an upsert writes them, and it moves the version).
-- policy_of(overlap, queue, max_runs, opts, buffer_limit): the policy table {overlap=, queue=,
--   max_runs= (number or false), opts= (JSON text or false when all default), ttl= (run marker
--   lifetime, ms), buffer_limit= (number, 100 when absent)} of those field values (false/nil =
--   absent), or nil when max_runs or buffer_limit is not a number or opts not a JSON object.
--   hash_policy(f): policy_of the fields f read by job_fields.
-- fire_job_ok(f): true when the state fields are usable (a task, numbers where numbers belong);
--   keeps what it decoded (runs, generation) for fire_job and advance. Call it before the first
--   write: a hash edited by hand must be refused whole rather than fail halfway, which Redis
--   would not roll back.
-- fire_job(hash, history, pending, stream, sid, sched, now, origin, cap, cancel_channel, missed,
--          f, p, keep, backlogs)
--   the schedule's key names (pending: its pending set, read only when the hash holds a run
--   marker and overlap is not allow, so it may be nil otherwise, and type-checked here where it
--   is used; backlogs: {p}:backlogs), sched: scheduled time (ms, string), origin:
--   schedule|misfire|manual|backfill, missed: how many late occurrences a misfire run stands
--   for (decimal text) or nil, f: job_fields (or the state fields), p: its policy, keep: true
--   for an occurrence that must run whatever the overlap policy (catch_up, backfill): with a
--   run unfinished it waits in the pending set instead of being skipped, and the policy's
--   limit does not apply to it.
--   With a run unfinished (live marker): keep, or buffer_one / buffer_all under their limit
--   (1, buffer_limit) -> pending, "buffered"; buffer_one / buffer_all at the limit -> skipped
--   (buffer_full); skip -> skipped (overlap); cancel_previous -> fired, the old run cancelled.
--   A marker that expired while occurrences were pending releases the oldest of them first
--   (release_next; not for an on-time cancel_previous occurrence, which just runs), and this
--   occurrence is then handled as with a run unfinished.
--   The history gets one record (history.lua) of the occurrence: fired (f), buffered (b),
--   skipped (s), or cancel_requested + fired (x, f) under cancel_previous.
--   A skipped occurrence is also recorded in the runs log (runs_log.lua) when the calling
--   script named it with fire_job_runs(key) (the on-time path never writes to it).
--   Returns code, execution id, run_until: code FIRED=1, SKIPPED=2 by the overlap policy,
--   BUFFERED=3 (in the pending set), or WRONG_TYPE=-6 when the history key holds another type
--   (nothing written). When a job was written under an overlap policy, run_until is the expiry
--   of its run marker: the caller writes the marker into the hash with the fields it updates
--   anyway (advance), so marking the run costs no call of its own. The caller has checked the
--   stream's type, fire_job_ok, and that the schedule may fire.
-- advance(hash_key, sched, nxt, fired, move_next, p, run, run_until)
--   count the run and complete the schedule when it is done; writes the run marker of `run`
--   (when not nil) in the same HSET.
--   Returns the schedule's new index score ('inf' when completed, nxt when moved on) or nil
--   when the index entry stays: the caller writes it (fire.lua does a whole batch at once).

local JOB_FIELDS = {'version', 'status', 'task', 'payload', 'runs', 'run', 'run_until',
                    'overlap', 'queue', 'max_runs', 'opts', 'buffer_limit'}
local STATE_FIELDS = 7
local F_VERSION, F_STATUS, F_TASK, F_PAYLOAD, F_RUNS, F_RUN, F_RUN_UNTIL = 1, 2, 3, 4, 5, 6, 7
local F_OVERLAP, F_QUEUE, F_MAX_RUNS, F_OPTS, F_BUFFER_LIMIT = 8, 9, 10, 11, 12
local DEFAULT_BUFFER_LIMIT = 100
local DEFAULT_TTL = marker_ttl(nil, nil, nil)
local tonumber, match, rpcall = tonumber, string.match, redis.pcall

local function job_fields(hash)
  return rcall('HMGET', hash, unpack(JOB_FIELDS))
end

local function policy_of(overlap, queue, max_runs, opts, buffer_limit)
  if max_runs then
    max_runs = tonumber(max_runs)
    if not max_runs then return nil end
  end
  if buffer_limit then
    buffer_limit = tonumber(buffer_limit)
    if not buffer_limit then return nil end
  end
  local ttl = DEFAULT_TTL
  if opts == '{}' then opts = false end
  if opts then
    local ok, o = pcall(cjson.decode, opts)
    -- A JSON array decodes to a table too.
    if not ok or type(o) ~= 'table' or string.byte(opts) ~= 123 then return nil end
    ttl = marker_ttl(o.timeout_s, o.max_retries, o.retry_max_s)
  end
  return {overlap = overlap or 'skip', queue = queue or 'default', max_runs = max_runs or false,
          opts = opts or false, ttl = ttl, buffer_limit = buffer_limit or DEFAULT_BUFFER_LIMIT}
end

local function hash_policy(f)
  return policy_of(f[F_OVERLAP], f[F_QUEUE], f[F_MAX_RUNS], f[F_OPTS], f[F_BUFFER_LIMIT])
end

-- What fire_job_ok derived from the last fields it accepted, for fire_job and advance.
local fx_runs, fx_gen = 0, '0'
-- The runs log, when the calling script was given it (fire_job_runs).
local fx_runs_key = nil
local function fire_job_runs(key)
  fx_runs_key = key
end

local function fire_job_ok(f)
  if not f[F_TASK] then return false end
  local runs, run_until = f[F_RUNS], f[F_RUN_UNTIL]
  if runs then
    runs = tonumber(runs)
    if not runs then return false end
  end
  if run_until and not tonumber(run_until) then return false end
  fx_runs, fx_gen = runs or 0, match(f[F_VERSION] or '', '^([^:]*):') or '0'
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

-- The job entry's field/value pairs. Retry and timeout settings travel with the job, so a worker
-- never has to read a schedule that may have changed or gone since the fire; absent means all
-- defaults (a field less).
local function job_pairs(exec, sid, sched, at, origin, f, opts)
  if opts then
    return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
           'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
           'attempt', '1', 'generation', fx_gen, 'origin', origin, 'opts', opts
  end
  return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
         'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
         'attempt', '1', 'generation', fx_gen, 'origin', origin
end

local function fire_job(hash, history, pending, stream, sid, sched, now, origin, cap,
                        cancel_channel, missed, f, p, keep, backlogs)
  local exec = sid .. '@' .. sched
  local overlap = p.overlap
  local at = INT_TEXT[now] or int_text(now)
  local ms = SCHED_MS[sched] or sched_ms(sched)
  local late = now - ms
  -- The history record (history.lua): <sched>|<code><late>…, then origin and missed as fields
  -- unless on time.
  local key = (B62[ms] or b62(ms)) .. '|'
  late = B62[late] or b62(late)
  local tail = ''
  if origin ~= 'schedule' or missed then
    tail = hist_fields(origin ~= 'schedule' and origin, missed and b62(tonumber(missed)))
  end

  -- The history push is each path's first write and checks the history key's type by itself
  -- (hist_first): a history list someone else overwrote refuses the occurrence whole (-6).
  local prev = nil
  if overlap ~= 'allow' and f[F_RUN] then -- a marker: maybe a run in progress, maybe a backlog
    local run_until = f[F_RUN_UNTIL]
    if not run_until or tonumber(run_until) > now then -- marker_live
      prev = f[F_RUN]
    elseif (keep or overlap ~= 'cancel_previous') and rcall('EXISTS', pending) == 1 then
      -- The run that held a backlog was lost (its marker expired): the backlog goes first,
      -- oldest first, and this occurrence takes its turn behind it.
      if not (key_is(pending, 'zset') and key_is(history, 'list')) then return -6, exec end
      prev, run_until = release_next(hash, pending, stream, history, cap, now, '', backlogs, sid)
    end
    if prev then
      local limit = 0 -- how many on-time occurrences the policy holds back
      if overlap == 'buffer_one' then
        limit = 1
      elseif overlap == 'buffer_all' then
        limit = p.buffer_limit
      end
      -- The pending set's type is checked where it is used (a skip never reads it).
      if (keep or limit > 0) and not key_is(pending, 'zset') then return -6, exec end
      local held = 0
      if not keep and limit > 0 then held = rcall('ZCARD', pending) end
      local head
      if keep or held < limit then
        head = 'b' .. late .. ',' .. overlap
      elseif limit > 0 then
        head = 's' .. late .. ',buffer_full,' .. overlap
      elseif overlap == 'skip' then
        head = 's' .. late .. ',overlap,skip'
      end
      if head then -- (else cancel_previous: below)
        if not hist_first(history, cap, key .. head .. tail) then return -6, exec end
        if keep or held < limit then
          pending_push(pending, backlogs, sid, sched,
                       {job_pairs(exec, sid, sched, at, origin, f, p.opts)}, run_until)
          return 3, exec
        end
        if fx_runs_key then
          run_skipped(fx_runs_key, sid, f[F_TASK], p.queue, sched,
                      limit > 0 and 'buffer_full' or 'overlap')
        end
        return 2, exec
      end
    end
  end

  local fired = key .. 'f' .. late .. tail
  if prev then -- cancel_previous: the new run replaces the marker; the old handler is told to stop
    -- cancel_requested, then fired in the same millisecond: the cancelled run is named by its
    -- scheduled ms less this one's.
    local cancelled = exec_sched(prev)
    if cancelled then cancelled = b62(cancelled - ms) else cancelled = '=' .. esc(prev) end
    if not hist_first(history, cap, key .. 'x' .. late .. ',' .. cancelled .. tail .. '|f' ..
                      late .. tail) then
      return -6, exec
    end
  else -- hist_first, inline: this is the path of nearly every fire
    local len = rpcall('LPUSH', history, fired)
    if type(len) == 'table' and wrong_type(len) then return -6, exec end
    if len > cap then rcall('LTRIM', history, 0, cap - 1) end
  end
  rcall('XADD', stream, '*', job_pairs(exec, sid, sched, at, origin, f, p.opts))
  local run_until = nil
  if overlap ~= 'allow' then
    -- The state and worker of an earlier (expired or cancelled) run must not survive into
    -- this run's marker.
    if f[F_RUN] then rcall('HDEL', hash, 'run_state', 'run_worker') end
    run_until = now + p.ttl
    run_until = INT_TEXT[run_until] or int_text(run_until)
  end
  if prev then rcall('PUBLISH', cancel_channel, prev) end
  return 1, exec, run_until
end

-- Advance a schedule after an occurrence was handled: count the run, move next_run (or complete
-- the schedule when nxt is '' or max_runs is reached), all hash fields in one HSET together
-- with the run marker. `fired` is true when a job was written (only then is there a marker).
local function advance(hash_key, sched, nxt, fired, move_next, p, run, run_until)
  local runs, max_runs = fx_runs, p.max_runs
  if fired then runs = runs + 1 end
  local done = (max_runs and runs >= max_runs) or (move_next and nxt == '')
  if fired then
    runs = INT_TEXT[runs] or int_text(runs)
    if done then
      rcall('HSET', hash_key, 'status', 'completed', 'runs', runs, 'last_run', sched,
            marker_pairs(run, run_until))
    else
      rcall('HSET', hash_key, 'runs', runs, 'last_run', sched, marker_pairs(run, run_until))
    end
  elseif done then
    rcall('HSET', hash_key, 'status', 'completed')
  end
  -- The next run lives in the index only (its score), not in the hash.
  if done then return 'inf' end
  if move_next then return nxt end
  return nil
end
