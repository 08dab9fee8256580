-- Include: limit_keys(first) — the keys of the limits (rsched._core.keys.Keys.limits), taken
-- from KEYS[first] on, by name: every limit script passes all eleven in that order.

local function limit_keys(first)
  return {
    held = KEYS[first], holds = KEYS[first + 1], starts = KEYS[first + 2],
    expiry = KEYS[first + 3], waiting = KEYS[first + 4], jobs = KEYS[first + 5],
    ready = KEYS[first + 6], keys = KEYS[first + 7], set = KEYS[first + 8],
    patterns = KEYS[first + 9], counts = KEYS[first + 10],
  }
end
