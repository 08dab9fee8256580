-- Include: hist_outcomes — the codes of a history record's run outcomes (completed, cancelled,
-- failed, timed_out, retry, dead, waiting, expired): the tokens whose first field is the run's
-- duration.

local HIST_OUTCOME = {c = true, C = true, F = true, T = true, R = true, D = true, W = true,
                      E = true}
