--[[ upsert_many — create or replace many schedules' specs in one call; each one atomic alone.

Per schedule exactly what upsert.lua does (the shared lua/includes/upsert_one.lua): checks, then
its writes, or nothing for that schedule with its code. The schedules index and the queues set
are checked once, and written with one ZADD and one SADD per queue after the hashes (a script
runs whole: nobody sees the hashes without their index entries), the parked ones with one ZADD
per bucket (the client sends the items of a few buckets a call); the scheduler is woken once,
about the earliest new score, when that comes before the index's head as it was before the
call.

KEYS[1] schedules  ZSET of schedules by next run
KEYS[2] queues     SET of queue names
KEYS[3] op         {p}:ops:<minute> (replay protection)
KEYS[4] parked     {p}:parked (see park.lua)
KEYS[5] audit      {p}:audit, the audit trail (docs/audit.md)
KEYS[6..] per schedule, in the order of the items: {p}:schedule:<id>, {p}:pending:<id>,
                   {p}:parked:<n> (its parked bucket), {p}:specs:<id> (its spec history), then
                   its n_old + n_new label index keys
ARGV[1] wake       pub/sub channel
ARGV[2] op_id      request id of this call
ARGV[3] created_ms creation time the client computed next runs with (new schedules)
ARGV[4] park_after_ms a schedule goes to its parked bucket when its next run is later than now +
                   this (paused and completed ones too), else to the index; '' never
ARGV[5] audit      who and from where, the stream's cap, specs kept (lua/includes/audit_ctx.lua)
ARGV[6..] items    per schedule: id, mode, expect_gen, next_ms, paused, queue, labels, n_old,
                   n_new, n, then n spec strings (field, value, …): each as upsert.lua's
                   arguments of that name

Each schedule replaced appends its own record to the audit trail (its changes), and its spec
history as upsert.lua's does; the schedules the call creates get one record per action for the
whole call, naming them all (lua/includes/spec_audit.lua).

Returns one string: a reply per item, comma-separated, in order: "5:<generation>:<created 0/1>"
for OK=5, "-3:<generation>" for CONFLICT=-3, else the code alone: EXISTS=-9 (add),
NOT_FOUND=-2 (replace), LABELS_MOVED=-15 (its stored labels are not those given), WRONG_TYPE=-6 (a key of the item has the wrong type, or its stored
generation/runs are not numbers). The whole call answers a lone code when nothing was written:
WRONG_TYPE=-6 (the index, the queues set or the audit stream has the wrong type) or BAD_ARGS=-7 (malformed
arguments of any item, or the audit argument: every item is checked before the first write).
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include op_replay
-- @include op_store
-- @include unpark_one
-- @include upsert_one
-- @include earlier_than_head
-- @include audit_ctx
-- @include audit

local schedules_key, queues_key, op_key, parked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wake, op_id, created_ms = ARGV[1], ARGV[2], ARGV[3]
local park_after = tonumber(ARGV[4])
local audit_key = KEYS[5]

local replay = op_replay(op_key, op_id)
if replay then return replay end
if not (key_is(schedules_key, 'zset') and key_is(queues_key, 'set')
        and key_is(parked_key, 'zset')) then
  return tostring(WRONG_TYPE)
end
if op_id == '' or not tonumber(created_ms) then return tostring(BAD_ARGS) end
local ctx, refused = audit_ctx(audit_key, ARGV[5])
if not ctx then return tostring(refused) end

-- Every item parsed before the first write: malformed arguments write nothing at all.
local items = {}
local created = {}  -- action -> the ids this call created (one audit record each)
local a, k = 6, 6
while a <= #ARGV do
  local n_old, n_new = tonumber(ARGV[a + 7] or ''), tonumber(ARGV[a + 8] or '')
  local n = tonumber(ARGV[a + 9] or '')
  if not (n and n_old and n_new) or n < 0 or n % 2 ~= 0 or a + 9 + n > #ARGV
      or k + 3 + n_old + n_new > #KEYS or not UPSERT_MODES[ARGV[a + 1]]
      or not (ARGV[a + 3] == '' or tonumber(ARGV[a + 3])) then
    return tostring(BAD_ARGS)
  end
  local labels = NO_LABELS  -- most schedules have none: no tables of their own
  if ARGV[a + 6] ~= '' or n_old + n_new > 0 then
    labels = {stored = ARGV[a + 6], old = {unpack(KEYS, k + 4, k + 3 + n_old)},
              new = {unpack(KEYS, k + 4 + n_old, k + 3 + n_old + n_new)}}
  end
  items[#items + 1] = {
    hash = KEYS[k], pending = KEYS[k + 1], parked = KEYS[k + 2], id = ARGV[a], mode = ARGV[a + 1],
    expect_gen = ARGV[a + 2], next_ms = ARGV[a + 3], paused = ARGV[a + 4], queue = ARGV[a + 5],
    created_ms = created_ms, args = ARGV, from = a + 10, to = a + 9 + n, specs = KEYS[k + 3],
    audit = ctx, created = created, labels = labels,
  }
  a, k = a + 10 + n, k + 4 + n_old + n_new
end
if k ~= #KEYS + 1 then return tostring(BAD_ARGS) end

-- A bulk create's schedules are all new: one EXISTS over the call's hashes then spares each
-- one its read (upsert_one's ``absent``).
local hashes = {}
for _, item in ipairs(items) do hashes[#hashes + 1] = item.hash end
-- (unpack has a stack limit: a larger call reads each hash.)
local all_absent = #hashes > 0 and #hashes <= 4000 and rcall('EXISTS', unpack(hashes)) == 0
local written = {}
-- An id twice in one call: the second reads what the first wrote.
local function written_before(item)
  local seen = written[item.hash]
  written[item.hash] = true
  return seen
end

local head = rcall('ZRANGE', schedules_key, 0, 0, 'WITHSCORES')
local horizon = park_after and now_ms() + park_after
-- Most calls find nothing parked: a schedule they put in the index then has no bucket to leave.
local any_parked = rcall('EXISTS', parked_key) == 1
local earliest = nil
local out, index, queues, unindexed, bounds = {}, {}, {}, {}, {}
-- bucket key -> {its new entries (score, id, ...), their items}
local buckets = {}
local function to_index(item)
  index[#index + 1], index[#index + 2] = item.score, item.id
  if item.score ~= 'inf' and (not earliest or item.value < tonumber(earliest)) then
    earliest = item.score
  end
end

-- Writes of the whole call in one command each where they can be (in bounded groups: unpack has
-- a stack limit): index entries, ids out of the index, buckets' bounds.
local function flush(cmd, key, args, opt)
  for first = 1, #args, 2000 do
    local last = math.min(#args, first + 1999)
    if opt then rcall(cmd, key, opt, unpack(args, first, last))
    else rcall(cmd, key, unpack(args, first, last)) end
  end
end

for i, item in ipairs(items) do
  item.absent = all_absent and not written_before(item)
  local reply, score = upsert_one(item)
  if score then
    queues[item.queue] = true
    local value = score == 'inf' and math.huge or tonumber(score)
    item.score, item.value = score, value
    if horizon and value > horizon then
      local bucket = buckets[item.parked]
      if not bucket then
        bucket = {entries = {}, items = {}}
        buckets[item.parked] = bucket
      end
      local entries = bucket.entries
      entries[#entries + 1], entries[#entries + 2] = score, item.id
      bucket.items[#bucket.items + 1] = item
    else
      to_index(item)
      if any_parked then unpark_one(item.parked, parked_key, item.id) end
    end
  end
  out[i] = table.concat(reply, ':')
end
-- The parked ones, one ZADD a bucket (the client sends a call's items grouped by bucket). A
-- bucket key of another type (not rsched's) refuses its entries: the index takes them.
for key, bucket in pairs(buckets) do
  local n = string.match(key, '([0-9]+)$')
  local entries, parked = bucket.entries, true
  for first = 1, #entries, 2000 do
    local last = math.min(#entries, first + 1999)
    parked = type(redis.pcall('ZADD', key, unpack(entries, first, last))) == 'number'
    if not parked then break end
  end
  for _, item in ipairs(bucket.items) do
    if parked then
      unindexed[#unindexed + 1] = item.id
      if not bounds[n] or item.value < bounds[n][1] then bounds[n] = {item.value, item.score} end
    else
      to_index(item)
    end
  end
end
flush('ZADD', schedules_key, index)
flush('ZREM', schedules_key, unindexed)
local lows = {}
for n, low in pairs(bounds) do lows[#lows + 1], lows[#lows + 2] = low[2], n end
flush('ZADD', parked_key, lows, 'LT')
for queue in pairs(queues) do rcall('SADD', queues_key, queue) end
for action, ids in pairs(created) do
  audit(ctx, action, ids[1], nil, 1, nil, #ids .. ' created', ids)
end
if earliest and earlier_than_head(earliest, head) then rcall('PUBLISH', wake, earliest) end
return op_store(op_key, op_id, table.concat(out, ','))
