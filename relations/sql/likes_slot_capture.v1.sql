-- likes_slot_capture, version 1 (issue 16), CURRENT: the capture trigger function and its two triggers.
-- Loaded by relations/migrations/0001_squashed_0019.py; a loaded function never changes: a new version is a new file
-- and a new migration (docs/decisions.md D101).
CREATE OR REPLACE FUNCTION likes_slot_capture() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_user bigint; v_key text; v_seed text; v_slots integer;
BEGIN
    -- Nothing is moving out of this shard: one probe of an empty table.
    SELECT hash_seed, logical_slots INTO v_seed, v_slots FROM relations_relationslotstate
     WHERE state = 'CAPTURING' LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- TG_ARGV: the kind ("rel", "cmd") and the column holding the row's key within its user
    IF TG_OP = 'DELETE' THEN
        v_user := OLD.user_id;
        v_key := to_jsonb(OLD) ->> TG_ARGV[1];
    ELSE
        v_user := NEW.user_id;
        v_key := to_jsonb(NEW) ->> TG_ARGV[1];
    END IF;
    INSERT INTO relations_relationslotchange (move_id, kind, user_id, key)
    SELECT ss.move_id, TG_ARGV[0], v_user, v_key FROM relations_relationslotstate ss
     WHERE ss.state = 'CAPTURING' AND ss.slot = likes_slot_of(v_user, v_seed, v_slots);
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS likes_slot_capture_rel ON relations_likerelation;
CREATE TRIGGER likes_slot_capture_rel AFTER INSERT OR UPDATE OR DELETE ON relations_likerelation
    FOR EACH ROW EXECUTE FUNCTION likes_slot_capture('rel', 'video_id');
DROP TRIGGER IF EXISTS likes_slot_capture_cmd ON relations_likecommand;
CREATE TRIGGER likes_slot_capture_cmd AFTER INSERT OR UPDATE OR DELETE ON relations_likecommand
    FOR EACH ROW EXECUTE FUNCTION likes_slot_capture('cmd', 'operation_id');
