-- Include: debounce_window(hash, delayed) — the open debounce window of a schedule: the member
-- of its job in `delayed` (the schedule's queue's delayed set) and the job's execution id; nil
-- when no window is open, false when `delayed` is false (that key holds another type).
--
-- A debounced schedule's fire puts its job in the delayed set, due a debounce after it, and
-- keeps the member in the hash's `debounce_job` field; the window is open while that member is
-- still in the delayed set (not yet moved to the stream by promote.lua, nor cancelled).
-- @include rcall

local function debounce_window(hash, delayed)
  if not delayed then return false end
  local member = rcall('HGET', hash, 'debounce_job')
  if not member or not rcall('ZSCORE', delayed, member) then return nil end
  local ok, fields = pcall(cjson.decode, member)
  if not ok or type(fields) ~= 'table' or fields[1] ~= 'execution_id'
      or type(fields[2]) ~= 'string' then
    return nil
  end
  return member, fields[2]
end
