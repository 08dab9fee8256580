-- Include: wrong_type(reply) — true when a redis.pcall reply is a WRONGTYPE error.

-- A reply of the wrong type (someone other than rsched wrote the key) is an answer for the
-- caller to act on; any other error (out of memory, ...) still aborts the script.
local function wrong_type(reply)
  if type(reply) == 'table' and reply['err'] then
    if string.find(reply['err'], 'WRONGTYPE', 1, true) then return true end
    error(reply)
  end
  return false
end
