-- Include: job_num(v) — a number of a worker's event as a history record's field: in base 62,
-- rounded; nil when v is not a number.
-- @include b62

local function job_num(v)
  v = tonumber(v)
  if v then return b62(math.floor(v + 0.5)) end
  return nil
end
