-- Include: job_text(v) — a text of a worker's event as a history record's field (escaped); nil
-- when v is not a non-empty string.
-- @include esc

local function job_text(v)
  if type(v) == 'string' and v ~= '' then return esc(v) end
  return nil
end
