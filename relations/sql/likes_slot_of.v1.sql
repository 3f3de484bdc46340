-- likes_slot_of, version 1 (issue 16), CURRENT: the contract's logical slot of a user.
-- Loaded by relations/migrations/0001_squashed_0019.py; a loaded function never changes: a new version is a new file
-- and a new migration (docs/decisions.md D101).
CREATE OR REPLACE FUNCTION likes_slot_of(p_user_id bigint, p_seed text, p_slots integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT (mod(('x' || encode(substring(sha256(convert_to(p_seed, 'UTF8') || decode('1f', 'hex')
                                                || convert_to(p_user_id::text, 'UTF8')) FROM 1 FOR 8), 'hex'))
                 ::bit(64)::bigint::numeric + 18446744073709551616, 18446744073709551616) % p_slots)::integer
$fn$;
