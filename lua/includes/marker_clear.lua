-- Include: marker_clear(hash) — delete the run marker's fields (marker.lua).
-- @include rcall
-- @include marker

local function marker_clear(hash)
  rcall('HDEL', hash, unpack(MARKER))
end
