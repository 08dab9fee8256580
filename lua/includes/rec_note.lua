-- Include: rec_note(history, cap, sched, code, at, dur, fields) — add one event to the history
-- record (rec_first.lua) of occurrence `sched` (ms).
--
-- The record is rewritten in place (LSET) when it is the head or among the next HIST_DEPTH
-- records (overlapping runs), else a new record is pushed (its first event was trimmed away).
-- dur (ms, rounded) is the outcome's duration or nil, fields the token's text after the
-- duration (hist_fields()). Returns false when the key holds another type (nothing written: the
-- read of the head doubles as the type check).
-- @include rcall
-- @include b62
-- @include hist
-- @include pcall_read
-- @include hist_outcomes

local HIST_DEPTH = 5
local HIST_RECORD_MAX = 2000 -- a run retried many times goes on in a new record
-- List indexes as text: a number handed to redis.call is formatted as a float first.
local HIST_INDEX = {[0] = '0', '1', '2', '3', '4', '5'}

local function rec_note(history, cap, sched, code, at, dur, fields)
  local key = b62(sched) .. '|'
  local n = #key
  local index, rec = nil, nil
  local head = pcall_read('LINDEX', history, '0')
  if head == nil then return false end -- another type (an empty list reads as false)
  if head and string.sub(head, 1, n) == key then
    index, rec = 0, head
  elseif head then
    local next = rcall('LRANGE', history, '1', HIST_INDEX[HIST_DEPTH])
    for i = 1, #next do
      if string.sub(next[i], 1, n) == key then
        index, rec = i, next[i]
        break
      end
    end
  end
  local tail = ''
  if dur then
    tail = ',' .. b62(dur)
  elseif fields ~= '' and HIST_OUTCOME[code] then
    tail = ','  -- the duration's place
  end
  local token = code .. b62(at - sched - (dur or 0)) .. tail .. fields
  if rec and #rec < HIST_RECORD_MAX then
    rcall('LSET', history, HIST_INDEX[index], rec .. '|' .. token)
  else
    hist(history, cap, key .. token)
  end
  return true
end
