-- Include: marker — the fields of a schedule's run marker, its unfinished run (what the overlap
-- policies look at), kept in the schedule's own hash so that a fire writes it with the fields it
-- updates anyway:
--   run        execution id of the run, present while it is queued or running
--   run_state  absent while the job waits in its queue, 'running' once a worker started it
--              (the fire writes no state: one field less in the HSET of every fire)
--   run_until  ms after which the marker no longer counts: a lost worker never blocks the
--              schedule forever (a hash field has no TTL of its own on Redis 7.0)
--   run_worker the worker running it (with run_state 'running')
-- A marker dies with its hash: removing a schedule ends it, and a re-created schedule of the
-- same id starts without one.

local MARKER = {'run', 'run_state', 'run_until', 'run_worker'}
