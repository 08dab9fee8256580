-- Include: advance(hash, sched, nxt, fired, move_next, p, runs, run, run_until) — move a schedule
-- on after an occurrence was handled.
--
-- Counts the run (`runs`: the count before it, from job_state) when `fired` (a job was written,
-- or an occurrence went pending: it runs as soon as the run before it ends), and completes the
-- schedule when plan p's max_runs is reached or, with move_next, when nxt (the next occurrence,
-- ms text) is ''. All hash fields go in one HSET, together with the run marker of `run` when not
-- nil (marker_pairs). Returns the schedule's new index score ('inf' when completed, nxt when
-- moved on) or nil when the index entry stays: the caller writes it (fire.lua does a whole batch
-- at once).
-- @include rcall
-- @include int_text
-- @include marker_pairs

local function advance(hash, sched, nxt, fired, move_next, p, runs, run, run_until)
  local max_runs = p.max_runs
  if fired then runs = runs + 1 end
  local done = (max_runs and runs >= max_runs) or (move_next and nxt == '')
  if fired then
    runs = int_text(runs)
    if done then
      rcall('HSET', hash, 'status', 'completed', 'runs', runs, 'last_run', sched,
            marker_pairs(run, run_until))
    else
      rcall('HSET', hash, 'runs', runs, 'last_run', sched, marker_pairs(run, run_until))
    end
  elseif done then
    rcall('HSET', hash, 'status', 'completed')
  end
  -- The next run lives in the index only (its score), not in the hash.
  if done then return 'inf' end
  if move_next then return nxt end
  return nil
end
