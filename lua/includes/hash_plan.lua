-- Include: hash_plan(f) — plan_of the fields f read by job_fields.
-- @include job_fields
-- @include plan_of

local function hash_plan(f)
  return plan_of(f[F_OVERLAP], f[F_QUEUE], f[F_MAX_RUNS], f[F_OPTS], f[F_BUFFER_LIMIT])
end
