-- The chat channel a run's prompt came from (channelSource, channelId, channelSenderId), as a JSON
-- object; NULL for a run no channel sent.
ALTER TABLE runs ADD COLUMN channel TEXT;
