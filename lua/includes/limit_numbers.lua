-- Include: limit_numbers(L, key, c, n, ms, cache) — a key's numbers: an operator's for the key
-- (L.set, looked up only when some key has one), else for the longest pattern that matches it
-- (L.patterns, read once per call into cache), else the declared ones. c: concurrency (nil: none); n, ms: starts per window (0: none).
-- @include rcall
-- @include glob_pattern

local function limit_numbers(L, key, c, n, ms, cache)
  if cache.exact == nil then cache.exact = rcall('EXISTS', L.set) == 1 end
  local raw = cache.exact and rcall('HGET', L.set, key)
  if not raw then
    if not cache.patterns then
      cache.patterns = {}
      local all = rcall('HGETALL', L.patterns)
      for i = 1, #all, 2 do
        cache.patterns[#cache.patterns + 1] = {glob_pattern(all[i]), all[i + 1], #all[i]}
      end
      table.sort(cache.patterns, function(a, b) return a[3] > b[3] end)
    end
    for _, p in ipairs(cache.patterns) do
      if string.find(key, p[1]) then
        raw = p[2]
        break
      end
    end
  end
  if raw then
    local ok, o = pcall(cjson.decode, raw)
    if ok and type(o) == 'table' then
      if type(o.c) == 'number' then c = o.c end
      if type(o.r) == 'table' and type(o.r[1]) == 'number' and type(o.r[2]) == 'number' then
        n, ms = o.r[1], o.r[2]
      end
    end
  end
  return c, n, ms
end
