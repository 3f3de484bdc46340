-- likes_relation_apply, version 3 (issue 31 §4), CURRENT: v2 plus the slot's version floor, and the command's
-- `deviceId` in the event (what a subscription may be granted, as its own pseudonym of the device). A relation without a row
-- (never acted on, or its UNLIKED tombstone deleted by the retention sweep, relations.services.tombstones) is UNLIKED
-- at a version between 0 and its slot's floor (relations_relationversionfloor, no row: 0): its next version is
-- floor + 1, never 1 again, and a base version in [0, floor] is not stale (the client may hold the deleted
-- tombstone's version or the v0 a read of the missing row shows). Supersedes v1 and v2 (in git history; no
-- migration loads them since the squash of D133).
-- Loaded by relations/migrations/0001_squashed_0019.py; a loaded function never changes: a new version is a new
-- file and a new migration (docs/decisions.md D101).
CREATE OR REPLACE FUNCTION likes_relation_apply(
    p_user_id bigint, p_video_id text, p_desired text, p_operation_id text, p_base_version bigint,
    p_device_id text, p_client_sequence bigint, p_now timestamptz, p_alias text, p_event_id uuid,
    p_aggregate_key text, p_event_type text, p_schema_version integer, p_reject_stale boolean,
    p_lookup boolean, p_lock_global integer, p_lock_video integer, p_lock_slot integer, p_slot integer)
RETURNS TABLE (outcome text, result_state text, result_version bigint, changed boolean, cmd_video_id text,
               cmd_desired_state text, current_state text, current_version bigint, unique_conflicts integer)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    c_video text; c_desired text; c_state text; c_version bigint; c_changed boolean;
    r_id bigint; r_state text; r_version bigint; r_changed_at timestamptz;
    v_new bigint; v_changed_at timestamptz; v_conflicts integer := 0; v_changed boolean := false;
    v_floor bigint;
BEGIN
    -- A slot this shard does not own (a move's target before its switch, its source after): nothing is read
    -- or written here; the caller reloads the contract and goes where it points (issue 16 §3).
    IF EXISTS (SELECT 1 FROM relations_relationslotstate ss WHERE ss.slot = p_slot AND ss.state <> 'CAPTURING') THEN
        RETURN QUERY SELECT 'moved'::text, NULL::text, NULL::bigint, NULL::boolean, NULL::text, NULL::text,
                            NULL::text, NULL::bigint, 0;
        RETURN;
    END IF;
    IF p_lookup THEN
        SELECT lc.video_id, lc.desired_state, lc.result_state, lc.result_version, lc.changed
          INTO c_video, c_desired, c_state, c_version, c_changed
          FROM relations_likecommand lc WHERE lc.user_id = p_user_id AND lc.operation_id = p_operation_id;
        IF FOUND THEN
            SELECT lr.state, lr.relation_version INTO r_state, r_version
              FROM relations_likerelation lr WHERE lr.user_id = p_user_id AND lr.video_id = c_video;
            RETURN QUERY SELECT 'replayed'::text, c_state, c_version, c_changed, c_video, c_desired,
                                coalesce(r_state, 'UNLIKED'), coalesce(r_version, 0::bigint), 0;
            RETURN;
        END IF;
    END IF;

    IF NOT (pg_try_advisory_xact_lock_shared(p_lock_global, 0)
            AND pg_try_advisory_xact_lock_shared(p_lock_video, hashtext(p_video_id))) THEN
        RETURN QUERY SELECT 'barrier'::text, NULL::text, NULL::bigint, NULL::boolean, NULL::text, NULL::text,
                            NULL::text, NULL::bigint, 0;
        RETURN;
    END IF;
    -- The slot's fence: a move's cutover holds it exclusively for its write pause.
    IF NOT pg_try_advisory_xact_lock_shared(p_lock_slot, p_slot) THEN
        RETURN QUERY SELECT 'fenced'::text, NULL::text, NULL::bigint, NULL::boolean, NULL::text, NULL::text,
                            NULL::text, NULL::bigint, 0;
        RETURN;
    END IF;
    -- Again under the lock: this statement sees a switch that committed while the caller polled.
    IF EXISTS (SELECT 1 FROM relations_relationslotstate ss WHERE ss.slot = p_slot AND ss.state <> 'CAPTURING') THEN
        RETURN QUERY SELECT 'moved'::text, NULL::text, NULL::bigint, NULL::boolean, NULL::text, NULL::text,
                            NULL::text, NULL::bigint, 0;
        RETURN;
    END IF;

    FOR attempt IN 1..2 LOOP
        r_id := NULL;
        v_floor := 0;
        SELECT lr.id, lr.state, lr.relation_version, lr.state_changed_at
          INTO r_id, r_state, r_version, r_changed_at
          FROM relations_likerelation lr WHERE lr.user_id = p_user_id AND lr.video_id = p_video_id FOR UPDATE;
        IF NOT FOUND THEN
            r_state := 'UNLIKED'; r_version := 0;
            -- the versions its deleted tombstone may have had (a sweep that deleted it committed the floor with
            -- the delete, and this statement's snapshot is newer than the lock wait that saw the row go)
            v_floor := coalesce((SELECT f.floor FROM relations_relationversionfloor f WHERE f.slot = p_slot), 0);
        END IF;
        IF p_reject_stale AND p_base_version IS NOT NULL AND p_base_version <> r_version
           AND p_desired <> r_state AND NOT (r_id IS NULL AND p_base_version BETWEEN 0 AND v_floor) THEN
            RETURN QUERY SELECT 'stale'::text, NULL::text, NULL::bigint, NULL::boolean, NULL::text, NULL::text,
                                r_state, r_version, v_conflicts;
            RETURN;
        END IF;
        IF p_desired = r_state THEN
            v_new := r_version;
            EXIT;
        END IF;
        v_new := greatest(r_version, v_floor) + 1;  -- above every version the relation ever had
        IF r_id IS NULL THEN
            INSERT INTO relations_likerelation (user_id, video_id, state, relation_version, last_operation_id,
                                                state_changed_at, created_at, updated_at)
            VALUES (p_user_id, p_video_id, p_desired, v_new, p_operation_id, p_now, p_now, p_now)
            ON CONFLICT (user_id, video_id) DO NOTHING;
            IF NOT FOUND THEN
                -- another transaction inserted the row first (the insert waited for it): lock it, decide again
                v_conflicts := v_conflicts + 1;
                IF attempt = 2 THEN
                    RAISE EXCEPTION 'relation row vanished between unique conflict and re-read';
                END IF;
                CONTINUE;
            END IF;
            v_changed_at := p_now;
        ELSE
            -- state-change times never go backwards on one relation, whatever the web node's clock
            v_changed_at := greatest(p_now, r_changed_at);
            UPDATE relations_likerelation
               SET state = p_desired, relation_version = v_new, last_operation_id = p_operation_id,
                   state_changed_at = v_changed_at, updated_at = p_now
             WHERE id = r_id AND relation_version = r_version;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'relation CAS failed under row lock';
            END IF;
        END IF;
        INSERT INTO relations_outboxevent (event_id, aggregate_key, relation_version, event_type, schema_version,
                                           payload, xact_id, status, retry_count, next_retry_at, claimed_by,
                                           last_error, stream_key, stream_entry_id, created_at)
        VALUES (p_event_id, p_aggregate_key, v_new, p_event_type, p_schema_version,
                jsonb_build_object(
                    'eventId', p_event_id::text, 'eventType', p_event_type, 'schemaVersion', p_schema_version,
                    'aggregateKey', p_aggregate_key, 'relationVersion', v_new, 'absoluteState', p_desired,
                    'previousState', r_state, 'previousVersion', r_version, 'userId', p_user_id,
                    'videoId', p_video_id, 'sourceShard', p_alias, 'operationId', p_operation_id,
                    'deviceId', coalesce(p_device_id, ''),
                    -- datetime.isoformat() in UTC with "Z": no fraction when the microseconds are 0
                    'stateChangedAt', to_char(v_changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                        || CASE WHEN date_part('microseconds', v_changed_at)::bigint % 1000000 = 0 THEN ''
                                ELSE to_char(v_changed_at AT TIME ZONE 'UTC', '.US') END || 'Z'),
                pg_current_xact_id()::text::bigint, 'NEW', 0, p_now, '', '', '', '', p_now);
        v_changed := true;
        EXIT;
    END LOOP;

    INSERT INTO relations_likecommand (user_id, operation_id, video_id, desired_state, result_state, result_version,
                                       changed, base_version, device_id, client_sequence, created_at)
    VALUES (p_user_id, p_operation_id, p_video_id, p_desired, p_desired, v_new, v_changed, p_base_version,
            p_device_id, p_client_sequence, p_now)
    ON CONFLICT (user_id, operation_id) DO NOTHING;
    IF NOT FOUND THEN
        -- a concurrent transaction committed this operation id first (the insert waited for it)
        RAISE EXCEPTION 'operation % already recorded', p_operation_id USING ERRCODE = 'LK409';
    END IF;
    RETURN QUERY SELECT 'applied'::text, p_desired, v_new, v_changed, p_video_id, p_desired, p_desired, v_new,
                        v_conflicts;
END
$fn$;
