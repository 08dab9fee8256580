-- Include: schedule_keys_ok(history, hash, pending) — true when a schedule's keys are absent or
-- of rsched's types; a key someone overwrote is left alone (the job's own outcome is still
-- recorded on the queue).
-- @include key_is

local function schedule_keys_ok(history, hash, pending)
  return key_is(history, 'list') and key_is(hash, 'hash') and key_is(pending, 'zset')
end
