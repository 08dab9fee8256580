--[[ flow_cancel — an operator cancels a running flow.

The flow ends 'cancelled': its steps not released yet are marked cancelled and never run
(lua/includes/flow_end.lua, flow_stop); a step released since whose job a worker reads later is
not run (flow_start.lua). The steps released and not ended are returned: the caller cancels
their jobs as Client.cancel does (removed while they wait, asked to stop while they run), and
each such end is recorded in the flow by the script that records it.

KEYS[1] flow  {p}:flow:<flow id>
KEYS[2..5] for a flow a schedule started: its history, hash, pending set and its starter's
          stream (flow_end.lua ends the occurrence's run)
ARGV: none

Returns {OK=5, step numbers...} | {NOT_FOUND=-2} no such flow | {FLOW_OVER=-16} it ended
already (nothing done) | {WRONG_TYPE=-6} the key is of another type.
]]
-- @include codes
-- @include rcall
-- @include key_is
-- @include now_ms
-- @include flow_end

local fkey = KEYS[1]
if not key_is(fkey, 'hash') then return {WRONG_TYPE} end
local state = rcall('HGET', fkey, 'state')
if not state or state == 'creating' then return {NOT_FOUND} end
if state ~= 'running' then return {FLOW_OVER} end
local out = {OK}
for _, n in ipairs(flow_stop(fkey, 'cancelled', now_ms(), nil)) do out[#out + 1] = n end
return out
