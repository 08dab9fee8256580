--[[ heartbeat — keep a worker's running entries fresh so no other worker reclaims them.

For each id still pending under this consumer, reset its idle time (XCLAIM … JUSTID by the same
consumer: no delivery counted). An id pending under another consumer (it was reclaimed while
this worker stalled) or no longer pending is reported and left alone. Safe to run any number
of times.

KEYS[1] stream  {p}:queue:<queue>
ARGV[1] group   ARGV[2] consumer   ARGV[3..] entry ids

Returns the ids this consumer no longer holds.
]]
-- @include rcall

local stream = KEYS[1]
local group, consumer = ARGV[1], ARGV[2]
local mine, lost = {}, {}
for i = 3, #ARGV do
  local p = rcall('XPENDING', stream, group, ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == consumer then
    mine[#mine + 1] = ARGV[i]
  else
    lost[#lost + 1] = ARGV[i]
  end
end
if #mine > 0 then
  -- unpack() spreads its values only as the last argument (elsewhere it gives the first one):
  -- the option follows the ids inside the table.
  mine[#mine + 1] = 'JUSTID'
  rcall('XCLAIM', stream, group, consumer, 0, unpack(mine))
end
return lost
