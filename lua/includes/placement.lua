-- Include: where a schedule's entry goes, the index or its parked bucket (docs/keys.md, "Parked
-- schedules"). Needs: common.
-- Defines: unpark_one(bucket, parked, id), place(index, bucket, parked, id, score, horizon).

-- Take `id` out of its bucket; a bucket left empty leaves the parked set too (a bound of a bucket
-- that is gone would only send the leader to look at nothing). A bucket key of another type (not
-- rsched's) holds nothing of rsched's to take out.
local function unpark_one(bucket, parked, id)
  if redis.pcall('ZREM', bucket, id) == 1 and rcall('EXISTS', bucket) == 0 then
    rcall('ZREM', parked, string.match(bucket, '([0-9]+)$'))
  end
end

-- The entry of `id` with `score` ('inf' or whole ms as text) goes to the index when it is due by
-- `horizon` (ms; nil: never parked), else to its bucket `bucket` ({p}:parked:<n>: its number is
-- the last field of the name) with the bucket's bound in `parked` lowered to it; out of the
-- other either way. Returns true when it was parked.
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
