--[[ requeue — move dead letters back onto their queue's stream, as attempt 1.

Each dead letter is re-queued and removed from the dead-letter stream in one step; an id that
is gone (already re-queued or purged) is skipped, so running it twice re-queues nothing twice.
A dead letter whose stored job cannot be read is left in place and not counted.

A job goes back to the stream of its priority level (its 'priority' field), so it keeps its
level. It is marked 'requeued' (field 'requeued' = '1'): an operator asked for it to run, so its
start deadline (docs/keys.md, "expire") no longer applies.

KEYS[1] dead    {p}:dead:<queue>
KEYS[2] stream  {p}:queue:<queue>         (normal level)
KEYS[3] high    {p}:queue:<queue>#high    optional
KEYS[4] low     {p}:queue:<queue>#low     optional
ARGV[1..] dead-letter entry ids

Returns the number re-queued | WRONG_TYPE=-6 a key has the wrong type.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include decode_fields
-- @include stream_of

local dead, stream, high, low = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if not (key_is(dead, 'stream') and key_is(stream, 'stream')) then return WRONG_TYPE end
if (high and not key_is(high, 'stream')) or (low and not key_is(low, 'stream')) then
  return WRONG_TYPE
end
local moved = 0
for i = 1, #ARGV do
  local e = rcall('XRANGE', dead, ARGV[i], ARGV[i])
  if e[1] then
    local f = e[1][2]
    local job = nil
    for j = 1, #f, 2 do
      if f[j] == 'job' then job = decode_fields(f[j + 1]) end
    end
    if job then
      local marked = false
      for j = 1, #job, 2 do
        if job[j] == 'attempt' then job[j + 1] = '1' end
        if job[j] == 'requeued' then marked = true end
      end
      if not marked then
        job[#job + 1] = 'requeued'
        job[#job + 1] = '1'
      end
      rcall('XADD', stream_of(job, stream, high, low), '*', unpack(job))
      rcall('XDEL', dead, ARGV[i])
      moved = moved + 1
    end
  end
end
return moved
