-- Include: codes — every code a script returns, by name. The same table as
-- rsched._core.codes.Code (tests/store/test_lua.py checks that names and values agree). A code above 0
-- means the script did what was asked; 0 or below means it wrote nothing.

-- What became of one occurrence (fire, backfill, trigger: one code per occurrence).
local STALE = 0 -- not fired: already fired, or its schedule is gone, paused, completed or changed
local FIRED = 1 -- a job was written to the queue stream
local SKIPPED = 2 -- not run: the overlap policy skipped it (the history says why)
local BUFFERED = 3 -- waits in the schedule's pending set until the unfinished run ends
local MISFIRE_SKIPPED = 4 -- not run: misfire policy skip (recorded in the history only)
-- Done as asked (every other script).
local OK = 5
local QUEUED = 6 -- enqueue: the job is on the queue stream
local DELAYED = 7 -- enqueue: the job waits in the delayed set
local LIMITED = 8 -- acquire: the job waits on a limit key (moved out of its stream)
local DEBOUNCED = 9 -- merged into an open debounce window: its job is due later
local EXPIRED = 10 -- expire: the start deadline passed; recorded expired, not to run
local EXCLUDED = 11 -- fire: not run, an exclusion calendar excludes the occurrence (recorded)
-- Nothing written.
local NOT_LEADER = -1 -- the lease is not the caller's
local NOT_FOUND = -2 -- the schedule does not exist
local CONFLICT = -3 -- the schedule's generation moved since the caller read it
local COMPLETED = -4 -- the schedule has completed
local NOT_DUE = -5 -- the occurrence is in the future by Redis TIME
local WRONG_TYPE = -6 -- a key holds another type, or a hash fields rsched did not write
local BAD_ARGS = -7 -- the arguments are malformed (a bug in the caller)
local BAD_INDEX = -8 -- the schedules index is not a sorted set
local EXISTS = -9 -- the id is taken
local NOT_PENDING = -10 -- the queue entry is no longer pending
local SUPERSEDED = -11 -- start: a newer run of the schedule replaced this job
local RUNNING = -12 -- cancel: a worker holds the job
local LABELS_MOVED = -15 -- the stored labels are not those the caller named the index keys of
local FLOW_OVER = -16 -- the flow ended (completed, failed or cancelled): its step must not run
