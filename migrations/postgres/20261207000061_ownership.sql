-- Who owns a session: the user that created it, that user's team, and who else sees it
-- ('private': the owner alone; 'team': the owner's team). A workflow belongs to its creator's
-- team, each version carrying it. What was stored before principals existed belongs to the
-- daemon's root key (user 'root', team 'root'), shared with its team.
ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
ALTER TABLE sessions ADD COLUMN team TEXT NOT NULL DEFAULT 'root';
ALTER TABLE sessions ADD COLUMN visibility TEXT NOT NULL DEFAULT 'team';
ALTER TABLE workflows ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
ALTER TABLE workflows ADD COLUMN team TEXT NOT NULL DEFAULT 'root';
