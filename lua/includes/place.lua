-- Include: place(index, bucket, parked, id, score, horizon) — put a schedule's entry where it
-- goes, the index or its parked bucket (docs/keys.md, "Parked schedules"). Returns true when it
-- was parked.
--
-- The entry of `id` with `score` ('inf' or whole ms as text) goes to the index when it is due by
-- `horizon` (ms; nil: never parked), else to its bucket `bucket` ({p}:parked:<n>: its number is
-- the last field of the name) with the bucket's bound in `parked` lowered to it; out of the
-- other either way.
-- @include rcall
-- @include unpark_one

local function place(index, bucket, parked, id, score, horizon)
  if horizon and (score == 'inf' or tonumber(score) > horizon) then
    rcall('ZADD', bucket, score, id)
    rcall('ZADD', parked, 'LT', score, string.match(bucket, '([0-9]+)$'))
    rcall('ZREM', index, id)
    return true
  end
  rcall('ZADD', index, score, id)
  unpark_one(bucket, parked, id)
  return false
end
