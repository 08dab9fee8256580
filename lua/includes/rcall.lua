-- Include: rcall — the short name every script and include calls Redis by.

local rcall = redis.call
