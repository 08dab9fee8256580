-- Include: traceparent(text) — a W3C traceparent a client sends for the job it writes
-- ("00-<trace id>-<span id>-<flags>", lowercase hex; docs/tracing.md): nil for '' or nil (the
-- client does not trace: the job carries none), false when malformed (the caller refuses the
-- call as BAD_ARGS), else the text. TRACEPARENT is its pattern.

local TRACEPARENT = '^%x%x%-' .. string.rep('%x', 32) .. '%-' .. string.rep('%x', 16) .. '%-%x%x$'

local function traceparent(text)
  if text == nil or text == '' then return nil end
  return string.match(text, TRACEPARENT) ~= nil and text
end
