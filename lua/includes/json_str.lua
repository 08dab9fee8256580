-- Include: json_str(s) — s as a JSON string, for values written into hand-built JSON.

-- Ids and names are restricted to [A-Za-z0-9._:-] by the client, but a hash edited by hand could
-- hold anything, so escape through cjson.
local function json_str(s)
  return cjson.encode(s)
end
