-- Include: upsert_one(s) — create or replace one schedule's spec: what upsert.lua and
-- upsert_many.lua both do per schedule (so the two can never drift apart).
--
-- s = {hash, pending (keys), mode, expect_gen, next_ms, paused, created_ms (text), args, from,
-- to, absent, id, audit, specs, labels}: the spec's strings (field, value, ...) are
-- args[from..to] (the script's ARGV, not copied); absent = true when the caller found the hash
-- does not exist (in this script run), which spares its read; id, audit (nil: none) and specs as
-- spec_audit.lua takes them; labels = {stored = the labels text the caller read ('' none),
-- old = its pairs' index keys, new = the new spec's} (label_index.lua), LABELS_MOVED when the
-- stored text is another. Checks the schedule's own keys and state, then writes its hash; returns
-- reply, score: reply is {OK, generation, created(0/1)} or a code table as in upsert.lua's
-- header; score is the schedule's new index score ('inf' when paused or completed), nil when
-- nothing was written. The caller then adds the id to the index with that score (ZADD) and its
-- queue to the queues set, after checking those two keys itself: upsert_many.lua does both once
-- for all its schedules, and tells the scheduler once, about the earliest score.
-- @include codes
-- @include rcall
-- @include int_text
-- @include now_ms
-- @include pcall_read
-- @include version_parts
-- @include marker
-- @include spec_audit
-- @include label_index

local UPSERT_MODES = {add = true, upsert = true, replace = true}
-- What the read gives: version, runs, last_run, the marker, then the labels (LABELS_READ).
local UPSERT_READ = {'version', 'runs', 'last_run', unpack(MARKER)}
UPSERT_READ[#UPSERT_READ + 1] = 'labels'
local LABELS_READ = #UPSERT_READ
local NO_LABELS = {stored = '', old = {}, new = {}}
-- ... and for a hash that does not exist.
local NOTHING_STORED = {}
for i = 1, #UPSERT_READ do NOTHING_STORED[i] = false end
-- The time of an update, read once per script run: a bulk replace would otherwise call TIME per
-- schedule.
local upsert_now = nil

local function upsert_one(s)
  if not UPSERT_MODES[s.mode] or not (s.next_ms == '' or tonumber(s.next_ms))
      or not tonumber(s.created_ms) or (s.to - s.from + 1) % 2 ~= 0 then
    return {BAD_ARGS}
  end
  -- The state a new spec inherits: version, runs, last_run, then the run marker (marker.lua).
  -- The read is the hash's type check.
  local old = NOTHING_STORED
  if not s.absent then
    old = pcall_read('HMGET', s.hash, unpack(UPSERT_READ))
    if not old then return {WRONG_TYPE} end
  end
  local exists = old[1] ~= false
  -- Only an existing schedule can have pending occurrences (remove.lua deletes them with the
  -- hash): a new one skips the key, one command less a schedule in a bulk create.
  local pending = 'none'
  if exists then
    pending = rcall('TYPE', s.pending)['ok']
    if pending ~= 'none' and pending ~= 'zset' then return {WRONG_TYPE} end
  end
  local old_gen, created = version_parts(old[1])
  -- State fields edited by hand would make the arithmetic below fail after the first write.
  if (exists and not old_gen) or (old[2] and not tonumber(old[2])) then
    return {WRONG_TYPE}
  end
  if s.mode == 'add' and exists then return {EXISTS} end
  if s.mode == 'replace' and not exists then return {NOT_FOUND} end
  if s.expect_gen ~= '' and tostring(old_gen or 0) ~= s.expect_gen then
    return {CONFLICT, old_gen or 0}
  end
  local labels = s.labels or NO_LABELS
  if (old[LABELS_READ] or '') ~= labels.stored then return {LABELS_MOVED} end
  if not label_index(s.id, labels.old, labels.new) then return {WRONG_TYPE} end

  local gen = (old_gen or 0) + 1
  local runs = tonumber(old[2] or '0')
  local max_runs = nil
  local args = s.args
  for i = s.from, s.to, 2 do
    if args[i] == 'max_runs' then max_runs = tonumber(args[i + 1]) end
  end

  local score = 'inf'
  local status = nil
  if s.next_ms == '' or (max_runs and runs >= max_runs) then
    status = 'completed'
  elseif s.paused == '1' then
    status = 'paused'
  else
    score = s.next_ms  -- the next run lives in the index only (its score), not in the hash
  end

  local version = gen .. ':' .. (created or s.created_ms)
  if not exists and not status then
    -- A new active schedule (a bulk create's every one): the spec straight from the arguments.
    spec_audit(s, nil, gen)
    rcall('HSET', s.hash, 'version', version, unpack(args, s.from, s.to))
    return {OK, gen, 1}, score
  end
  -- One HSET of the new spec and the state it keeps.
  local fields = {'version', version}
  for i = s.from, s.to do fields[#fields + 1] = args[i] end
  -- A schedule never changed since its creation has no updated_at (readers take created_at): at
  -- 100k schedules the field would cost ~30 bytes each for nothing.
  if exists then
    upsert_now = upsert_now or int_text(now_ms())
    fields[#fields + 1] = 'updated_at'
    fields[#fields + 1] = upsert_now
  end
  if runs > 0 then
    fields[#fields + 1] = 'runs'
    fields[#fields + 1] = runs
  end
  -- last_run, then a run of the old spec, which still counts for the new one's overlap policy.
  local kept = {'last_run', unpack(MARKER)}
  for i = 1, #kept do
    if old[2 + i] then
      fields[#fields + 1] = kept[i]
      fields[#fields + 1] = old[2 + i]
    end
  end
  if status then
    fields[#fields + 1] = 'status'
    fields[#fields + 1] = status
  end
  spec_audit(s, exists and old_gen, gen, fields, upsert_now)
  if exists then rcall('DEL', s.hash) end
  -- The pending occurrences of the old spec never run (pending_push.lua); {p}:backlogs may
  -- keep the id a while: the scheduler's sweep drops an entry whose pending set is gone
  -- (release_lost.lua).
  if pending == 'zset' then rcall('DEL', s.pending) end
  rcall('HSET', s.hash, unpack(fields))

  local made = 1
  if exists then made = 0 end
  return {OK, gen, made}, score
end
