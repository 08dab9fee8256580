--[[ take — read up to `count` new entries for one consumer across several queue streams, and
return them as ONE JSON document, without blocking.

Why a script: a reply of n entries × ~20 fields costs the client ~20 n RESP parses; one JSON
string is decoded in a single C call. Workers use it while their queues have work, and a plain
blocking XREADGROUP when they are idle. Streams are read in the order given (the worker rotates
it between calls so that no queue starves) until `count` entries are taken.

A re-sent call (lost reply) leaves the first call's entries pending under this consumer with
no worker running them; they are reclaimed after the visibility timeout like any entry of a
vanished worker.

KEYS[1..n] streams {p}:queue:<queue>
ARGV[1] group   ARGV[2] consumer   ARGV[3] count (total over all streams)

Returns a JSON array with one item per stream that had entries: a pair of the key index
(1-based) and the list of that stream's entries, each a pair of entry id and {field: value}.
Returns '[]' when there is none.
Errors: NOGROUP as raised by XREADGROUP (the group is missing: the caller re-creates it);
WRONGTYPE before anything is read when a key is not a stream.
]]
-- @include rcall
local group, consumer, left = ARGV[1], ARGV[2], tonumber(ARGV[3])
for i = 1, #KEYS do
  local t = rcall('TYPE', KEYS[i])['ok']
  if t ~= 'stream' and t ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is a ' .. t .. ', not a stream')
  end
end
local out = {}
for i = 1, #KEYS do
  if left <= 0 then break end
  local res = rcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', left, 'STREAMS', KEYS[i], '>')
  if res and res[1] then
    local entries = {}
    for _, e in ipairs(res[1][2]) do
      local f, obj = e[2], {}
      for j = 1, #f, 2 do obj[f[j]] = f[j + 1] end
      if #f == 0 then obj = cjson.decode('{}') end
      entries[#entries + 1] = {e[1], obj}
    end
    left = left - #entries
    out[#out + 1] = {i, entries}
  end
end
if #out == 0 then return '[]' end
return cjson.encode(out)
