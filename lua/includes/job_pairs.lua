-- Include: job_pairs(exec, sid, sched, at, origin, f, gen, opts) — the field/value pairs of the
-- job entry a fire writes: execution `exec` of schedule `sid` for occurrence `sched` (ms, text),
-- fired at `at` (ms, text), with the task and payload of f (job_fields), generation `gen` and
-- job options `opts` (JSON text, or false when all default).
-- @include job_fields

-- Retry and timeout settings travel with the job, so a worker never has to read a schedule that
-- may have changed or gone since the fire; absent means all defaults (a field less).
local function job_pairs(exec, sid, sched, at, origin, f, gen, opts)
  if opts then
    return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
           'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
           'attempt', '1', 'generation', gen, 'origin', origin, 'opts', opts
  end
  return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
         'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
         'attempt', '1', 'generation', gen, 'origin', origin
end
