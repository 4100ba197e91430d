-- shardmover's least-privilege role (docs/privileges.md).
--
-- Run as a superuser on EVERY node (coordinator and workers), in the
-- database that holds the shards, with psql:
--
--   psql -v role=shardmover -v password='...' -v owner=app_owner -f moverrole.sql
--
-- role:     the login role shardmover connects as (created when missing)
-- password: its password
-- owner:    the role that owns the shard tables (the application's table
--           owner); shardmover becomes a member of it
--
-- Idempotent: run it again after adding a node or after the journal or the
-- compat catalogs were (re)created by a superuser.

-- 1. The role: login and replication (slots, walsender), nothing else.
SELECT format('CREATE ROLE %I', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = :'role') \gexec
ALTER ROLE :"role" WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'password';

-- 2. The shard tables: CREATE PUBLICATION, LOCK, ALTER TABLE RENAME and
--    DROP TABLE need their owner's rights.
GRANT :"owner" TO :"role";

-- 3. The database: CREATE for the journal schema and for publications.
SELECT format('GRANT CREATE ON DATABASE %I TO %I', current_database(), :'role') \gexec

-- 4. The schemas of the shard tables: a move target creates the tables
--    there (a schema missing on the target is created, and then owned, by
--    shardmover). public, and every schema holding a table of the owner.
--    PostgreSQL 15 no longer lets everyone create in public.
SELECT format('GRANT USAGE, CREATE ON SCHEMA %I TO %I', n.nspname, :'role') FROM pg_catalog.pg_namespace n WHERE n.nspname = 'public' OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = :'owner')) \gexec

-- 5. Replication origins (the target's exactly-once bookkeeping): the
--    functions shardmover calls, superuser-only by default.
GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_create(text) TO :"role";
GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_drop(text) TO :"role";
GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_session_setup(text) TO :"role";
GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone) TO :"role";
GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_progress(text, boolean) TO :"role";

-- 6. Replicated changes and the copy skip the target's triggers, as
--    PostgreSQL's own subscriber does (session_replication_role = replica,
--    superuser-only by default; PostgreSQL 15 can grant it).
GRANT SET ON PARAMETER session_replication_role TO :"role";

-- 7. compat only (nothing happens elsewhere): the pg_dist_* tables in
--    shardmover_catalog on the coordinator.
SELECT format('GRANT USAGE ON SCHEMA %I TO %I', nspname, :'role') FROM pg_catalog.pg_namespace WHERE nspname = 'shardmover_catalog' \gexec
SELECT format('GRANT SELECT ON TABLE %I.%I TO %I', n.nspname, c.relname, :'role') FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'shardmover_catalog' AND c.relkind = 'r' \gexec
SELECT format('GRANT UPDATE (groupid) ON TABLE shardmover_catalog.pg_dist_placement TO %I', :'role') WHERE pg_catalog.to_regclass('shardmover_catalog.pg_dist_placement') IS NOT NULL \gexec
SELECT format('GRANT UPDATE (shouldhaveshards) ON TABLE shardmover_catalog.pg_dist_node TO %I', :'role') WHERE pg_catalog.to_regclass('shardmover_catalog.pg_dist_node') IS NOT NULL \gexec

-- 8. The journal (schema shardmover on the coordinator): shardmover
--    creates it when it is missing (CREATE on the database, step 3) and
--    then owns it. When a superuser created it, it is handed over here, as
--    the first run of every version installs it (CREATE ... IF NOT EXISTS,
--    ALTER TABLE ... ADD COLUMN IF NOT EXISTS need the owner) and records
--    that in shardmover.installed. Its sequences go with their tables.
SELECT format('ALTER SCHEMA %I OWNER TO %I', nspname, :'role') FROM pg_catalog.pg_namespace WHERE nspname = 'shardmover' \gexec
SELECT format('ALTER TABLE %I.%I OWNER TO %I', n.nspname, c.relname, :'role') FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'shardmover' AND c.relkind IN ('r', 'p') \gexec

-- 9. Citus only (nothing happens elsewhere): the decision records the old
--    shards in Citus's deferred cleanup (pg_dist_cleanup, with Citus's
--    record and operation id sequences) on the coordinator, and setup copies
--    reference tables a target lacks (replicate_reference_tables, which
--    Citus revokes from everyone). Run the script on each node with
--    PGOPTIONS='-c citus.enable_ddl_propagation=off'.
SELECT format('GRANT SELECT, INSERT ON TABLE pg_catalog.pg_dist_cleanup TO %I', :'role') WHERE pg_catalog.to_regclass('pg_catalog.pg_dist_cleanup') IS NOT NULL \gexec
SELECT format('GRANT USAGE ON SEQUENCE pg_catalog.pg_dist_cleanup_recordid_seq, pg_catalog.pg_dist_operationid_seq TO %I', :'role') WHERE pg_catalog.to_regclass('pg_catalog.pg_dist_operationid_seq') IS NOT NULL \gexec
SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I', p.oid::pg_catalog.regprocedure, :'role') FROM pg_catalog.pg_proc p WHERE p.proname = 'replicate_reference_tables' AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace \gexec
