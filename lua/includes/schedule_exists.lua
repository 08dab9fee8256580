-- Include: schedule_exists(hash) — true while the schedule exists.
--
-- A job that ends (or starts) after its schedule was removed writes nothing under the schedule's
-- id: its history would otherwise come back as a key nothing removes again.
-- @include rcall

local function schedule_exists(hash)
  return rcall('EXISTS', hash) == 1
end
