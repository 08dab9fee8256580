-- Include: job_pairs(exec, sid, sched, at, origin, f, gen, opts, tp, labels) — the field/value pairs of
-- the job entry a fire writes: execution `exec` of schedule `sid` for occurrence `sched` (ms,
-- text), fired at `at` (ms, text), with the task and payload of f (job_fields), generation `gen`
-- and job options `opts` (JSON text, or false when all default); `tp` the W3C traceparent of the
-- scheduler's span for it (nil when the scheduler does not trace: no field); `labels` the
-- schedule's labels ("k=v,k=v", plan_of; false: none, no field), which its runs keep
-- (docs/labels.md).
-- @include job_fields

-- Retry and timeout settings travel with the job, so a worker never has to read a schedule that
-- may have changed or gone since the fire; absent means all defaults (a field less).
local function job_pairs(exec, sid, sched, at, origin, f, gen, opts, tp, labels)
  if labels then -- (a labelled schedule's only: the other paths stay as they were)
    local out = {'execution_id', exec, 'schedule_id', sid, 'task', f[F_TASK],
                 'payload', f[F_PAYLOAD] or '{}', 'scheduled_at', sched, 'fired_at', at,
                 'attempt', '1', 'generation', gen, 'origin', origin, 'opts', opts or '{}',
                 'labels', labels}
    if tp then out[#out + 1], out[#out + 2] = 'traceparent', tp end
    return unpack(out)
  end
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
