-- Include: run_skipped(runs, sid, task, queue, sched, reason, note, labels) — the runs log record
-- (run_log) of an occurrence that did not run: status 'skipped', the reason in the error type's
-- place: overlap, buffer_full (overlap policies), misfire (misfire=skip), catch_up_limit,
-- excluded (an exclusion calendar), debounced; note (optional text: which calendar) in the
-- error's. sched is the occurrence's ms as text (digits). labels: the schedule's "k=v,k=v" (its
-- plan's, what a job of that occurrence would carry), or nil/false: the record carries them and
-- is indexed by them (run_log, run_index: in the index keys the caller declared).
-- @include json_str
-- @include level_of
-- @include run_log

local function run_skipped(runs, sid, task, queue, sched, reason, note, labels)
  -- A priority level's stream name (q#high) names the queue q; the default queue is left out.
  local name = string.match(queue, '^[^#]*')
  local record = '[' .. json_str(sid .. '@' .. sched) .. ',"skipped",' .. json_str(task or '') ..
                 ',null,null,null,0,' .. (name == 'default' and 'null' or json_str(name)) ..
                 ',"' .. reason .. '"' .. (note and ',' .. json_str(note) or '') .. ']'
  if labels then record = record .. '\n' .. labels end
  run_log(runs, nil, record, level_of(queue))
end
