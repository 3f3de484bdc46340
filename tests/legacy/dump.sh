#!/bin/bash
# Writes the legacy dumps of this folder from three databases that `manage.py migrate_all` created with the
# landed code (README.md says which commit): `dump.sh DEFAULT_DB RELATION_SHARD_DB COUNT_PARTITION_DB`, on the
# PostgreSQL of PGHOST/PGPORT/PGUSER (default 127.0.0.1, postgres). pg_dump's comments and session settings are
# left out, so a dump loads through one connection whose settings it must not change.
set -euo pipefail
cd "$(dirname "$0")"
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
noise='^(--$|-- (Data for )?Name: .*; Type: |-- PostgreSQL database dump|-- Dumped (from|by) |\\(un)?restrict |'
noise+='SELECT pg_catalog.set_config|SET (statement_timeout|lock_timeout|idle_in_transaction_session_timeout|'
noise+='transaction_timeout|client_encoding|standard_conforming_strings|xmloption|client_min_messages|row_security|'
noise+='default_tablespace|default_table_access_method) )'
for pair in "default:$1" "relation_shard:$2" "count_partition:$3"; do
  pg_dump --no-owner --no-privileges --inserts --rows-per-insert=500 "${pair#*:}" \
    | grep -v -E "$noise" | cat -s | sed '1{/^$/d}' | gzip -9 -n > "${pair%%:*}.sql.gz"
done
