-- Include: pending_push(pending, backlogs, sid, sched, fields, run_until) — add one occurrence
-- (its job fields as a Lua list) to a schedule's pending set, and list the schedule in backlogs
-- ({p}:backlogs, by when its marker expires: where the scheduler finds a backlog whose run was
-- lost); backlogs may be nil.
--
-- The pending occurrences of a schedule ({p}:pending:<id>, a ZSET scored by scheduled time, each
-- member the job's fields as a JSON list) wait for its run to end: buffer_one and buffer_all
-- hold back what comes due meanwhile, and catch_up and backfill runs queue behind one another
-- under any overlap policy but allow. A schedule holds pending occurrences only while its hash
-- holds a run marker (marker.lua), live or expired: a fire with no marker never has to look at
-- them. release_next queues them.
-- @include rcall

local function pending_push(pending, backlogs, sid, sched, fields, run_until)
  rcall('ZADD', pending, sched, cjson.encode(fields))
  if backlogs then rcall('ZADD', backlogs, 'LT', run_until or 0, sid) end
end
