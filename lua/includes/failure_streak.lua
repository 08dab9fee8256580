-- Include: failure_streak(hash, exec, failed, err, now) — a schedule that pauses after failed
-- runs (its pause_after_failures field) counts the run of `exec` that just ended: a failed one
-- (dead-lettered) adds one to its consecutive_failures, a completed one clears them.
--
-- At pause_after_failures failures in a row an active schedule pauses itself: status paused and
-- a pause note naming the count and `err` (its last error, at most 300 characters). Its index
-- entry is left to the scheduler, which moves it to +inf at the next fire it finds due, as for
-- any hash found paused (fire.lua): a worker script keeps its own keys. A schedule whose spec no
-- longer has the field forgets its count. The execution counted last is kept (failures_last),
-- so a call re-sent after a lost reply counts its run once. Returns the count when this call
-- paused the schedule, else nil. The caller checked that the hash exists and is a hash; a count
-- that is not a number (edited by hand) starts again at 0, so nothing here can fail halfway.
-- @include rcall
-- @include int_text

local function failure_streak(hash, exec, failed, err, now)
  if not failed then
    rcall('HDEL', hash, 'consecutive_failures', 'failures_last')
    return nil
  end
  local f = rcall('HMGET', hash, 'pause_after_failures', 'failures_last', 'status',
                  'consecutive_failures')
  local most = tonumber(f[1])
  if not most then
    rcall('HDEL', hash, 'consecutive_failures', 'failures_last')
    return nil
  end
  if f[2] == exec then return nil end
  local n = math.floor(tonumber(f[4]) or 0) + 1
  rcall('HSET', hash, 'consecutive_failures', int_text(n), 'failures_last', exec)
  if n < most or f[3] then return nil end -- already paused (or completed)
  local runs = ' failed runs in a row'
  if n == 1 then runs = ' failed run' end
  local note = 'paused after ' .. int_text(n) .. runs .. ' (pause_after_failures=' ..
               int_text(most) .. ')'
  if err ~= '' then note = note .. '; last error: ' .. err end
  rcall('HSET', hash, 'status', 'paused', 'updated_at', int_text(now), 'pause_note', note)
  return n
end
