-- What the timers ask about this node's own sessions (their live lease counts,
-- the cancels to push to those that opted in) they now ask by node, not with
-- a list of session ids: the statement's size no longer grows with the
-- sessions connected. The node index carries what those questions filter and
-- join on, so they read it alone and never the session rows.
ALTER TABLE worker_instances
    DROP KEY worker_instances_node,
    ADD KEY worker_instances_node (node_id, state, cancellation_notifications, session_id);
