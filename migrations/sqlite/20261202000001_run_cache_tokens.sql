-- Prompt-cache counters of a run (the provider's cached input tokens, read and written), summed
-- over its LLM calls like input_tokens; runs stored before they existed count 0.
ALTER TABLE runs ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
