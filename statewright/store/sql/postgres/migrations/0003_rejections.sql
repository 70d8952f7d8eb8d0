-- 0003_rejections: a log of refused events (illegal in the state, or a payload the event's
-- schema rejects), for the invalid-transition alert. Nothing else changes on a refusal.

CREATE TABLE rejections (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id TEXT             NOT NULL,
    type        TEXT             NOT NULL,
    tenant      TEXT             NOT NULL,
    state       TEXT             NOT NULL,
    event       TEXT             NOT NULL,
    code        TEXT             NOT NULL,
    actor       TEXT             NOT NULL,
    message     TEXT             NOT NULL,
    at          DOUBLE PRECISION NOT NULL
);
-- "refusals in the last window", of every tenant or of one
CREATE INDEX rejections_at ON rejections (at);
CREATE INDEX rejections_tenant_at ON rejections (tenant, at);
