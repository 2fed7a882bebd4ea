-- An operator's drain (HTTP POST /v1/workers/{id}/drain) outlives the
-- worker's own capacity frames: it is recorded apart from the state.
ALTER TABLE worker_instances ADD COLUMN operator_drained_at DATETIME(6) NULL AFTER sequence;
