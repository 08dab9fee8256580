--[[ due — list the schedules that are due now by Redis TIME (read-only).

KEYS[1] schedules   ZSET of schedules by next run (ms)
ARGV[1] limit       how many due entries to return at most

Returns {now_ms, due, next_ms}:
  due      flat list id, score, id, score, … of entries with score <= now (oldest first)
  next_ms  score of the earliest entry after now (string), or '' when there is none
]]
-- @include common

local schedules_key = KEYS[1]
local limit = tonumber(ARGV[1])
local now = string.format('%d', now_ms())
local due = rcall('ZRANGE', schedules_key, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit,
                  'WITHSCORES')
local nxt = rcall('ZRANGE', schedules_key, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
                  'WITHSCORES')
local next_ms = ''
if nxt[2] and nxt[2] ~= 'inf' then next_ms = nxt[2] end
return {now, due, next_ms}
