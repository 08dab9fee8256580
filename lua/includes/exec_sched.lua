-- Include: exec_sched(exec) — the scheduled ms of an execution id (<schedule id>@<ms>), or nil.

local function exec_sched(exec)
  -- Ids never hold '@' (rsched._core.rules.NAME_RE): a plain find, no pattern to try at each place.
  local at = exec and string.find(exec, '@', 1, true)
  return at and tonumber(string.match(exec, '^%d+$', at + 1))
end
