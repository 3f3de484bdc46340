-- Raw SQL ceiling of the count projector (issue 15 §3): ONE group of a batch on one count partition;
-- bench/projection/projector.py runs it with pgbench, each transaction standing for :batch events. The statements of
-- counting.services.projection._apply_group, in its order and with its texts (unnest arrays become generate_series
-- over :batch rows): the missing bucket rows (rows_ensure), BEGIN, the consumer, generation and route fences, the
-- receipt lookup, the projection and bucket locks (in key order), the projection upsert, the bucket adds, the dirty
-- marks, the receipts, COMMIT. pgbench -D: batch, gen and space (the ACTIVE generation and bucket-space version), vbs
-- (the '{...}' array of buckets routed here), nvbs (its length), videos (1 = the hot video). Each client is one stream
-- partition (:client_id: its fence row, dirty marks, receipts). Every transaction writes new relations (a fresh
-- :ubase) LIKED v1: every event applied, every bucket grows, the projector's most expensive case.
-- The receipt offsets are varchar like the column (a text array from a subquery would make the lookup a filter over
-- every receipt); the row locks read their keys from unnest(array, array) as the projector's do (an IN over
-- generate_series with the hot video's constant id made the planner walk every projection row of the video).
\set ubase random(1, 1000000000000)
\set vbase random(0, 1000000)
\set off random(1, 9000000000000000000)
INSERT INTO counting_videolikecountvbucket (video_id, virtual_bucket, generation, bucket_space_version, active_count,
                                            bucket_version, frozen, updated_at)
SELECT c0, c1, :gen, :space, 0, 0, false, now() FROM (
  SELECT DISTINCT 'pjc-' || ((:vbase + i * 7919) % :videos) AS c0,
         ((:vbs)::int[])[1 + (:vbase + i * 104729) % :nvbs] AS c1
  FROM generate_series(1, :batch) AS i) AS t ORDER BY c0, c1
ON CONFLICT (generation, video_id, virtual_bucket) DO NOTHING;
BEGIN;
INSERT INTO counting_countconsumerfence AS f (consumer, partition, fencing_token) VALUES ('pgbench', :client_id, 1)
ON CONFLICT (consumer, partition) DO UPDATE SET fencing_token = GREATEST(f.fencing_token, EXCLUDED.fencing_token)
RETURNING fencing_token;
SELECT generation FROM counting_countgenerationfence WHERE key = 'active';
SELECT virtual_bucket, route_epoch, state FROM counting_countroutefence
WHERE bucket_space_version = :space AND virtual_bucket = ANY(ARRAY(
  SELECT DISTINCT ((:vbs)::int[])[1 + (:vbase + i * 104729) % :nvbs] FROM generate_series(1, :batch) AS i))
ORDER BY virtual_bucket FOR SHARE;
SELECT generation, source_offset FROM counting_counteventreceipt
WHERE generation = ANY(ARRAY[:gen]) AND source_topic = 'likes:events' AND source_partition = :client_id
  AND source_offset = ANY(ARRAY(SELECT (:off || '-' || i)::varchar FROM generate_series(1, :batch) AS i));
SELECT user_id, video_id, projected_state, projected_version FROM counting_likecountprojection
WHERE generation = :gen AND (user_id, video_id) IN (SELECT * FROM unnest(
  ARRAY(SELECT :ubase + i FROM generate_series(1, :batch) AS i),
  ARRAY(SELECT 'pjc-' || ((:vbase + i * 7919) % :videos) FROM generate_series(1, :batch) AS i)))
ORDER BY user_id, video_id FOR UPDATE;
SELECT video_id, virtual_bucket, active_count, frozen FROM counting_videolikecountvbucket
WHERE generation = :gen AND (video_id, virtual_bucket) IN (SELECT * FROM unnest(
  ARRAY(SELECT 'pjc-' || ((:vbase + i * 7919) % :videos) FROM generate_series(1, :batch) AS i),
  ARRAY(SELECT ((:vbs)::int[])[1 + (:vbase + i * 104729) % :nvbs] FROM generate_series(1, :batch) AS i)))
ORDER BY video_id, virtual_bucket FOR UPDATE;
INSERT INTO counting_likecountprojection AS p (generation, user_id, video_id, projected_state, projected_version,
                                               bucket_space_version, virtual_bucket, updated_at)
SELECT :gen, u, v, s, ver, :space, vb, now() FROM (
  SELECT :ubase + i AS u, 'pjc-' || ((:vbase + i * 7919) % :videos) AS v, 'LIKED' AS s, 1 AS ver,
         ((:vbs)::int[])[1 + (:vbase + i * 104729) % :nvbs] AS vb FROM generate_series(1, :batch) AS i) AS t
ORDER BY u, v
ON CONFLICT (generation, user_id, video_id) DO UPDATE SET projected_state = EXCLUDED.projected_state,
  projected_version = EXCLUDED.projected_version, updated_at = EXCLUDED.updated_at
WHERE p.projected_version < EXCLUDED.projected_version;
UPDATE counting_videolikecountvbucket AS b SET active_count = b.active_count + d.delta,
  bucket_version = b.bucket_version + 1, updated_at = now()
FROM (SELECT 'pjc-' || ((:vbase + i * 7919) % :videos) AS v,
             ((:vbs)::int[])[1 + (:vbase + i * 104729) % :nvbs] AS vb, count(*) AS delta
      FROM generate_series(1, :batch) AS i GROUP BY 1, 2) AS d
WHERE b.generation = :gen AND b.video_id = d.v AND b.virtual_bucket = d.vb;
INSERT INTO counting_dirtyvideo AS d (generation, video_id, source_partition, dirty_seq, first_dirty_at,
                                      last_dirty_at)
SELECT :gen, v, :client_id, 1, now(), now() FROM (
  SELECT DISTINCT 'pjc-' || ((:vbase + i * 7919) % :videos) AS v FROM generate_series(1, :batch) AS i) AS t
ORDER BY v
ON CONFLICT (generation, video_id, source_partition)
DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = EXCLUDED.last_dirty_at;
INSERT INTO counting_counteventreceipt (generation, source_topic, source_partition, source_offset, event_id, outcome,
                                        created_at)
SELECT :gen, 'likes:events', :client_id, :off || '-' || i, gen_random_uuid()::text, 'applied', now()
FROM generate_series(1, :batch) AS i
ON CONFLICT (generation, source_topic, source_partition, source_offset) DO NOTHING;
COMMIT;
