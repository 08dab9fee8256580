-- Include: label_index(id, old, new) — keep a schedule's id in the label index ({p}:label:<k>=<v>,
-- a SET of schedule ids per label pair; docs/labels.md): out of each key of ``old`` (the pairs it
-- carried) that is not in ``new``, into each key of ``new`` (again: an index entry lost by hand
-- comes back with the next write). Every key is checked before the first write: returns false,
-- having written nothing, when one holds another type; else true. A schedule without labels
-- passes two empty lists: not one command.
-- @include rcall
-- @include key_is

local function label_index(id, old, new)
  for _, keys in ipairs({old, new}) do
    for _, key in ipairs(keys) do
      if not key_is(key, 'set') then return false end
    end
  end
  local kept = {}
  for _, key in ipairs(new) do kept[key] = true end
  for _, key in ipairs(old) do
    if not kept[key] then rcall('SREM', key, id) end
  end
  for _, key in ipairs(new) do rcall('SADD', key, id) end
  return true
end
