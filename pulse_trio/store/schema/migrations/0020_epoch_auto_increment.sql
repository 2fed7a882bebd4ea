-- Epochs were taken from one counter row, locked by every registration until
-- its commit: registrations from every instance of the cluster queued on that
-- row, a commit apart. The database now allocates the epoch as the session's
-- row is inserted (AUTO_INCREMENT on worker_instances.epoch): it still
-- increases strictly, cluster-wide, with every registration, and an
-- allocation holds no lock until commit. Numbering goes on above the last
-- epoch the counter handed out.
ALTER TABLE worker_instances MODIFY epoch BIGINT UNSIGNED NOT NULL AUTO_INCREMENT;
SET @pulse_trio_next_epoch = CONCAT('ALTER TABLE worker_instances AUTO_INCREMENT = ',
    (SELECT last_epoch + 1 FROM epoch_counter WHERE id = 1));
PREPARE pulse_trio_raise_epoch FROM @pulse_trio_next_epoch;
EXECUTE pulse_trio_raise_epoch;
DEALLOCATE PREPARE pulse_trio_raise_epoch;
DROP TABLE epoch_counter;
