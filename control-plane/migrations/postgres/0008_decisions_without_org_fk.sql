-- Decision rows keep their organization (org_id, indexed), without a foreign
-- key to organizations. PostgreSQL checks a foreign key with a trigger per
-- inserted row that reads and share-locks the organization's row. Decisions
-- are the one write on the request path, and that check was about a fifth
-- of PostgreSQL's work per decision: pgbench on 20-row batches took
-- 0.56-0.62 ms a batch with it and 0.43-0.47 ms without (commits not
-- flushed); under scripts/load-evaluate (128 connections, three A/B pairs)
-- PostgreSQL's CPU per decision went from 27-30 us to 21-25 us, and evaluate
-- from 13.9-16.5k to 15.4-20.2k req/s. The check could never fail: org_id
-- always comes from the authenticated key's organization, and organizations
-- are never deleted. SQLite keeps the key: there the check is one probe of
-- the organizations' primary-key index, and dropping it would rebuild the
-- tables.
ALTER TABLE action_decisions DROP CONSTRAINT IF EXISTS action_decisions_org_id_fkey;
ALTER TABLE retrieval_decisions DROP CONSTRAINT IF EXISTS retrieval_decisions_org_id_fkey;
