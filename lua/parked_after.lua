--[[ parked_after — the entries of parked buckets after a position (score, id), in index order
(read-only): the parked part of one page of Client.list in one partition (index_after.lua reads
the index's part; the caller merges the two).

Each bucket is read from its first entry after the position (found by rank, as index_after.lua
does), a few entries at a time, and the buckets are merged through a heap, so a page costs a
few commands a bucket however many entries are parked.

KEYS[1..] buckets  {p}:parked:<n>
ARGV[1] score      the position's score: whole ms, or +inf ('-inf' with an empty id: from the
                   start)
ARGV[2] id         the position's schedule id
ARGV[3] count      how many entries to return at most

Returns the first `count` entries after the position over all the buckets, in order, as a flat
array {id, score, id, score, …} (scores as Redis prints them: "inf" for +inf).
]]
-- @include rcall
local score, member, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local CHUNK = 4

-- Bytewise, as a sorted set orders the members of one score (Lua's own < follows the locale).
local function at_or_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

local function value(s) return s == 'inf' and math.huge or tonumber(s) end

-- Cursor of one bucket: its next entry (id, score text, score value) and where to read next.
local function fill(c)
  if c.i > #c.page then
    c.page = rcall('ZRANGE', c.key, c.rank, c.rank + CHUNK - 1, 'WITHSCORES')
    c.rank, c.i = c.rank + CHUNK, 1
    if #c.page == 0 then return false end
  end
  c.id, c.text = c.page[c.i], c.page[c.i + 1]
  c.value = value(c.text)
  c.i = c.i + 2
  return true
end

local function before(a, b)
  if a.value ~= b.value then return a.value < b.value end
  return a.id ~= b.id and at_or_before(a.id, b.id)
end

local heap = {}
local function push(c)
  heap[#heap + 1] = c
  local i = #heap
  while i > 1 do
    local up = math.floor(i / 2)
    if not before(heap[i], heap[up]) then break end
    heap[i], heap[up] = heap[up], heap[i]
    i = up
  end
end
local function sift(i)
  local n = #heap
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if l <= n and before(heap[l], heap[m]) then m = l end
    if r <= n and before(heap[r], heap[m]) then m = r end
    if m == i then return end
    heap[i], heap[m] = heap[m], heap[i]
    i = m
  end
end

for _, key in ipairs(KEYS) do
  local lo, hi = 0, 0
  if score ~= '-inf' then
    lo = rcall('ZCOUNT', key, '-inf', '(' .. score)
    hi = rcall('ZCOUNT', key, '-inf', score)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at_or_before(rcall('ZRANGE', key, mid, mid)[1], member) then lo = mid + 1 else hi = mid end
    end
  end
  local c = {key = key, rank = lo, page = {}, i = 1}
  if fill(c) then push(c) end
end

local out = {}
while #out < 2 * count and #heap > 0 do
  local c = heap[1]
  out[#out + 1], out[#out + 2] = c.id, c.text
  if fill(c) then
    sift(1)
  else
    heap[1] = heap[#heap]
    heap[#heap] = nil
    if #heap > 0 then sift(1) end
  end
end
return out
