-- Subscription lifecycle (docs/decisions/subscription-verification.md).
--
-- enabled_at: when the subscription last became ACTIVE (created ACTIVE,
-- enabled, or activated by a handshake). The automatic disable counts a
-- failure streak only from there, so an operator's enable lasts until the
-- subscription has failed for a whole DISPATCH_SUBSCRIPTION_DISABLE_AFTER
-- again. Installed ACTIVE rows take updated_at: at worst their next
-- automatic disable comes one period later than it would have.
--
-- verify_required: created with "verify": true; such a subscription is
-- ACTIVE only while its url is verified_url, the url that passed the
-- latest handshake. The CHECK holds that whatever path changes a row.
-- Installed rows are not verify_required, so they behave as before.
ALTER TABLE dispatch_subscription
    ADD COLUMN enabled_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD COLUMN verify_required BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN verified_url TEXT;
UPDATE dispatch_subscription SET enabled_at = CASE WHEN status = 'ACTIVE' THEN updated_at ELSE created_at END;
ALTER TABLE dispatch_subscription ADD CONSTRAINT dispatch_subscription_verified_check
    CHECK (status <> 'ACTIVE' OR NOT verify_required OR verified_url IS NOT DISTINCT FROM url);
