-- Include: fire_job(shared, hash, history, pending, stream, sid, sched, origin, missed, f, gen,
-- p, keep, jitter, tp) — the one place an occurrence becomes a job. Shared by fire, trigger and
-- backfill so that every path applies the same overlap policy and writes the same job entry.
--
-- shared: what every occurrence of the calling script shares: {now (ms), cap (history length
--   cap), cancel (pub/sub channel for cancel_previous), backlogs ({p}:backlogs), runs (the runs
--   log {p}:runs, where a skipped occurrence is recorded; nil: not recorded)}.
-- hash, history, pending, stream: the schedule's keys (pending: its pending set, read only when
--   the hash holds a run marker and overlap is not allow, so it may be nil otherwise, and
--   type-checked here where it is used).
-- sid: the schedule's id; sched: scheduled time (ms, text); origin:
--   schedule|misfire|manual|backfill; missed: how many late occurrences a misfire run stands for
--   (decimal text) or nil.
-- f: job_fields (or the state fields); gen: its generation (job_state); p: its plan (plan_of).
-- jitter: how long after its time the occurrence fired (b62 ms, a schedule's jitter; nil: none),
--   recorded in its fired record.
-- keep: true for an occurrence that must run whatever the overlap policy (catch_up, backfill):
--   with a run unfinished it waits in the pending set instead of being skipped, and the
--   policy's limit does not apply to it.
-- tp: the W3C traceparent its job carries (job_pairs; nil: none, the caller does not trace).
--
-- With a run unfinished (live marker): keep, or buffer_one / buffer_all under their limit (1,
-- buffer_limit) -> pending, "buffered"; buffer_one / buffer_all at the limit -> skipped
-- (buffer_full); skip -> skipped (overlap); cancel_previous -> fired, the old run cancelled. A
-- marker that expired while occurrences were pending releases the oldest of them first
-- (release_next; not for an on-time cancel_previous occurrence, which just runs), and this
-- occurrence is then handled as with a run unfinished.
-- The history gets one record (rec_first.lua) of the occurrence: fired (f), buffered (b), skipped
-- (s), or cancel_requested + fired (x, f) under cancel_previous. A skipped occurrence is also
-- recorded in the runs log (run_skipped) when shared.runs names it.
--
-- A plan with a debounce (p.debounce, p.delayed: debounce_fire.lua) writes its job to the
-- delayed set instead, due a debounce later; an occurrence that finds the schedule's debounce
-- window open is merged into it (DEBOUNCED), whatever the marker of the window's job says.
--
-- Returns code, execution id, run_until: code FIRED, SKIPPED by the overlap policy, BUFFERED (in
-- the pending set), DEBOUNCED (merged into the open window, whose execution id it returns), or
-- WRONG_TYPE when the history key (or the debounced plan's delayed set) holds another type
-- (nothing written).
-- When a job was written under an overlap policy, run_until is the expiry of its run marker: the
-- caller writes the marker into the hash with the fields it updates anyway (advance), so marking
-- the run costs no call of its own. The caller has checked the stream's type, job_state, and
-- that the schedule may fire.
--
-- A fire runs for each of thousands of schedules in a herd, and in Redis 7.0 every Lua function
-- call and table access here costs about as much as reading a hash field: the hot path keeps to
-- locals and few calls.
-- @include codes
-- @include rcall
-- @include int_text
-- @include key_is
-- @include wrong_type
-- @include hist_first
-- @include b62
-- @include esc
-- @include hist_fields
-- @include exec_sched
-- @include sched_ms
-- @include job_fields
-- @include job_pairs
-- @include pending_push
-- @include release_next
-- @include run_skipped
-- @include debounce_window
-- @include debounce_merge
-- @include debounce_fire

local function fire_job(shared, hash, history, pending, stream, sid, sched, origin, missed, f, gen,
                        p, keep, jitter, tp)
  local now, cap = shared.now, shared.cap
  local exec = sid .. '@' .. sched
  local overlap = p.overlap
  local at = int_text(now)
  local ms = sched_ms(sched)
  -- The history record: <sched>|<code><late>…, then origin and missed as fields unless on time.
  local key = b62(ms) .. '|'
  local late = b62(now - ms)
  local tail = ''
  if origin ~= 'schedule' or missed then
    tail = hist_fields(origin ~= 'schedule' and origin, missed and b62(tonumber(missed)))
  end

  -- The history push is each path's first write and checks the history key's type by itself
  -- (hist_first): a history list someone else overwrote refuses the occurrence whole.
  local prev = nil
  if overlap ~= 'allow' and f[F_RUN] then -- a marker: maybe a run in progress, maybe a backlog
    if p.debounce then -- the marker may be the open debounce window's job: merge into it
      local member, wexec = debounce_window(hash, p.delayed)
      if member == false then return WRONG_TYPE, exec end
      if member then
        local code, merged, run_until = debounce_merge(shared, history, sid, sched, origin, missed,
                                                       f, p, member, wexec)
        return code, merged or exec, run_until
      end
    end
    local run_until = f[F_RUN_UNTIL]
    if not run_until or tonumber(run_until) > now then -- marker_live
      prev = f[F_RUN]
    elseif (keep or overlap ~= 'cancel_previous') and rcall('EXISTS', pending) == 1 then
      -- The run that held a backlog was lost (its marker expired): the backlog goes first,
      -- oldest first, and this occurrence takes its turn behind it.
      if not (key_is(pending, 'zset') and key_is(history, 'list')) then return WRONG_TYPE, exec end
      prev, run_until = release_next(hash, pending, stream, history, cap, now, '',
                                     shared.backlogs, sid)
    end
    if prev then
      local limit = 0 -- how many on-time occurrences the policy holds back
      if overlap == 'buffer_one' then
        limit = 1
      elseif overlap == 'buffer_all' then
        limit = p.buffer_limit
      end
      -- The pending set's type is checked where it is used (a skip never reads it).
      if (keep or limit > 0) and not key_is(pending, 'zset') then return WRONG_TYPE, exec end
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
        if not hist_first(history, cap, key .. head .. tail) then return WRONG_TYPE, exec end
        if keep or held < limit then
          pending_push(pending, shared.backlogs, sid, sched,
                       {job_pairs(exec, sid, sched, at, origin, f, gen, p.opts, tp, p.labels)}, run_until)
          return BUFFERED, exec
        end
        if shared.runs then
          run_skipped(shared.runs, sid, f[F_TASK], p.queue, sched,
                      limit > 0 and 'buffer_full' or 'overlap', nil, p.labels)
        end
        return SKIPPED, exec
      end
    end
  end

  if p.debounce then
    return debounce_fire(shared, hash, history, stream, sid, exec, sched, origin, missed, f, gen, p,
                         prev, tp)
  end
  local ftail = tail -- the fired record's fields: origin, missed, jitter
  if jitter then
    ftail = hist_fields(origin ~= 'schedule' and origin, missed and b62(tonumber(missed)), jitter)
  end
  local fired = key .. 'f' .. late .. ftail
  if prev then -- cancel_previous: the new run replaces the marker; the old handler is told to stop
    -- cancel_requested, then fired in the same millisecond: the cancelled run is named by its
    -- scheduled ms less this one's.
    local cancelled = exec_sched(prev)
    if cancelled then cancelled = b62(cancelled - ms) else cancelled = '=' .. esc(prev) end
    if not hist_first(history, cap, key .. 'x' .. late .. ',' .. cancelled .. tail .. '|f' ..
                      late .. ftail) then
      return WRONG_TYPE, exec
    end
  else -- hist_first, inline: this is the path of nearly every fire
    local len = redis.pcall('LPUSH', history, fired)
    if type(len) == 'table' and wrong_type(len) then return WRONG_TYPE, exec end
    if len > cap then rcall('LTRIM', history, 0, cap - 1) end
  end
  rcall('XADD', stream, '*', job_pairs(exec, sid, sched, at, origin, f, gen, p.opts, tp, p.labels))
  local run_until = nil
  if overlap ~= 'allow' then
    -- The state and worker of an earlier (expired or cancelled) run must not survive into
    -- this run's marker.
    if f[F_RUN] then rcall('HDEL', hash, 'run_state', 'run_worker') end
    run_until = int_text(now + p.ttl)
  end
  if prev then rcall('PUBLISH', shared.cancel, prev) end
  return FIRED, exec, run_until
end
