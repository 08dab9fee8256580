-- Include: limit_waits(L, rec, delta) — count a waiting job in (delta 1) or out (delta -1) of the
-- waiting jobs of its key's template (L.counts 'w:<template>').
-- @include rcall

local function limit_waits(L, rec, delta)
  for _, lim in ipairs(rec.l) do
    if lim[2] == rec.k then
      rcall('HINCRBY', L.counts, 'w:' .. lim[1], delta)
      return
    end
  end
end
