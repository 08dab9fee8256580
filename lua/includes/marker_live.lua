-- Include: marker_live(run, run_until, now) — the execution id of a run marker (marker.lua) when
-- it counts at `now` (ms), else nil.

local function marker_live(run, run_until, now)
  if run and (not run_until or (tonumber(run_until) or 0) > now) then return run end
  return nil
end
