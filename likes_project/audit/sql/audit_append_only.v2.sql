-- audit_append_only, version 2 (issue 31 §4, PRIV-4), CURRENT: the body of the BEFORE UPDATE OR DELETE row trigger
-- on the audit log (django-pgtrigger wraps it in its function; likes_project/audit/models.py declares it, migration
-- 0005_redaction installs it). Version 1 was pgtrigger's Protect: every UPDATE and DELETE refused.
-- Every DELETE is still refused, and every UPDATE but a redaction's (likes_project/audit/redaction.py): a chained
-- row (seq set) whose `redacted_at` is set and moves forward (NULL to a time, or a later time when a second account
-- named in the same row is erased), whose `actor` is unchanged or becomes `user:<32 hex>` from `user:...`, and whose
-- every other column is unchanged except `target_id` and `params`. The verifier accepts such a row only if a later
-- `audit.redact` record lists it (docs/decisions.md D82, redaction).
IF TG_OP = 'UPDATE'
   AND OLD.seq IS NOT NULL
   AND NEW.redacted_at IS NOT NULL
   AND (OLD.redacted_at IS NULL OR NEW.redacted_at > OLD.redacted_at)
   AND (NEW.actor = OLD.actor OR (OLD.actor LIKE 'user:%' AND NEW.actor ~ '^user:[0-9a-f]{32}$'))
   AND (to_jsonb(NEW) - ARRAY['target_id', 'params', 'actor', 'redacted_at'])
       = (to_jsonb(OLD) - ARRAY['target_id', 'params', 'actor', 'redacted_at'])
THEN
    RETURN NEW;
END IF;
RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;
