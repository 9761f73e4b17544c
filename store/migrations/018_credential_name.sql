-- Credentials get a name people recognise them by ("Billing partner"),
-- shown instead of their id. Existing ones have none ('') until named.
-- A constant default: PostgreSQL adds the column without rewriting the table.
ALTER TABLE dispatch_credentials ADD COLUMN name text NOT NULL DEFAULT '';
