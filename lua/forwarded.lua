--[[ forwarded — acknowledge and delete entries whose jobs forward.lua wrote to partition 0.

Running it twice does nothing more (an entry no longer pending is left alone).

KEYS[1] stream  {p}:queue:<queue>[#level]
ARGV[1] group   ARGV[2..] entry ids

Returns how many entries were still pending (now acknowledged and deleted).
]]
-- @include rcall

local stream, group = KEYS[1], ARGV[1]
local done = 0
for i = 2, #ARGV do
  if rcall('XACK', stream, group, ARGV[i]) == 1 then
    rcall('XDEL', stream, ARGV[i])
    done = done + 1
  end
end
return done
