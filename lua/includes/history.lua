-- Include: history — a schedule's history as one compact record per run (or dropped occurrence),
-- written by the fire and updated in place by the worker scripts (docs/keys.md, "History
-- records"; rsched._core.history reads them back as the events they stand for).
-- Needs: common.lua.
--
-- A record is the occurrence's scheduled time and one token per event, '|'-separated:
--   <sched>|<code><delta>[,<field>…]|…        e.g.  vBQa9MY|f4|r9|cb,4c
-- Numbers are base 62 (0-9a-zA-Z; '-' in front when negative). Each token's time is <sched>
-- plus its delta, plus its duration for a run outcome (codes c C F T R D W, whose first field
-- is the duration): a run that took an hour stores the hour once, and the delta of its end is
-- how late it started plus the few ms its acknowledgement took. No token depends on another,
-- so an event is appended without reading the record's other times. Trailing empty fields are
-- left out. Text fields are escaped: '%' '|' ',' as %25 %7C %2C.
-- An execution id is <schedule id>@<sched>: a record names it by <sched> alone.
--
-- b62(n): n (an integer) in base 62; num62(s): the integer of that text ('' = 0).
-- esc(s): s with '%', '|' and ',' escaped, cut to HIST_TEXT_MAX bytes (on a UTF-8 boundary).
-- hist_fields(...): ',' .. each argument (nil/false = empty), trailing empties left out.
-- rec_time(rec, sched): the time (ms) of the last token (the newest event) of record `rec` of
--   occurrence `sched`.
-- rec_first(history, cap, sched, token): push a new record <b62(sched)>|<token>; false when the
--   key holds another type (nothing written), like hist_first.
-- rec_note(history, cap, sched, code, at, dur, fields): add one event to the record of `sched`
--   (ms): rewritten in place (LSET) when it is the head or among the next HIST_DEPTH records
--   (overlapping runs), else pushed as a new record (its first event trimmed away, or a
--   record written by an older rsched). dur (ms, rounded) is the outcome's duration or nil,
--   fields the token's text after the duration (hist_fields()). Returns false when the key
--   holds another type (nothing written: the read of the head doubles as the type check).
-- exec_sched(exec): the scheduled ms of an execution id (<id>@<ms>), or nil.

local HIST_DEPTH = 5
local HIST_RECORD_MAX = 2000 -- a run retried many times goes on in a new record
local HIST_TEXT_MAX = 200
local B62 = {[0] = '0'}
local B62_DIGITS = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'
local B62_VALUE, B62_BYTE = {}, {}
for i = 1, 62 do
  local byte = string.byte(B62_DIGITS, i)
  B62_VALUE[byte], B62_BYTE[i - 1] = i - 1, byte
end
local HIST_OUTCOME = {c = true, C = true, F = true, T = true, R = true, D = true, W = true}

-- Digits into a buffer and one string at the end: a worker script formats a time for every job
-- it records, and a string per digit would cost more than the rest of the record's writing.
local b62_buf = {}
local function b62(n)
  local s = B62[n]
  if s then return s end
  local v = n
  if v < 0 then v = -v end
  v = v - v % 1
  local k = 0
  repeat
    local d = v % 62
    k = k + 1
    b62_buf[k] = B62_BYTE[d]
    v = (v - d) / 62
  until v < 1
  s = string.reverse(string.char(unpack(b62_buf, 1, k)))
  if n < 0 then s = '-' .. s end
  B62[n] = s
  return s
end

local function num62(s)
  local v, sign, from = 0, 1, 1
  if string.byte(s, 1) == 45 then sign, from = -1, 2 end
  for i = from, #s do v = v * 62 + (B62_VALUE[string.byte(s, i)] or 0) end
  return sign * v
end

local HIST_ESC = {['%'] = '%25', ['|'] = '%7C', [','] = '%2C'}
local function esc(s)
  s = tostring(s)
  if #s > HIST_TEXT_MAX then
    local cut = HIST_TEXT_MAX
    -- Never end inside a UTF-8 sequence: readers decode the record as text.
    while cut > 0 and string.byte(s, cut + 1) and string.byte(s, cut + 1) >= 128
          and string.byte(s, cut + 1) < 192 do
      cut = cut - 1
    end
    s = string.sub(s, 1, cut)
  end
  return (string.gsub(s, '[%%|,]', HIST_ESC))
end

local function hist_fields(...)
  local n = select('#', ...)
  local args = {...}
  while n > 0 and (args[n] == nil or args[n] == false or args[n] == '') do n = n - 1 end
  local out = ''
  for i = 1, n do
    local v = args[i]
    if v == nil or v == false then v = '' end
    out = out .. ',' .. v
  end
  return out
end

local function rec_time(rec, sched)
  local code, d, second = string.match(rec, '|(%a)([%-%w]*),?([%-%w]*)[^|]*$')
  if not code then return sched end
  if HIST_OUTCOME[code] then return sched + num62(d) + num62(second) end
  return sched + num62(d)
end

local function rec_first(history, cap, sched, token)
  return hist_first(history, cap, b62(tonumber(sched)) .. '|' .. token)
end

-- List indexes as text: a number handed to redis.call is formatted as a float first.
local HIST_INDEX = {[0] = '0', '1', '2', '3', '4', '5'}

local function rec_note(history, cap, sched, code, at, dur, fields)
  local key = b62(sched) .. '|'
  local n = #key
  local index, rec = nil, nil
  local head = pcall_read('LINDEX', history, '0')
  if head == nil then return false end -- another type (an empty list reads as false)
  if head and string.sub(head, 1, n) == key then
    index, rec = 0, head
  elseif head then
    local next = rcall('LRANGE', history, '1', HIST_INDEX[HIST_DEPTH])
    for i = 1, #next do
      if string.sub(next[i], 1, n) == key then
        index, rec = i, next[i]
        break
      end
    end
  end
  local tail = ''
  if dur then
    tail = ',' .. b62(dur)
  elseif fields ~= '' and HIST_OUTCOME[code] then
    tail = ','  -- the duration's place
  end
  local token = code .. b62(at - sched - (dur or 0)) .. tail .. fields
  if rec and #rec < HIST_RECORD_MAX then
    rcall('LSET', history, HIST_INDEX[index], rec .. '|' .. token)
  else
    hist(history, cap, key .. token)
  end
  return true
end

local function exec_sched(exec)
  -- Ids never hold '@' (rsched._core.rules.NAME_RE): a plain find, no pattern to try at each place.
  local at = exec and string.find(exec, '@', 1, true)
  return at and tonumber(string.match(exec, '^%d+$', at + 1))
end
