-- Include: marker — a schedule's unfinished run (what the overlap policies look at), kept in
-- the schedule's own hash so that a fire writes it with the fields it updates anyway:
--   run        execution id of the run, present while it is queued or running
--   run_state  absent while the job waits in its queue, 'running' once a worker started it
--              (the fire writes no state: one field less in the HSET of every fire)
--   run_until  ms after which the marker no longer counts: a lost worker never blocks the
--              schedule forever (a hash field has no TTL of its own on Redis 7.0)
--   run_worker the worker running it (with run_state 'running')
-- A marker dies with its hash: removing a schedule ends it, and a re-created schedule of the
-- same id starts without one. Needs: common.lua.
--
-- marker_live(run, run_until, now): the execution id when the marker counts, else nil.
-- marker_of(hash, now): marker_live of the stored marker, and the stored `run` (live or not).
-- marker_fields(exec, now, ttl_ms): field/value pairs of a fresh marker for HSET.
-- marker_pairs(exec, run_until): the same with its expiry given as text; nothing when exec is
--   nil (so that it can end an HSET's arguments either way).
-- marker_ttl(timeout_s, max_retries, retry_max_s): how long a marker may live, in ms.
-- marker_clear(hash): delete the marker fields.

local MARKER = {'run', 'run_state', 'run_until', 'run_worker'}

local function marker_live(run, run_until, now)
  if run and (not run_until or (tonumber(run_until) or 0) > now) then return run end
  return nil
end

local function marker_of(hash, now)
  local m = rcall('HMGET', hash, 'run', 'run_until')
  return marker_live(m[1], m[2], now), m[1]
end

-- The marker outlives any plausible run (timeout x attempts, plus backoff), unless its end is
-- recorded first.
local function marker_ttl(timeout, max_retries, retry_max)
  local attempts = (tonumber(max_retries) or 3) + 1
  return math.floor(((tonumber(timeout) or 3600) + (tonumber(retry_max) or 3600)) * attempts
                    * 1000) + 60000
end

local function marker_pairs(exec, run_until)
  if exec then return 'run', exec, 'run_until', run_until end
end

local function marker_fields(exec, now, ttl)
  return marker_pairs(exec, int_text(now + ttl))
end

local function marker_clear(hash)
  rcall('HDEL', hash, unpack(MARKER))
end
