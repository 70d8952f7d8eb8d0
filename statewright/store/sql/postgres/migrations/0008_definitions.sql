-- 0008_definitions: the machine definitions engines registered, one row per (name, version).
--   fingerprint  sha256 of the canonical definition document (statewright.definition.fingerprint)
--   document     that document, to tell an edit that only adds from one that changes
-- An engine refuses to open when a version's definition no longer matches its row.

CREATE TABLE definitions (
    name          TEXT             NOT NULL,
    version       INTEGER          NOT NULL,
    fingerprint   TEXT             NOT NULL,
    document      JSONB            NOT NULL,
    registered_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (name, version)
);
