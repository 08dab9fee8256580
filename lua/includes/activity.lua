-- Include: activity(key, now, counts, lag) — add one script call's counts to the partition's
-- activity counters {p}:activity (docs/keys.md, "Activity counters").
--
-- One HASH of two rings of slots: minute m mod 64 ('m<slot>') and hour h mod 26 ('h<slot>').
-- A slot's field '<slot>' holds the minute (hour) it counts, as epoch minutes (hours); its
-- counters are '<slot>:<name>'. A write into a slot that still holds an older minute clears it
-- first, so the hash stays bounded (at most 90 slots of a few fields) without an EXPIRE or a
-- sweep, and a minute once over is never rewritten. `counts` maps a counter's name (fired,
-- completed, failed, dead, skipped, cancelled) to how many this call adds (0 adds nothing); `lag`
-- (optional) maps a lag bucket's index to how many fires were that late (fields 'lag<i>',
-- bounds in rsched._core.activity.LAG_BOUNDS_MS). Called once per script call, with the call's
-- totals: a batch of thousands costs the same few commands as one item.
--
-- Bookkeeping: nothing is written when key is nil or holds another type, and it never refuses
-- the outcome it counts. A retried call counts nothing twice, since the caller counts only what
-- this call did (a re-sent call finds its entries no longer pending, or its items stale).
-- @include rcall

local function activity(key, now, counts, lag)
  if not key then return end
  -- Clear a slot for a new minute (hour): its counters, then its stamp.
  local function activity_slot(slot, stamp)
    local fields = {}
    for _, name in ipairs({'fired', 'completed', 'failed', 'dead', 'skipped', 'cancelled'}) do
      fields[#fields + 1] = slot .. ':' .. name
    end
    for i = 0, 13 do fields[#fields + 1] = slot .. ':lag' .. i end
    rcall('HDEL', key, unpack(fields))
    rcall('HSET', key, slot, stamp)
  end
  local minute = math.floor(now / 60000)
  local hour = math.floor(minute / 60)
  local ms, hs = 'm' .. (minute % 64), 'h' .. (hour % 26)
  local stamps = redis.pcall('HMGET', key, ms, hs)
  if stamps.err then return end
  local m_at, h_at = string.format('%d', minute), string.format('%d', hour)
  if stamps[1] ~= m_at then activity_slot(ms, m_at) end
  if stamps[2] ~= h_at then activity_slot(hs, h_at) end
  for name, n in pairs(counts) do
    if n > 0 then
      rcall('HINCRBY', key, ms .. ':' .. name, n)
      rcall('HINCRBY', key, hs .. ':' .. name, n)
    end
  end
  if lag then
    for i, n in pairs(lag) do
      rcall('HINCRBY', key, ms .. ':lag' .. i, n)
      rcall('HINCRBY', key, hs .. ':lag' .. i, n)
    end
  end
end
