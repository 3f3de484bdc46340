-- Raw SQL ceiling of one like command (bench/command/bench.py runs it with pgbench on one relation shard): the
-- statements of relations.services.commands._apply: idempotency lookup, relation row lock, relation insert-or-flip
-- (one upsert keeps it valid for random pairs), outbox row, command row. pgbench -D :users, :videos and :naive_hot
-- (1: the naive variant, plus the counter UPDATE of bench_naive_video where bench/command/naive.py runs it).
\set uid random(1, :users)
\set vid random(1, :videos)
\set op random(1, 9000000000000000000)
BEGIN;
SELECT id, video_id, desired_state, result_state, result_version, changed
  FROM relations_likecommand WHERE user_id = :uid AND operation_id = 'pgb-' || :op LIMIT 1;
SELECT id, state, relation_version, state_changed_at
  FROM relations_likerelation WHERE user_id = :uid AND video_id = 'pgb-v' || :vid ORDER BY id LIMIT 1 FOR UPDATE;
INSERT INTO relations_likerelation (user_id, video_id, state, relation_version, last_operation_id,
                                    state_changed_at, created_at, updated_at)
VALUES (:uid, 'pgb-v' || :vid, 'LIKED', 1, 'pgb-' || :op, now(), now(), now())
ON CONFLICT (user_id, video_id) DO UPDATE
   SET state = CASE WHEN relations_likerelation.state = 'LIKED' THEN 'UNLIKED' ELSE 'LIKED' END,
       relation_version = relations_likerelation.relation_version + 1,
       last_operation_id = EXCLUDED.last_operation_id, state_changed_at = now(), updated_at = now()
RETURNING relation_version AS ver \gset
\if :naive_hot
UPDATE bench_naive_video SET like_count = like_count + 1 WHERE video_id = 'bench-hot';
\endif
INSERT INTO relations_outboxevent (event_id, aggregate_key, relation_version, event_type, schema_version, payload,
                                   xact_id, status, retry_count, next_retry_at, claimed_by, claim_expires_at,
                                   last_error, stream_key, stream_entry_id, created_at, published_at)
VALUES (gen_random_uuid(), :uid || ':pgb-v' || :vid, :ver, 'LikeRelationChanged', 1,
        jsonb_build_object('eventId', gen_random_uuid(), 'eventType', 'LikeRelationChanged', 'schemaVersion', 1,
                           'aggregateKey', :uid || ':pgb-v' || :vid, 'relationVersion', :ver,
                           'absoluteState', 'LIKED', 'previousState', 'UNLIKED', 'previousVersion', :ver - 1,
                           'userId', :uid, 'videoId', 'pgb-v' || :vid, 'sourceShard', 'rel_00',
                           'operationId', 'pgb-' || :op, 'stateChangedAt', now()),
        pg_current_xact_id()::text::bigint, 'NEW', 0, now(), '', NULL, '', '', '', now(), NULL)
RETURNING id;
INSERT INTO relations_likecommand (user_id, operation_id, video_id, desired_state, result_state, result_version,
                                   changed, base_version, device_id, client_sequence, created_at)
VALUES (:uid, 'pgb-' || :op, 'pgb-v' || :vid, 'LIKED', 'LIKED', :ver, true, NULL, 'pgbench', NULL, now())
ON CONFLICT (user_id, operation_id) DO NOTHING
RETURNING id;
COMMIT;
