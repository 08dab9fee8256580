-- Include: esc(s) — s as a text field of a history record: '%', '|' and ',' escaped as %25 %7C
-- %2C, cut to HIST_TEXT_MAX bytes (on a UTF-8 boundary).

local HIST_TEXT_MAX = 200
local HIST_ESC = {['%'] = '%25', ['|'] = '%7C', [','] = '%2C'}

local function esc(s)
  s = tostring(s)
  if #s > HIST_TEXT_MAX then
    local cut = HIST_TEXT_MAX
    -- Never end inside a UTF-8 sequence: readers decode the record as text.
    while cut > 0 and string.byte(s, cut + 1) and string.byte(s, cut + 1) >= 128
          and string.byte(s, cut + 1) < 192 do
      cut = cut - 1
    end
    s = string.sub(s, 1, cut)
  end
  return (string.gsub(s, '[%%|,]', HIST_ESC))
end
