--[[ due — list the schedules that are due now by Redis TIME (read-only).

KEYS[1] schedules   ZSET of schedules by next run (ms)
ARGV[1] limit       how many due entries to return at most

Returns {now_ms, runs, next_ms}:
  runs     the entries with score <= now, oldest first, as runs of entries that share a score:
           an array of strings "<score> <id> <id> …", scores as Redis prints them (whole ms for
           every score rsched writes; the caller deals with others). A herd is a few long runs,
           each joined in one call and parsed in one split. rsched ids hold no space: a member
           that does (or is empty) was not written by rsched and is left out.
  next_ms  score of the earliest entry after now (string), or '' when there is none
]]
-- @include rcall
-- @include int_text
-- @include now_ms

-- Due entries are read by rank. A score in a reply costs the server a printf (Redis 7.0), more
-- than the member itself; in a herd thousands of entries share one score, so where the entries
-- at both ends of a run of ranks share a score, every entry between does too and the run is
-- read without scores.
local RUN = 1000   -- ranks probed at once for a shared score
local PAGE = 100   -- ranks read with their scores otherwise

local schedules_key = KEYS[1]
local limit = tonumber(ARGV[1])
local now = int_text(now_ms())
local count = math.min(rcall('ZCOUNT', schedules_key, '-inf', now), limit)
local runs = {}
local concat, find = table.concat, string.find

local function add_run(members, score)
  local kept = members
  for i = 1, #members do
    local member = members[i]
    if member == '' or find(member, ' ', 1, true) then
      kept = {}
      for _, m in ipairs(members) do
        if m ~= '' and not find(m, ' ', 1, true) then kept[#kept + 1] = m end
      end
      break
    end
  end
  if #kept > 0 then runs[#runs + 1] = score .. ' ' .. concat(kept, ' ') end
end

local pos = 0
while pos < count do
  local last = math.min(pos + RUN, count) - 1
  local head = rcall('ZRANGE', schedules_key, pos, pos, 'WITHSCORES')
  local tail = rcall('ZRANGE', schedules_key, last, last, 'WITHSCORES')
  if head[2] == tail[2] then
    add_run(rcall('ZRANGE', schedules_key, pos, last), head[2])
  else
    last = math.min(pos + PAGE, count) - 1
    local page = rcall('ZRANGE', schedules_key, pos, last, 'WITHSCORES')
    local members, score = {}, page[2]
    for i = 1, #page, 2 do
      if page[i + 1] ~= score then
        add_run(members, score)
        members, score = {}, page[i + 1]
      end
      members[#members + 1] = page[i]
    end
    add_run(members, score)
  end
  pos = last + 1
end

local nxt = rcall('ZRANGE', schedules_key, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
                  'WITHSCORES')
local next_ms = ''
if nxt[2] and nxt[2] ~= 'inf' then next_ms = nxt[2] end
return {now, runs, next_ms}
