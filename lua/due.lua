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
local parts = {}

local function add(member, score)
  -- A plain search for a space, once per entry: this runs for every entry of a herd.
  if not string.find(member, ' ', 1, true) then
    parts[#parts + 1] = member
    parts[#parts + 1] = score
  end
end

local pos = 0
while pos < count do
  local last = math.min(pos + RUN, count) - 1
  local head = rcall('ZRANGE', schedules_key, pos, pos, 'WITHSCORES')
  local tail = rcall('ZRANGE', schedules_key, last, last, 'WITHSCORES')
  if head[2] == tail[2] then
    for _, member in ipairs(rcall('ZRANGE', schedules_key, pos, last)) do add(member, head[2]) end
    pos = last + 1
  else
    last = math.min(pos + PAGE, count) - 1
    local page = rcall('ZRANGE', schedules_key, pos, last, 'WITHSCORES')
    for i = 1, #page, 2 do add(page[i], page[i + 1]) end
    pos = last + 1
  end
end

local nxt = rcall('ZRANGE', schedules_key, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
                  'WITHSCORES')
local next_ms = ''
if nxt[2] and nxt[2] ~= 'inf' then next_ms = nxt[2] end
return {now, table.concat(parts, ' '), next_ms}
