-- Include: job_pairs(exec, sid, sched, at, origin, f, gen, opts, tp) — the field/value pairs of
-- the job entry a fire writes: execution `exec` of schedule `sid` for occurrence `sched` (ms,
-- text), fired at `at` (ms, text), with the task and payload of f (job_fields), generation `gen`
-- and job options `opts` (JSON text, or false when all default); `tp` the W3C traceparent of the
-- scheduler's span for it (nil when the scheduler does not trace: no field).
-- @include job_fields

-- Retry and timeout settings travel with the job, so a worker never has to read a schedule that
-- may have changed or gone since the fire; absent means all defaults (a field less).
local function job_pairs(exec, sid, sched, at, origin, f, gen, opts, tp)
  if tp then
    return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
           'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
           'attempt', '1', 'generation', gen, 'origin', origin, 'opts', opts or '{}',
           'traceparent', tp
  end
  if opts then
    return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
           'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
           'attempt', '1', 'generation', gen, 'origin', origin, 'opts', opts
  end
  return 'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
         'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
         'attempt', '1', 'generation', gen, 'origin', origin
end
