--[[ hand_back — a worker forced to exit gives back the entries it holds, for the next reclaim.

Each id still pending under this consumer gets an idle time far past any visibility timeout
(XCLAIM … IDLE … JUSTID by the same consumer: no delivery counted), so the next reclaimer of
any worker takes it over at once instead of after the visibility timeout. Ids held by another
consumer or no longer pending are left alone. Safe to run any number of times.

KEYS[1] stream  {p}:queue:<queue> (or a priority level's stream)
ARGV[1] group   ARGV[2] consumer   ARGV[3] idle ms   ARGV[4..] entry ids

Returns the number of entries handed back (claimed with the new idle time).
]]
-- @include rcall
-- @include key_is

local stream = KEYS[1]
local group, consumer, idle = ARGV[1], ARGV[2], ARGV[3]
local mine = {}
if key_is(stream, 'stream') then
  for i = 4, #ARGV do
    local p = rcall('XPENDING', stream, group, ARGV[i], ARGV[i], 1)
    if p[1] and p[1][2] == consumer then mine[#mine + 1] = ARGV[i] end
  end
end
local n, handed = #mine, 0
if n > 0 then
  -- unpack() spreads its values only as the last argument (elsewhere it gives the first one):
  -- the options follow the ids inside the table.
  mine[n + 1], mine[n + 2], mine[n + 3] = 'IDLE', idle, 'JUSTID'
  -- XCLAIM answers with the ids it claimed (not one deleted from the stream meanwhile).
  handed = #rcall('XCLAIM', stream, group, consumer, 0, unpack(mine))
end
return handed
