-- Include: hash_plan(f) — plan_of the fields f read by job_fields (the hash keeps a debounce in
-- seconds; a plan in ms, rounded as rsched._core.fire_plan.FireSpec rounds it).
-- @include job_fields
-- @include plan_of

local function hash_plan(f)
  local debounce = f[F_DEBOUNCE]
  if debounce then
    debounce = tonumber(debounce)
    if not debounce then return nil end
    debounce = math.floor(debounce * 1000 + 0.5)
  end
  return plan_of(f[F_OVERLAP], f[F_QUEUE], f[F_MAX_RUNS], f[F_OPTS], f[F_BUFFER_LIMIT], debounce,
                 f[F_LABELS])
end
