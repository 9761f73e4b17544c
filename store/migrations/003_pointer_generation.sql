-- A job's pointer generation: bumped whenever its pointer is deliberately
-- sent again (a blocked pointer stepping aside for its group, or the sweep
-- replacing a lost one). The SQS deduplication id carries it, so a re-send
-- is not swallowed by SQS FIFO's 5-minute deduplication window, while two
-- racing senders of the same generation are still deduplicated.
ALTER TABLE dispatch_job ADD COLUMN pointer_gen INTEGER NOT NULL DEFAULT 0;
