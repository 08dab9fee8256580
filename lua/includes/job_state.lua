-- Include: job_state(f) — the run count (a number) and the generation (text) of the state fields
-- f read by job_fields, or nil when they are unusable (no task, or not a number where a number
-- belongs).
--
-- Call it before the first write: a hash edited by hand must be refused whole rather than fail
-- halfway, which Redis would not roll back.
-- @include job_fields

local function job_state(f)
  if not f[F_TASK] then return nil end
  local runs, run_until = f[F_RUNS], f[F_RUN_UNTIL]
  if runs then
    runs = tonumber(runs)
    if not runs then return nil end
  end
  if run_until and not tonumber(run_until) then return nil end
  return runs or 0, string.match(f[F_VERSION] or '', '^([^:]*):') or '0'
end
