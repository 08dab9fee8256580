--[[ due — list the schedules that are due now by Redis TIME (read-only).

KEYS[1] schedules   ZSET of schedules by next run (ms)
ARGV[1] limit       how many due entries to return at most

Returns {now_ms, due, next_ms}:
  due      one string "id score id score …" of the entries with score <= now, oldest first,
           scores as Redis prints them (whole ms for every score rsched writes; the caller
           deals with others). One string parses far faster than a list of thousands. rsched
           ids hold no space: a member that does was not written by rsched and is left out.
  next_ms  score of the earliest entry after now (string), or '' when there is none
]]
-- @include common

local schedules_key = KEYS[1]
local limit = tonumber(ARGV[1])
local now = string.format('%d', now_ms())
local due = rcall('ZRANGE', schedules_key, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit,
                  'WITHSCORES')
-- Per entry, only a plain search for a space: this runs for every entry of a herd.
for i = 1, #due, 2 do
  if string.find(due[i], ' ', 1, true) then
    local parts = {}
    for j = 1, #due, 2 do
      if not string.find(due[j], ' ', 1, true) then
        parts[#parts + 1] = due[j]
        parts[#parts + 1] = due[j + 1]
      end
    end
    due = parts
    break
  end
end
local nxt = rcall('ZRANGE', schedules_key, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
                  'WITHSCORES')
local next_ms = ''
if nxt[2] and nxt[2] ~= 'inf' then next_ms = nxt[2] end
return {now, table.concat(due, ' '), next_ms}
