-- Include: b62_digits — the digits of base 62, the numbers of history records (rec_first.lua):
-- 0-9a-zA-Z, with '-' in front of a negative number.

local B62_DIGITS = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'
