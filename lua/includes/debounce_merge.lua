-- Include: debounce_merge(shared, history, sid, sched, origin, missed, f, p, member, wexec) —
-- an occurrence of a schedule whose debounce window is open (debounce_window: `member` of the
-- window's job in p.delayed, `wexec` its execution id; f the schedule's job_fields) is merged
-- into it: the window's job falls
-- due p.debounce after now (by Redis time), and its run marker lives that much longer.
--
-- The occurrence gets no job of its own: its history record says skipped, reason "debounced",
-- into the window's execution id (s<late>,debounced,,<origin>,<missed>,<into>; rec_first.lua),
-- and the runs log records it as skipped (run_skipped) when shared.runs names it.
-- Returns DEBOUNCED, the window's execution id, and the run marker's new expiry (nil under
-- overlap=allow, which keeps no marker), or WRONG_TYPE when the history key holds another type
-- (nothing written). The caller's advance writes the marker and does not count a run.
-- @include codes
-- @include rcall
-- @include int_text
-- @include b62
-- @include hist_fields
-- @include hist_first
-- @include exec_sched
-- @include esc
-- @include sched_ms
-- @include job_fields
-- @include run_skipped

local function debounce_merge(shared, history, sid, sched, origin, missed, f, p, member, wexec)
  local now = shared.now
  local ms = sched_ms(sched)
  local into = exec_sched(wexec)
  if into then into = b62(into - ms) else into = '=' .. esc(wexec) end
  local token = 's' .. b62(now - ms) .. ',debounced' ..
    hist_fields('', origin ~= 'schedule' and origin, missed and b62(tonumber(missed)), into)
  if not hist_first(history, shared.cap, b62(ms) .. '|' .. token) then return WRONG_TYPE end
  local due = now + p.debounce
  rcall('ZADD', p.delayed, 'XX', due, member)
  if shared.runs then
    run_skipped(shared.runs, sid, f[F_TASK], p.queue, sched, 'debounced', nil, p.labels)
  end
  local run_until = nil
  if p.overlap ~= 'allow' then run_until = int_text(due + p.ttl) end
  return DEBOUNCED, wexec, run_until
end
