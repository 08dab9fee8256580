-- Include: activity_lag(ms) — the activity counters' lag bucket of a fire `ms` late: 0 for up to
-- 10 ms, ..., 12 for up to 5 min, 13 beyond (the bounds of rsched._core.activity.LAG_BOUNDS_MS,
-- spaced about x2.5 apart: a quantile read from them is within one bucket's width).

local ACTIVITY_LAG_BOUNDS = {10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
                             300000}

local function activity_lag(ms)
  for i = 1, #ACTIVITY_LAG_BOUNDS do
    if ms <= ACTIVITY_LAG_BOUNDS[i] then return i - 1 end
  end
  return #ACTIVITY_LAG_BOUNDS
end
