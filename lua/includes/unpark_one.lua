-- Include: unpark_one(bucket, parked, id) — take `id` out of its parked bucket (docs/keys.md,
-- "Parked schedules").
-- @include rcall

-- A bucket left empty leaves the parked set too (a bound of a bucket that is gone would only
-- send the leader to look at nothing). A bucket key of another type (not rsched's) holds nothing
-- of rsched's to take out.
local function unpark_one(bucket, parked, id)
  if redis.pcall('ZREM', bucket, id) == 1 and rcall('EXISTS', bucket) == 0 then
    rcall('ZREM', parked, string.match(bucket, '([0-9]+)$'))
  end
end
