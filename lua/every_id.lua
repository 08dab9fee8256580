--[[ every_id — every schedule id of one partition, as one text (read-only): what a selection by
task or queue reads the hashes of (Client.select, docs/labels.md).

One text rather than an array: a client reads 100k ids as one string in milliseconds, where an
array of 100k replies costs a pure-Python client about a second. Ids never hold a newline
(rsched._core.rules.NAME_RE).

KEYS[1] schedules   ZSET {p}:schedules, the index
KEYS[2..] buckets   ZSET {p}:parked:<n>, the parked buckets in use (see park.lua)
ARGV: none

Returns the ids, one per line ('' when there are none), the index's first; WRONG_TYPE=-6 when a
key is not a sorted set (nothing read).
]]
-- @include codes
-- @include rcall
-- @include key_is

for i = 1, #KEYS do
  if not key_is(KEYS[i], 'zset') then return WRONG_TYPE end
end
local parts = {}
for i = 1, #KEYS do
  local ids = rcall('ZRANGE', KEYS[i], 0, -1)
  if #ids > 0 then parts[#parts + 1] = table.concat(ids, '\n') end
end
return table.concat(parts, '\n')
