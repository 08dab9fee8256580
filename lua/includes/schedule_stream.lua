-- Include: schedule_stream(stream_prefix, queue, priority) — the stream a schedule's jobs go to:
-- its queue's ("{p}:queue:<queue>"), or that of its priority level ("…#high", "…#low"); queue
-- and priority as the hash holds them (nil: default).

local function schedule_stream(stream_prefix, queue, priority)
  local name = stream_prefix .. (queue or 'default')
  if priority == 'high' or priority == 'low' then return name .. '#' .. priority end
  return name
end
