-- Include: limit_park(L, exec, order, key, when, rec) — job `exec` waits on `key` (its record
-- rec: {k = key, o = order, s = stream, f = fields, l = limits, t = since}); `when` (ms, -1: at
-- a release) is when the key may let it start: the key is ready for the workers' resume calls
-- from then. The key's declared numbers are kept while it has waiting jobs (limits_read lists
-- it, an operator's pattern finds it).
-- @include rcall
-- @include limit_waits

local function limit_park(L, exec, order, key, when, rec)
  rec.k = key
  rcall('ZADD', L.waiting, 0, key .. '\0' .. order .. '\0' .. exec)
  rcall('HSET', L.jobs, exec, cjson.encode(rec))
  limit_waits(L, rec, 1)
  for _, lim in ipairs(rec.l) do
    if lim[2] == key then
      local c = lim[3]
      if type(c) ~= 'number' then c = '' end
      rcall('HSETNX', L.keys, key, lim[1] .. '\0' .. c .. '\0' .. lim[4] .. '\0' .. lim[5])
    end
  end
  if when >= 0 then rcall('ZADD', L.ready, 'LT', when, key) end
end
