-- The schema the release before migrations (commit c917f17) made with init_schema (create_all),
-- dumped from a fresh database: loaded by tests/integration/test_schema_migrations.py.
CREATE TABLE namespaces (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	embedding_model VARCHAR(128) NOT NULL, 
	dimension INTEGER NOT NULL, 
	change_seq BIGINT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT uq_namespaces_tenant_name UNIQUE (tenant, name)
);
CREATE TABLE ingest_tasks (
	task_id VARCHAR(32) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	namespace VARCHAR(256) NOT NULL, 
	document_id VARCHAR(128) NOT NULL, 
	text TEXT, 
	text_bytes BIGINT NOT NULL, 
	metadata_json TEXT NOT NULL, 
	on_duplicate VARCHAR(16) NOT NULL, 
	submitted_by VARCHAR(32) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	phase VARCHAR(16) NOT NULL, 
	percent INTEGER NOT NULL, 
	error_code VARCHAR(64) NOT NULL, 
	error_message TEXT NOT NULL, 
	error_data_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	lease_owner VARCHAR(64) DEFAULT '' NOT NULL, 
	lease_until DATETIME, 
	PRIMARY KEY (task_id)
);
CREATE INDEX ix_tasks_state_created ON ingest_tasks (state, created_at);
CREATE TABLE api_keys (
	key_id VARCHAR(32) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	name VARCHAR(128) NOT NULL, 
	secret_sha256 VARCHAR(64) NOT NULL, 
	scopes_json TEXT NOT NULL, 
	namespaces_json TEXT NOT NULL, 
	channels_json TEXT DEFAULT '[]' NOT NULL, 
	groups_json TEXT DEFAULT '[]' NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME, 
	revoked_at DATETIME, 
	PRIMARY KEY (key_id)
);
CREATE INDEX ix_api_keys_tenant ON api_keys (tenant);
CREATE TABLE audit_events (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	seq BIGINT NOT NULL, 
	event_id VARCHAR(64) NOT NULL, 
	time VARCHAR(32) NOT NULL, 
	caller_key_id VARCHAR(32) NOT NULL, 
	service VARCHAR(32) NOT NULL, 
	method VARCHAR(64) NOT NULL, 
	idempotency_key VARCHAR(512) NOT NULL, 
	params_json TEXT NOT NULL, 
	result_status VARCHAR(32) NOT NULL, 
	error_code VARCHAR(64) NOT NULL, 
	category VARCHAR(16) NOT NULL, 
	duration_ms BIGINT NOT NULL, 
	trace_id VARCHAR(32) NOT NULL, 
	prev_hash VARCHAR(64) NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	CONSTRAINT uq_audit_events_seq UNIQUE (tenant, seq), 
	CONSTRAINT uq_audit_events_event_id UNIQUE (event_id)
);
CREATE INDEX ix_audit_events_hash ON audit_events (tenant, hash);
CREATE INDEX ix_audit_events_time ON audit_events (tenant, time);
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END;
CREATE TABLE audit_heads (
	tenant VARCHAR(64) NOT NULL, 
	seq BIGINT NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	PRIMARY KEY (tenant)
);
CREATE TABLE audit_checkpoints (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	seq BIGINT NOT NULL, 
	head_hash VARCHAR(64) NOT NULL, 
	signed_at VARCHAR(32) NOT NULL, 
	key_id VARCHAR(64) NOT NULL, 
	signature VARCHAR(128) NOT NULL
);
CREATE INDEX ix_audit_checkpoints_tenant ON audit_checkpoints (tenant, seq);
CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TABLE audit_outbox (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	service VARCHAR(32) NOT NULL, 
	event_json TEXT NOT NULL, 
	created_at FLOAT NOT NULL, 
	attempts INTEGER NOT NULL, 
	quarantined_at FLOAT, 
	refusal TEXT
);
CREATE INDEX ix_audit_outbox_service ON audit_outbox (service, id);
CREATE TABLE reach_tasks (
	task_id VARCHAR(32) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	entity_id VARCHAR(128) NOT NULL, 
	caller_key VARCHAR(128), 
	request_digest VARCHAR(64) NOT NULL, 
	logical_time DATETIME NOT NULL, 
	trace_id VARCHAR(32) NOT NULL, 
	submitted_by VARCHAR(32) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	version BIGINT NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	PRIMARY KEY (task_id), 
	CONSTRAINT uq_reach_tasks_caller_key UNIQUE (tenant, caller_key)
);
CREATE INDEX ix_reach_tasks_tenant_created ON reach_tasks (tenant, created_at);
CREATE TABLE reach_alerts (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	task_id VARCHAR(32) NOT NULL, 
	action_id VARCHAR(32) NOT NULL, 
	kind VARCHAR(32) NOT NULL, 
	message TEXT NOT NULL, 
	delivered BOOLEAN NOT NULL, 
	delivery_attempts INTEGER NOT NULL, 
	delivery_error TEXT NOT NULL, 
	claim_owner VARCHAR(64) DEFAULT '' NOT NULL, 
	claimed_until FLOAT, 
	created_at DATETIME NOT NULL
);
CREATE INDEX ix_reach_alerts_undelivered ON reach_alerts (delivered, id);
CREATE TABLE reach_channel_buckets (
	channel VARCHAR(128) NOT NULL, 
	tokens FLOAT NOT NULL, 
	stamp FLOAT NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (channel)
);
CREATE TABLE documents (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	namespace_id INTEGER NOT NULL, 
	document_id VARCHAR(128) NOT NULL, 
	text TEXT NOT NULL, 
	metadata_json TEXT NOT NULL, 
	content_sha256 VARCHAR(64) NOT NULL, 
	text_bytes BIGINT NOT NULL, 
	chunk_count INTEGER NOT NULL, 
	updated_at DATETIME NOT NULL, 
	CONSTRAINT uq_documents_namespace_doc UNIQUE (namespace_id, document_id), 
	FOREIGN KEY(namespace_id) REFERENCES namespaces (id) ON DELETE CASCADE
);
CREATE TABLE namespace_changes (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	namespace_id INTEGER NOT NULL, 
	seq BIGINT NOT NULL, 
	document_id VARCHAR(128) NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	FOREIGN KEY(namespace_id) REFERENCES namespaces (id) ON DELETE CASCADE
);
CREATE INDEX ix_changes_namespace_seq ON namespace_changes (namespace_id, seq);
CREATE TABLE reach_actions (
	action_id VARCHAR(32) NOT NULL, 
	task_id VARCHAR(32) NOT NULL, 
	tenant VARCHAR(64) NOT NULL, 
	position INTEGER NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	channel VARCHAR(64) NOT NULL, 
	action_type VARCHAR(64) NOT NULL, 
	params_json TEXT NOT NULL, 
	depends_on_json TEXT NOT NULL, 
	required BOOLEAN NOT NULL, 
	idem_key VARCHAR(512) NOT NULL, 
	window VARCHAR(16) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	rate_limited INTEGER NOT NULL, 
	polls INTEGER NOT NULL, 
	unknown_polls INTEGER NOT NULL, 
	ambiguous_sends INTEGER DEFAULT '0' NOT NULL, 
	next_at FLOAT, 
	lease_owner VARCHAR(64) NOT NULL, 
	first_sent_at FLOAT, 
	accepted_at FLOAT, 
	external_id VARCHAR(256) NOT NULL, 
	failure_json TEXT NOT NULL, 
	failure_kind VARCHAR(16) NOT NULL, 
	resolution_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	PRIMARY KEY (action_id), 
	CONSTRAINT uq_reach_actions_idem_key UNIQUE (tenant, idem_key), 
	FOREIGN KEY(task_id) REFERENCES reach_tasks (task_id) ON DELETE CASCADE
);
CREATE INDEX ix_reach_actions_task ON reach_actions (task_id, position);
CREATE INDEX ix_reach_actions_due ON reach_actions (state, next_at);
CREATE TABLE chunks (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	namespace_id INTEGER NOT NULL, 
	document_row_id INTEGER NOT NULL, 
	document_id VARCHAR(128) NOT NULL, 
	chunk_index INTEGER NOT NULL, 
	text TEXT NOT NULL, 
	content_hash VARCHAR(64) NOT NULL, 
	embedding BLOB NOT NULL, 
	FOREIGN KEY(namespace_id) REFERENCES namespaces (id) ON DELETE CASCADE, 
	FOREIGN KEY(document_row_id) REFERENCES documents (id) ON DELETE CASCADE
);
CREATE INDEX ix_chunks_namespace_doc ON chunks (namespace_id, document_id);
CREATE TABLE reach_receipts (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	action_id VARCHAR(32) NOT NULL, 
	attempt INTEGER NOT NULL, 
	operation VARCHAR(16) NOT NULL, 
	external_id VARCHAR(256) NOT NULL, 
	status_code INTEGER NOT NULL, 
	snippet TEXT NOT NULL, 
	duration_ms BIGINT NOT NULL, 
	outcome VARCHAR(16) NOT NULL, 
	created_at DATETIME NOT NULL, 
	FOREIGN KEY(action_id) REFERENCES reach_actions (action_id) ON DELETE CASCADE
);
CREATE INDEX ix_reach_receipts_action ON reach_receipts (action_id, id);
CREATE TABLE reach_history (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	tenant VARCHAR(64) NOT NULL, 
	action_id VARCHAR(32) NOT NULL, 
	at DATETIME NOT NULL, 
	from_state VARCHAR(16) NOT NULL, 
	to_state VARCHAR(16) NOT NULL, 
	reason VARCHAR(48) NOT NULL, 
	details_json TEXT NOT NULL, 
	FOREIGN KEY(action_id) REFERENCES reach_actions (action_id) ON DELETE CASCADE
);
CREATE INDEX ix_reach_history_action ON reach_history (action_id, id);
