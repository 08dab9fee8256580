-- Include: rec_first(history, cap, sched, token) — push a new history record <b62(sched)>|<token>
-- for occurrence `sched` (ms, text); false when the key holds another type (nothing written),
-- like hist_first.
--
-- A schedule's history holds one compact record per run (or dropped occurrence), written by the
-- fire and updated in place by the worker scripts (rec_note; docs/keys.md, "History records";
-- rsched._core.history reads them back as the events they stand for). A record is the
-- occurrence's scheduled time and one token per event, '|'-separated:
--   <sched>|<code><delta>[,<field>…]|…        e.g.  vBQa9MY|f4|r9|cb,4c
-- Numbers are base 62 (b62). Each token's time is <sched> plus its delta, plus its duration for
-- a run outcome (hist_outcomes.lua, whose first field is the duration): a run that took an hour
-- stores the hour once, and the delta of its end is how late it started plus the few ms its
-- acknowledgement took. No token depends on another, so an event is appended without reading
-- the record's other times. Trailing empty fields are left out (hist_fields); text fields are
-- escaped (esc). An execution id is <schedule id>@<sched>: a record names it by <sched> alone.
-- @include b62
-- @include hist_first

local function rec_first(history, cap, sched, token)
  return hist_first(history, cap, b62(tonumber(sched)) .. '|' .. token)
end
