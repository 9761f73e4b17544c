-- An alert destination's credentials cannot be deleted while it names
-- them: its alerts could no longer be sent, and a failed alert raises no
-- alert of its own, so alerting would stop without a sign. NOT VALID: a
-- destination whose credentials were deleted before this keeps its row
-- (its alerts end ERROR, as before); every delete from now on is checked.
ALTER TABLE dispatch_alert_destination
	ADD CONSTRAINT dispatch_alert_destination_credentials_fkey
	FOREIGN KEY (credentials_id) REFERENCES dispatch_credentials (id) NOT VALID;
