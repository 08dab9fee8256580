--[[ runs_scan — the runs log's records that hold every given text, newest first (a bounded
scan; reads only).

A filtered read of the runs log (rsched._store.runs_log.log_records) looks at up to 10,000
records for the few its filter keeps: read in Redis, a record the filter cannot keep costs a
plain string.find instead of its transfer and its parse by the client. The texts are the
filter's (RunFilter.needles: its status, schedule id, task or execution id as a record writes
them); the client reads and filters what comes back. A call looks at ARGV[3] records at most
(500: ~1.3 ms of the server), so a long scan is many short calls, never one long one.

KEYS[1] the runs log {p}:runs
ARGV[1] start (an XREVRANGE bound: '+' or '(<id>')   ARGV[2] low (an XREVRANGE bound: '-' or
ms)   ARGV[3] most records looked at   ARGV[4..] the texts the record field 'r' must all hold

Returns {records looked at, the id of the last one ('' when none), then for each record that
holds them: its id, {field, value, …}}; {0, ''} when the key holds no stream.
]]
-- @include rcall
-- @include key_is

local runs = KEYS[1]
local page = {}

-- Step 1: read the records, newest first (none from a key that is no stream).
if key_is(runs, 'stream') then
  page = rcall('XREVRANGE', runs, ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
end
local out = {#page, #page > 0 and page[#page][1] or ''}

-- Step 2: keep those whose record holds every text.
for _, e in ipairs(page) do
  local f, record = e[2], nil
  for j = 1, #f - 1, 2 do
    if f[j] == 'r' then record = f[j + 1] break end
  end
  local holds = record ~= nil
  for i = 4, #ARGV do
    if not holds then break end
    holds = string.find(record, ARGV[i], 1, true) ~= nil
  end
  if holds then
    out[#out + 1] = e[1]
    out[#out + 1] = f
  end
end
return out
