--[[ complete — record the outcome of a batch of finished runs and acknowledge their entries.

For each item: XACK; when the entry was still pending, XDEL it (the stream holds only entries
not yet finished, so it stays bounded without ever trimming a pending one), record the event
on the schedule's history and end the schedule's run (running marker, buffer_one release).
An entry no longer pending (this call re-sent, or another worker that reclaimed it finished
first) is left alone, so nothing is recorded twice.

KEYS[1] stream  {p}:queue:<queue>
then 3 keys per schedule item (items with an empty schedule id take none):
  history {p}:history:<id>, running {p}:running:<id>, buffered {p}:buffered:<id>
ARGV[1] group   ARGV[2] history cap
then 6 args per item: entry id, execution id, schedule id ('' = none), attempt,
  event ('completed' | 'cancelled'), extra (JSON fragment, '' or ',…')

Returns one code per item: 1 recorded | 0 was not pending (nothing done).
]]
-- @include common
-- @include job_run

local stream = KEYS[1]
local group, cap = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local out = {}
local k = 2
local n = (#ARGV - 2) / 6
for i = 0, n - 1 do
  local a = 3 + i * 6
  local id, exec, sid, attempt = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local event, extra = ARGV[a + 4], ARGV[a + 5]
  local history, running, buffered
  if sid ~= '' then
    history, running, buffered = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    k = k + 3
  end
  local code = 0
  if rcall('XACK', stream, group, id) == 1 then
    rcall('XDEL', stream, id)
    if sid ~= '' and schedule_keys_ok(history, running, buffered) then
      job_event(history, cap, event, exec, attempt, now, extra)
      finish_run(running, buffered, stream, history, cap, exec, now)
    end
    code = 1
  end
  out[#out + 1] = code
end
return out
