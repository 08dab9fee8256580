--[[ find_job — where a job waits or runs, by its execution id (a bounded scan; reads only).

Looks through the first ARGV[2] entries of each stream (a stream holds only the jobs that wait
or run: finished ones are deleted) and the first ARGV[2] members of each delayed set (by due
time), in the order of KEYS. The scan is bounded so that a lookup never blocks the server for
long: a job deeper than that in a longer queue is not found (docs/keys.md).

KEYS[1..n]   streams {p}:queue:<queue>[#level]   (n = ARGV[3])
KEYS[n+1..]  delayed sets {p}:delayed:<queue>
ARGV[1] execution id   ARGV[2] most entries read per key   ARGV[3] n (how many keys are streams)

Returns {} when not found, or {key index, entry id or delayed member, {field, value, …}, due ms
(delayed only, else 0)}.
]]
-- @include rcall
-- @include key_is

local exec, limit, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local needle = '"' .. exec .. '"'
for i = 1, #KEYS do
  local key = KEYS[i]
  if i <= n then
    if key_is(key, 'stream') then
      for _, e in ipairs(rcall('XRANGE', key, '-', '+', 'COUNT', limit)) do
        local f = e[2]
        for j = 1, #f - 1, 2 do
          if f[j] == 'execution_id' then
            if f[j + 1] == exec then return {i, e[1], f, 0} end
            break
          end
        end
      end
    end
  elseif key_is(key, 'zset') then
    local members = rcall('ZRANGE', key, 0, limit - 1, 'WITHSCORES')
    for j = 1, #members - 1, 2 do
      local m = members[j]
      if string.find(m, needle, 1, true) then
        local ok, f = pcall(cjson.decode, m)
        if ok and type(f) == 'table' then
          for k = 1, #f - 1, 2 do
            if f[k] == 'execution_id' and f[k + 1] == exec then
              return {i, m, f, members[j + 1]}
            end
          end
        end
      end
    end
  end
end
return {}
