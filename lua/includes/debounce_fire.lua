-- Include: debounce_fire(shared, hash, history, stream, sid, exec, sched, origin, missed, f, gen,
-- p, prev, tp) — what fire_job does with an occurrence of a schedule with a debounce
-- (p.debounce ms, p.delayed its queue's delayed set, false when that key holds another type)
-- once the overlap policy let it run: merge it into the open window (debounce_merge), or open a
-- window with its job.
--
-- A new window's job goes to the delayed set, due p.debounce after now, with the priority level
-- of `stream` (the stream it would have gone to) as its 'priority' field: promote.lua moves it
-- to that stream then. Its member is kept in the hash's `debounce_job` field
-- (debounce_window); the history records it fired (under cancel_previous, cancel_requested
-- first, and the previous run `prev` is told to stop). Its run marker lives p.debounce longer
-- than an undebounced one's. Returns as fire_job: FIRED (or DEBOUNCED), the execution id and
-- the marker's expiry; WRONG_TYPE (nothing written) for a key of another type. `tp`: the
-- traceparent a new window's job carries (job_pairs; nil: none).
-- @include codes
-- @include rcall
-- @include int_text
-- @include b62
-- @include esc
-- @include hist_fields
-- @include hist_first
-- @include exec_sched
-- @include sched_ms
-- @include job_fields
-- @include job_pairs
-- @include level_of
-- @include debounce_window
-- @include debounce_merge

local function debounce_fire(shared, hash, history, stream, sid, exec, sched, origin, missed, f,
                             gen, p, prev, tp)
  local member, wexec = debounce_window(hash, p.delayed)
  if member == false then return WRONG_TYPE, exec end
  if member then
    local code, merged, run_until = debounce_merge(shared, history, sid, sched, origin, missed, f,
                                                   p, member, wexec)
    return code, merged or exec, run_until
  end
  local now = shared.now
  local ms = sched_ms(sched)
  local late = b62(now - ms)
  local tail = ''
  if origin ~= 'schedule' or missed then
    tail = hist_fields(origin ~= 'schedule' and origin, missed and b62(tonumber(missed)))
  end
  local record = b62(ms) .. '|f' .. late .. tail
  if prev then -- cancel_previous: as fire_job records it
    local cancelled = exec_sched(prev)
    if cancelled then cancelled = b62(cancelled - ms) else cancelled = '=' .. esc(prev) end
    record = b62(ms) .. '|x' .. late .. ',' .. cancelled .. tail .. '|f' .. late .. tail
  end
  if not hist_first(history, shared.cap, record) then return WRONG_TYPE, exec end
  local due = now + p.debounce
  local fields = {job_pairs(exec, sid, sched, int_text(now), origin, f, gen, p.opts, tp, p.labels)}
  local level = level_of(stream)
  if level then
    fields[#fields + 1] = 'priority'
    fields[#fields + 1] = level
  end
  local job = cjson.encode(fields)
  rcall('ZADD', p.delayed, due, job)
  rcall('HSET', hash, 'debounce_job', job)
  local run_until = nil
  if p.overlap ~= 'allow' then
    if f[F_RUN] then rcall('HDEL', hash, 'run_state', 'run_worker') end
    run_until = int_text(due + p.ttl)
  end
  if prev then rcall('PUBLISH', shared.cancel, prev) end
  return FIRED, exec, run_until
end
