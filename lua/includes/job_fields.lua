-- Include: job_fields(hash) — the schedule fields a fire uses, as one HMGET in JOB_FIELDS order,
-- and the positions of each in its reply (F_…).
--
-- First the STATE_FIELDS (version, status, task, payload, runs and the run marker), then the
-- plan's (overlap, queue, max_runs, opts, buffer_limit, debounce in seconds, labels; plan_of). fire.lua
-- reads only the state fields: the scheduler sends the plan fields of the version it planned
-- with, which are the hash's when the version matches (only an upsert writes them, and it moves
-- the version).
-- @include rcall

local JOB_FIELDS = {'version', 'status', 'task', 'payload', 'runs', 'run', 'run_until',
                    'overlap', 'queue', 'max_runs', 'opts', 'buffer_limit', 'debounce',
                    'labels'}
local STATE_FIELDS = 7
local F_VERSION, F_STATUS, F_TASK, F_PAYLOAD, F_RUNS, F_RUN, F_RUN_UNTIL = 1, 2, 3, 4, 5, 6, 7
local F_OVERLAP, F_QUEUE, F_MAX_RUNS, F_OPTS, F_BUFFER_LIMIT, F_DEBOUNCE = 8, 9, 10, 11, 12, 13
local F_LABELS = 14

local function job_fields(hash)
  return rcall('HMGET', hash, unpack(JOB_FIELDS))
end
