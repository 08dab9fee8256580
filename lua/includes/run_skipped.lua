-- Include: run_skipped(runs, sid, task, queue, sched, reason, note) — the runs log record
-- (run_log) of an occurrence that did not run: status 'skipped', the reason in the error type's
-- place: overlap, buffer_full (overlap policies), misfire (misfire=skip), catch_up_limit,
-- excluded (an exclusion calendar); note (optional text: which calendar) in the error's. sched
-- is the occurrence's ms as text (digits).
-- @include json_str
-- @include level_of
-- @include run_log

local function run_skipped(runs, sid, task, queue, sched, reason, note)
  -- A priority level's stream name (q#high) names the queue q.
  run_log(runs, nil, '[' .. json_str(sid .. '@' .. sched) .. ',null,' ..
                     json_str(task or '') .. ',' .. json_str(string.match(queue, '^[^#]*')) ..
                     ',"skipped",null,null,null,null,null,"' .. reason .. '",' ..
                     (note and json_str(note) or 'null') .. ']',
          level_of(queue))
end
