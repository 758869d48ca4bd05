-- The schema the release before migrations (commit c917f17) made with init_schema (create_all),
-- dumped from a fresh database: loaded by tests/integration/test_schema_migrations.py.
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: reachstore_append_only(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reachstore_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    key_id character varying(32) NOT NULL,
    tenant character varying(64) NOT NULL,
    name character varying(128) NOT NULL,
    secret_sha256 character varying(64) NOT NULL,
    scopes_json text NOT NULL,
    namespaces_json text NOT NULL,
    channels_json text DEFAULT '[]'::text NOT NULL,
    groups_json text DEFAULT '[]'::text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone
);


--
-- Name: audit_checkpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_checkpoints (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    seq bigint NOT NULL,
    head_hash character varying(64) NOT NULL,
    signed_at character varying(32) NOT NULL,
    key_id character varying(64) NOT NULL,
    signature character varying(128) NOT NULL
);


--
-- Name: audit_checkpoints_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_checkpoints_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_checkpoints_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_checkpoints_id_seq OWNED BY public.audit_checkpoints.id;


--
-- Name: audit_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_events (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    seq bigint NOT NULL,
    event_id character varying(64) NOT NULL,
    "time" character varying(32) NOT NULL,
    caller_key_id character varying(32) NOT NULL,
    service character varying(32) NOT NULL,
    method character varying(64) NOT NULL,
    idempotency_key character varying(512) NOT NULL,
    params_json text NOT NULL,
    result_status character varying(32) NOT NULL,
    error_code character varying(64) NOT NULL,
    category character varying(16) NOT NULL,
    duration_ms bigint NOT NULL,
    trace_id character varying(32) NOT NULL,
    prev_hash character varying(64) NOT NULL,
    hash character varying(64) NOT NULL
);


--
-- Name: audit_events_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_events_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_events_id_seq OWNED BY public.audit_events.id;


--
-- Name: audit_heads; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_heads (
    tenant character varying(64) NOT NULL,
    seq bigint NOT NULL,
    hash character varying(64) NOT NULL
);


--
-- Name: audit_outbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_outbox (
    id bigint NOT NULL,
    service character varying(32) NOT NULL,
    event_json text NOT NULL,
    created_at double precision NOT NULL,
    attempts integer NOT NULL,
    quarantined_at double precision,
    refusal text
);


--
-- Name: audit_outbox_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_outbox_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_outbox_id_seq OWNED BY public.audit_outbox.id;


--
-- Name: chunks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.chunks (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    namespace_id bigint NOT NULL,
    document_row_id bigint NOT NULL,
    document_id character varying(128) NOT NULL,
    chunk_index integer NOT NULL,
    text text NOT NULL,
    content_hash character varying(64) NOT NULL,
    embedding bytea NOT NULL
);


--
-- Name: chunks_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.chunks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: chunks_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.chunks_id_seq OWNED BY public.chunks.id;


--
-- Name: documents; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.documents (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    namespace_id bigint NOT NULL,
    document_id character varying(128) NOT NULL,
    text text NOT NULL,
    metadata_json text NOT NULL,
    content_sha256 character varying(64) NOT NULL,
    text_bytes bigint NOT NULL,
    chunk_count integer NOT NULL,
    updated_at timestamp with time zone NOT NULL
);


--
-- Name: documents_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.documents_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: documents_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.documents_id_seq OWNED BY public.documents.id;


--
-- Name: ingest_tasks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ingest_tasks (
    task_id character varying(32) NOT NULL,
    tenant character varying(64) NOT NULL,
    namespace character varying(256) NOT NULL,
    document_id character varying(128) NOT NULL,
    text text,
    text_bytes bigint NOT NULL,
    metadata_json text NOT NULL,
    on_duplicate character varying(16) NOT NULL,
    submitted_by character varying(32) NOT NULL,
    state character varying(16) NOT NULL,
    phase character varying(16) NOT NULL,
    percent integer NOT NULL,
    error_code character varying(64) NOT NULL,
    error_message text NOT NULL,
    error_data_json text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    lease_owner character varying(64) DEFAULT ''::character varying NOT NULL,
    lease_until timestamp with time zone
);


--
-- Name: namespace_changes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.namespace_changes (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    namespace_id bigint NOT NULL,
    seq bigint NOT NULL,
    document_id character varying(128) NOT NULL,
    kind character varying(16) NOT NULL
);


--
-- Name: namespace_changes_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.namespace_changes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: namespace_changes_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.namespace_changes_id_seq OWNED BY public.namespace_changes.id;


--
-- Name: namespaces; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.namespaces (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    name character varying(64) NOT NULL,
    embedding_model character varying(128) NOT NULL,
    dimension integer NOT NULL,
    change_seq bigint NOT NULL,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: namespaces_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.namespaces_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: namespaces_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.namespaces_id_seq OWNED BY public.namespaces.id;


--
-- Name: reach_actions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_actions (
    action_id character varying(32) NOT NULL,
    task_id character varying(32) NOT NULL,
    tenant character varying(64) NOT NULL,
    "position" integer NOT NULL,
    name character varying(64) NOT NULL,
    channel character varying(64) NOT NULL,
    action_type character varying(64) NOT NULL,
    params_json text NOT NULL,
    depends_on_json text NOT NULL,
    required boolean NOT NULL,
    idem_key character varying(512) NOT NULL,
    "window" character varying(16) NOT NULL,
    state character varying(16) NOT NULL,
    attempts integer NOT NULL,
    rate_limited integer NOT NULL,
    polls integer NOT NULL,
    unknown_polls integer NOT NULL,
    ambiguous_sends integer DEFAULT 0 NOT NULL,
    next_at double precision,
    lease_owner character varying(64) NOT NULL,
    first_sent_at double precision,
    accepted_at double precision,
    external_id character varying(256) NOT NULL,
    failure_json text NOT NULL,
    failure_kind character varying(16) NOT NULL,
    resolution_json text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone
);


--
-- Name: reach_alerts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_alerts (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    task_id character varying(32) NOT NULL,
    action_id character varying(32) NOT NULL,
    kind character varying(32) NOT NULL,
    message text NOT NULL,
    delivered boolean NOT NULL,
    delivery_attempts integer NOT NULL,
    delivery_error text NOT NULL,
    claim_owner character varying(64) DEFAULT ''::character varying NOT NULL,
    claimed_until double precision,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: reach_alerts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.reach_alerts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: reach_alerts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.reach_alerts_id_seq OWNED BY public.reach_alerts.id;


--
-- Name: reach_channel_buckets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_channel_buckets (
    channel character varying(128) NOT NULL,
    tokens double precision NOT NULL,
    stamp double precision NOT NULL,
    version integer NOT NULL
);


--
-- Name: reach_history; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_history (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    action_id character varying(32) NOT NULL,
    at timestamp with time zone NOT NULL,
    from_state character varying(16) NOT NULL,
    to_state character varying(16) NOT NULL,
    reason character varying(48) NOT NULL,
    details_json text NOT NULL
);


--
-- Name: reach_history_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.reach_history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: reach_history_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.reach_history_id_seq OWNED BY public.reach_history.id;


--
-- Name: reach_receipts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_receipts (
    id bigint NOT NULL,
    tenant character varying(64) NOT NULL,
    action_id character varying(32) NOT NULL,
    attempt integer NOT NULL,
    operation character varying(16) NOT NULL,
    external_id character varying(256) NOT NULL,
    status_code integer NOT NULL,
    snippet text NOT NULL,
    duration_ms bigint NOT NULL,
    outcome character varying(16) NOT NULL,
    created_at timestamp with time zone NOT NULL
);


--
-- Name: reach_receipts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.reach_receipts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: reach_receipts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.reach_receipts_id_seq OWNED BY public.reach_receipts.id;


--
-- Name: reach_tasks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reach_tasks (
    task_id character varying(32) NOT NULL,
    tenant character varying(64) NOT NULL,
    entity_id character varying(128) NOT NULL,
    caller_key character varying(128),
    request_digest character varying(64) NOT NULL,
    logical_time timestamp with time zone NOT NULL,
    trace_id character varying(32) NOT NULL,
    submitted_by character varying(32) NOT NULL,
    state character varying(16) NOT NULL,
    version bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone
);


--
-- Name: audit_checkpoints id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_checkpoints ALTER COLUMN id SET DEFAULT nextval('public.audit_checkpoints_id_seq'::regclass);


--
-- Name: audit_events id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_events ALTER COLUMN id SET DEFAULT nextval('public.audit_events_id_seq'::regclass);


--
-- Name: audit_outbox id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_outbox ALTER COLUMN id SET DEFAULT nextval('public.audit_outbox_id_seq'::regclass);


--
-- Name: chunks id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks ALTER COLUMN id SET DEFAULT nextval('public.chunks_id_seq'::regclass);


--
-- Name: documents id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.documents ALTER COLUMN id SET DEFAULT nextval('public.documents_id_seq'::regclass);


--
-- Name: namespace_changes id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespace_changes ALTER COLUMN id SET DEFAULT nextval('public.namespace_changes_id_seq'::regclass);


--
-- Name: namespaces id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespaces ALTER COLUMN id SET DEFAULT nextval('public.namespaces_id_seq'::regclass);


--
-- Name: reach_alerts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_alerts ALTER COLUMN id SET DEFAULT nextval('public.reach_alerts_id_seq'::regclass);


--
-- Name: reach_history id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_history ALTER COLUMN id SET DEFAULT nextval('public.reach_history_id_seq'::regclass);


--
-- Name: reach_receipts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_receipts ALTER COLUMN id SET DEFAULT nextval('public.reach_receipts_id_seq'::regclass);


--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (key_id);


--
-- Name: audit_checkpoints audit_checkpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_checkpoints
    ADD CONSTRAINT audit_checkpoints_pkey PRIMARY KEY (id);


--
-- Name: audit_events audit_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_events
    ADD CONSTRAINT audit_events_pkey PRIMARY KEY (id);


--
-- Name: audit_heads audit_heads_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_heads
    ADD CONSTRAINT audit_heads_pkey PRIMARY KEY (tenant);


--
-- Name: audit_outbox audit_outbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_outbox
    ADD CONSTRAINT audit_outbox_pkey PRIMARY KEY (id);


--
-- Name: chunks chunks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks
    ADD CONSTRAINT chunks_pkey PRIMARY KEY (id);


--
-- Name: documents documents_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (id);


--
-- Name: ingest_tasks ingest_tasks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ingest_tasks
    ADD CONSTRAINT ingest_tasks_pkey PRIMARY KEY (task_id);


--
-- Name: namespace_changes namespace_changes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespace_changes
    ADD CONSTRAINT namespace_changes_pkey PRIMARY KEY (id);


--
-- Name: namespaces namespaces_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespaces
    ADD CONSTRAINT namespaces_pkey PRIMARY KEY (id);


--
-- Name: reach_actions reach_actions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_actions
    ADD CONSTRAINT reach_actions_pkey PRIMARY KEY (action_id);


--
-- Name: reach_alerts reach_alerts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_alerts
    ADD CONSTRAINT reach_alerts_pkey PRIMARY KEY (id);


--
-- Name: reach_channel_buckets reach_channel_buckets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_channel_buckets
    ADD CONSTRAINT reach_channel_buckets_pkey PRIMARY KEY (channel);


--
-- Name: reach_history reach_history_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_history
    ADD CONSTRAINT reach_history_pkey PRIMARY KEY (id);


--
-- Name: reach_receipts reach_receipts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_receipts
    ADD CONSTRAINT reach_receipts_pkey PRIMARY KEY (id);


--
-- Name: reach_tasks reach_tasks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_tasks
    ADD CONSTRAINT reach_tasks_pkey PRIMARY KEY (task_id);


--
-- Name: audit_events uq_audit_events_event_id; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_events
    ADD CONSTRAINT uq_audit_events_event_id UNIQUE (event_id);


--
-- Name: audit_events uq_audit_events_seq; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_events
    ADD CONSTRAINT uq_audit_events_seq UNIQUE (tenant, seq);


--
-- Name: documents uq_documents_namespace_doc; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.documents
    ADD CONSTRAINT uq_documents_namespace_doc UNIQUE (namespace_id, document_id);


--
-- Name: namespaces uq_namespaces_tenant_name; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespaces
    ADD CONSTRAINT uq_namespaces_tenant_name UNIQUE (tenant, name);


--
-- Name: reach_actions uq_reach_actions_idem_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_actions
    ADD CONSTRAINT uq_reach_actions_idem_key UNIQUE (tenant, idem_key);


--
-- Name: reach_tasks uq_reach_tasks_caller_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_tasks
    ADD CONSTRAINT uq_reach_tasks_caller_key UNIQUE (tenant, caller_key);


--
-- Name: ix_api_keys_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_api_keys_tenant ON public.api_keys USING btree (tenant);


--
-- Name: ix_audit_checkpoints_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_checkpoints_tenant ON public.audit_checkpoints USING btree (tenant, seq);


--
-- Name: ix_audit_events_hash; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_events_hash ON public.audit_events USING btree (tenant, hash);


--
-- Name: ix_audit_events_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_events_time ON public.audit_events USING btree (tenant, "time");


--
-- Name: ix_audit_outbox_service; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_outbox_service ON public.audit_outbox USING btree (service, id);


--
-- Name: ix_changes_namespace_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_changes_namespace_seq ON public.namespace_changes USING btree (namespace_id, seq);


--
-- Name: ix_chunks_namespace_doc; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_chunks_namespace_doc ON public.chunks USING btree (namespace_id, document_id);


--
-- Name: ix_reach_actions_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_actions_due ON public.reach_actions USING btree (state, next_at);


--
-- Name: ix_reach_actions_task; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_actions_task ON public.reach_actions USING btree (task_id, "position");


--
-- Name: ix_reach_alerts_undelivered; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_alerts_undelivered ON public.reach_alerts USING btree (delivered, id);


--
-- Name: ix_reach_history_action; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_history_action ON public.reach_history USING btree (action_id, id);


--
-- Name: ix_reach_receipts_action; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_receipts_action ON public.reach_receipts USING btree (action_id, id);


--
-- Name: ix_reach_tasks_tenant_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_reach_tasks_tenant_created ON public.reach_tasks USING btree (tenant, created_at);


--
-- Name: ix_tasks_state_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_state_created ON public.ingest_tasks USING btree (state, created_at);


--
-- Name: audit_checkpoints audit_checkpoints_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_checkpoints_append_only BEFORE DELETE OR UPDATE ON public.audit_checkpoints FOR EACH ROW EXECUTE FUNCTION public.reachstore_append_only();


--
-- Name: audit_events audit_events_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_events_append_only BEFORE DELETE OR UPDATE ON public.audit_events FOR EACH ROW EXECUTE FUNCTION public.reachstore_append_only();


--
-- Name: chunks chunks_document_row_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks
    ADD CONSTRAINT chunks_document_row_id_fkey FOREIGN KEY (document_row_id) REFERENCES public.documents(id) ON DELETE CASCADE;


--
-- Name: chunks chunks_namespace_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks
    ADD CONSTRAINT chunks_namespace_id_fkey FOREIGN KEY (namespace_id) REFERENCES public.namespaces(id) ON DELETE CASCADE;


--
-- Name: documents documents_namespace_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.documents
    ADD CONSTRAINT documents_namespace_id_fkey FOREIGN KEY (namespace_id) REFERENCES public.namespaces(id) ON DELETE CASCADE;


--
-- Name: namespace_changes namespace_changes_namespace_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.namespace_changes
    ADD CONSTRAINT namespace_changes_namespace_id_fkey FOREIGN KEY (namespace_id) REFERENCES public.namespaces(id) ON DELETE CASCADE;


--
-- Name: reach_actions reach_actions_task_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_actions
    ADD CONSTRAINT reach_actions_task_id_fkey FOREIGN KEY (task_id) REFERENCES public.reach_tasks(task_id) ON DELETE CASCADE;


--
-- Name: reach_history reach_history_action_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_history
    ADD CONSTRAINT reach_history_action_id_fkey FOREIGN KEY (action_id) REFERENCES public.reach_actions(action_id) ON DELETE CASCADE;


--
-- Name: reach_receipts reach_receipts_action_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reach_receipts
    ADD CONSTRAINT reach_receipts_action_id_fkey FOREIGN KEY (action_id) REFERENCES public.reach_actions(action_id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--


