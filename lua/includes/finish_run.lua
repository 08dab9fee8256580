-- Include: finish_run(hash, pending, stream, history, cap, exec, now) — the run of `exec` is over
-- (success, dead letter or cancellation; not between retries).
--
-- Clears the schedule's run marker when it still names `exec` (a cancel_previous successor
-- keeps its own), then, unless another run holds the marker, releases the oldest pending
-- occurrence (release_next) into `stream` under a fresh marker. Returns 1 when one was
-- released. A removed schedule (no hash, no pending set) gets nothing written. The scheduler's
-- index of backlogs is left for its sweep to bring up to date (release_lost.lua): worker
-- scripts keep their keys.
-- `stream` is the ending job's, the only stream the caller declares. When the spec moved the
-- schedule to another queue or priority while the job ran, what is pending belongs in the new
-- spec's stream, which this script may not touch (undeclared, it may be on another node while
-- the slot migrates): the marker is then left expired rather than cleared, so the schedule's
-- next fire (fire_job), or else the scheduler's sweep once the marker's own expiry comes
-- (release_lost.lua), releases it into the right stream. Returns 0 then.
-- @include rcall
-- @include int_text
-- @include schedule_stream
-- @include marker_of
-- @include marker_clear
-- @include release_next

local function finish_run(hash, pending, stream, history, cap, exec, now)
  local owner, stored = marker_of(hash, now)
  if owner and owner ~= exec then return 0 end
  if rcall('EXISTS', pending) == 0 then
    if stored then marker_clear(hash) end
    return 0
  end
  -- What is pending is of the current spec (an update drops the rest): its stream is the ending
  -- job's unless the spec moved the schedule meanwhile.
  local prefix = string.match(stream, '^(.-}:queue:)')
  if prefix then
    local spec = rcall('HMGET', hash, 'queue', 'priority')
    if schedule_stream(prefix, spec[1], spec[2]) ~= stream then
      -- (A marker, even expired, is what makes a fire look at the pending set.)
      rcall('HSET', hash, 'run', stored or exec, 'run_until', int_text(now))
      rcall('HDEL', hash, 'run_state', 'run_worker')
      return 0
    end
  end
  if stored then marker_clear(hash) end
  if release_next(hash, pending, stream, history, cap, now, exec, nil, nil) then return 1 end
  return 0
end
