-- Include: marker_pairs(exec, run_until) — the field/value pairs of a run marker for HSET, its
-- expiry given as text; nothing when exec is nil (so that it can end an HSET's arguments either
-- way).

local function marker_pairs(exec, run_until)
  if exec then return 'run', exec, 'run_until', run_until end
end
