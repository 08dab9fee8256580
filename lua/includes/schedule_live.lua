-- Include: schedule_live(hash) — true while the schedule exists and its key is a hash:
-- schedule_exists and the hash's part of schedule_keys_ok in one command (the worker scripts run
-- it for every job).
-- @include rcall

local function schedule_live(hash)
  return rcall('TYPE', hash)['ok'] == 'hash'
end
