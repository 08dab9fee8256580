--[[ reclaim — take over entries idle longer than the visibility timeout (their worker died or
hung without heartbeats), each with its delivery count.

Entries the stream no longer holds (deleted while pending) have nothing to run: they are
acknowledged. Redis 7 lists them apart and drops them from the pending list itself; older
servers return them with no fields — both are handled.

KEYS[1] stream  {p}:queue:<queue>
ARGV[1] group   ARGV[2] consumer   ARGV[3] min idle ms   ARGV[4] start id   ARGV[5] count

Returns {next start id, {{entry id, {field, value, …}, deliveries}, …}}.
]]
-- @include common

local stream = KEYS[1]
local group, consumer, min_idle, start, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not key_is(stream, 'stream') then return {'0-0', {}} end
local r = rcall('XAUTOCLAIM', stream, group, consumer, min_idle, start, 'COUNT', count)
local out = {}
for _, e in ipairs(r[2]) do
  if e[2] then
    local p = rcall('XPENDING', stream, group, e[1], e[1], 1)
    local deliveries = 1
    if p[1] then deliveries = p[1][4] end
    out[#out + 1] = {e[1], e[2], deliveries}
  else
    rcall('XACK', stream, group, e[1])
  end
end
return {r[1], out}
