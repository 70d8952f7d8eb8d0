-- 0003_tenant: tenant scoping; existing workflows belong to the 'default' tenant.

ALTER TABLE workflows ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE INDEX workflows_tenant ON workflows (tenant, state_entered_at);
