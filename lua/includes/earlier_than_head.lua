-- Include: earlier_than_head(score, head) — true when `score` (an index score as text, or 'inf')
-- comes before the index's head as read before the writes (`head` is ZRANGE 0 0 WITHSCORES):
-- the scheduler must be woken.

local function earlier_than_head(score, head)
  return score ~= 'inf' and (not head[2] or tonumber(score) < tonumber(head[2]))
end
