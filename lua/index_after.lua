--[[ index_after — the entries of a schedules index after a position (score, id), in index
order (read-only): one page of Client.list in one partition.

A listing's position is the last schedule it returned, which with several partitions is mostly
not in this partition's index: its place is found here by rank, with a binary search over the
schedules of the same score (a herd shares one), in one round trip.

KEYS[1] schedules   ZSET {p}:schedules, scored by next run (ms; inf when none)
ARGV[1] score       the position's score: whole ms, or +inf
ARGV[2] id          the position's schedule id
ARGV[3] count       how many entries to return at most

Returns the entries after the position as a flat array {id, score, id, score, …} (scores as
Redis prints them: "inf" for +inf).
]]
-- @include rcall

local schedules_key = KEYS[1]
local score, member, count = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- Bytewise, as a sorted set orders the members of one score (Lua's own < follows the locale).
local function at_or_before(a, b)
    for i = 1, math.min(#a, #b) do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then
            return x < y
        end
    end
    return #a <= #b
end

-- Ranks [lo, hi) hold the entries of the position's score; the first one after the position
-- is the first of those whose id sorts after its id.
local lo = rcall('ZCOUNT', schedules_key, '-inf', '(' .. score)
local hi = rcall('ZCOUNT', schedules_key, '-inf', score)
while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at_or_before(rcall('ZRANGE', schedules_key, mid, mid)[1], member) then
        lo = mid + 1
    else
        hi = mid
    end
end
return rcall('ZRANGE', schedules_key, lo, lo + count - 1, 'WITHSCORES')
