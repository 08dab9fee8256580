-- Include: stream_of(fields, normal, high, low) — the stream of a job's priority level (its
-- 'priority' field): high or low when the job is of that level and the caller gave that stream,
-- else normal.

local function stream_of(fields, normal, high, low)
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'priority' then
      local level = fields[i + 1]
      if level == 'high' and high then return high end
      if level == 'low' and low then return low end
      return normal
    end
  end
  return normal
end
