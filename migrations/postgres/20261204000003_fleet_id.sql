-- The fleet's identity: one random id per database, which every node reads at start and puts in
-- its NATS subjects, so that two fleets sharing one NATS server (or nodes of the same ids in two
-- fleets) never hear each other.
CREATE TABLE fleet (
    id TEXT COLLATE "C" PRIMARY KEY DEFAULT gen_random_uuid()::text
);
INSERT INTO fleet DEFAULT VALUES;
