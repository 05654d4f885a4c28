-- A run's error in two columns, its code and its message, in place of the one text
-- `code: message` every version wrote: read back typed, without parsing at each read.
-- The old text is parsed here, once: the code is what comes before the first ': ' when that is a
-- word of lowercase letters, digits and '_'; a text without one is all message, with the code
-- 'other' (the same rule as the daemon's RunError::parse).
ALTER TABLE runs ADD COLUMN error_code TEXT;
ALTER TABLE runs ADD COLUMN error_message TEXT;
UPDATE runs SET
    error_code = substr(error, 1, instr(error, ': ') - 1),
    error_message = substr(error, instr(error, ': ') + 2)
WHERE error IS NOT NULL
  AND instr(error, ': ') > 1
  AND substr(error, 1, instr(error, ': ') - 1) NOT GLOB '*[^a-z0-9_]*';
UPDATE runs SET error_code = 'other', error_message = error
WHERE error IS NOT NULL AND error_code IS NULL;
ALTER TABLE runs DROP COLUMN error;
