-- Include: declared(key) — whether `key` is one of the script's KEYS. A script whose optional
-- keys are found by their names (not by their positions) writes only those its caller declared:
-- on Redis Cluster a key must be declared, and an older caller that declares none gets nothing
-- written there. KEYS is read into a set once per call, on the first question.

local declared_set = nil

local function declared(key)
  if declared_set == nil then
    declared_set = {}
    for i = 1, #KEYS do declared_set[KEYS[i]] = true end
  end
  return declared_set[key] == true
end
