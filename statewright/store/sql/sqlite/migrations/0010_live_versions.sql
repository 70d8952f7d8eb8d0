-- 0010_live_versions: live workflows by type and machine version, so health can count the
-- ones on versions the server does not register (index ranges between the registered ones).

CREATE INDEX workflows_live_version ON workflows (type, machine_version) WHERE terminal = 0;
