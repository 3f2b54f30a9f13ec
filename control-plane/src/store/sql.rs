//! The store's methods, written once in the SQL both backends accept (`$n`
//! placeholders, `ON CONFLICT`, `RETURNING`), and implemented for each
//! backend's pool by `store_impl!`, which expects `statements!` (the shared
//! statements and imports) expanded before it in the same module. A
//! backend's own concerns (connection options, migrations, notifications)
//! stay in its module.

macro_rules! store_impl {
    ($store:ty, $db:ty $(, { $($extra:tt)* })?) => {
        #[async_trait]
        impl Store for $store {
            async fn ping(&self) -> StoreResult<()> {
                self.decisions_health()?;
                sqlx::query("SELECT 1").execute(&self.pool).await.map_err(map_err)?;
                Ok(())
            }

            async fn ensure_org(&self, name: &str, now: DateTime<Utc>) -> StoreResult<Organization> {
                sqlx::query(
                    "INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(Uuid::new_v4())
                .bind(name)
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                self.org_by_name(name).await?.ok_or_else(|| {
                    super::StoreError::Corrupt(format!("organization `{name}` vanished after insert"))
                })
            }

            async fn org_by_name(&self, name: &str) -> StoreResult<Option<Organization>> {
                let row: Option<OrgRow> =
                    sqlx::query_as("SELECT id, name, created_at FROM organizations WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(map_err)?;
                Ok(row.map(Organization::from))
            }

            async fn create_key(&self, key: NewKey, audit: AuditEntry, now: DateTime<Utc>) -> StoreResult<ApiKey> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let created = insert_key(&mut *tx, &key, now).await?;
                let audit = if audit.target_id.is_empty() {
                    AuditEntry {
                        target_id: created.id.0.to_string(),
                        ..audit
                    }
                } else {
                    audit
                };
                insert_audit(&mut *tx, &audit).await?;
                tx.commit().await.map_err(map_err)?;
                self.changed(key.org).await;
                Ok(created)
            }

            async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
                if let Some(key) = self.cache.key(hash) {
                    return Ok(Some(key));
                }
                let ticket = self.cache.ticket();
                let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = $1");
                let row: Option<KeyRow> = sqlx::query_as(&sql)
                    .bind(hash)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                let key = row.map(ApiKey::try_from).transpose()?;
                if let Some(k) = &key {
                    self.cache.fill_key(ticket, k);
                }
                Ok(key)
            }

            async fn key(&self, org: OrgId, id: KeyId) -> StoreResult<Option<ApiKey>> {
                let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1 AND org_id = $2");
                let row: Option<KeyRow> = sqlx::query_as(&sql)
                    .bind(id.0)
                    .bind(org.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                row.map(ApiKey::try_from).transpose()
            }

            async fn key_any_org(&self, id: KeyId) -> StoreResult<Option<ApiKey>> {
                let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1");
                let row: Option<KeyRow> = sqlx::query_as(&sql)
                    .bind(id.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                row.map(ApiKey::try_from).transpose()
            }

            async fn list_keys(&self, org: OrgId, page: Page) -> StoreResult<(Vec<ApiKey>, u64)> {
                let order = "created_at DESC, id";
                let (rows, total): (Vec<KeyRow>, u64) =
                    page_of(&self.pool, KEY_COLUMNS, "api_keys", "org_id = $1", order, org, &[], page).await?;
                Ok((rows.into_iter().map(ApiKey::try_from).collect::<StoreResult<_>>()?, total))
            }

            async fn rotate_key(
                &self,
                org: OrgId,
                old: KeyId,
                replacement: NewKey,
                retire: Retire,
                audit: AuditEntry,
                now: DateTime<Utc>,
            ) -> StoreResult<ApiKey> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let created = insert_key(&mut *tx, &replacement, now).await?;
                sqlx::query(
                    "UPDATE api_keys SET replaced_by = $1, expires_at = $2, \
                     revoked_at = CASE WHEN $3 THEN $4 ELSE revoked_at END \
                     WHERE id = $5 AND org_id = $6",
                )
                .bind(created.id.0)
                .bind(retire.expires_at)
                .bind(retire.revoke)
                .bind(now)
                .bind(old.0)
                .bind(org.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                insert_audit(&mut *tx, &audit).await?;
                tx.commit().await.map_err(map_err)?;
                self.changed(org).await;
                Ok(created)
            }

            async fn revoke_key(&self, org: OrgId, id: KeyId, now: DateTime<Utc>) -> StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1 \
                     WHERE id = $2 AND org_id = $3 AND revoked_at IS NULL",
                )
                .bind(now)
                .bind(id.0)
                .bind(org.0)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                self.changed(org).await;
                Ok(done.rows_affected() > 0)
            }

            async fn touch_key(&self, id: KeyId, at: DateTime<Utc>) -> StoreResult<()> {
                sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                    .bind(at)
                    .bind(id.0)
                    .execute(&self.pool)
                    .await
                    .map_err(map_err)?;
                Ok(())
            }

            async fn append_audit(&self, entry: AuditEntry) -> StoreResult<()> {
                insert_audit(&self.pool, &entry).await
            }

            async fn audit_entries(&self, org: OrgId) -> StoreResult<Vec<AuditEntry>> {
                let rows: Vec<AuditRow> = sqlx::query_as(
                    "SELECT org_id, action, actor, target_type, target_id, details, at \
                     FROM audit_log WHERE org_id = $1 ORDER BY seq",
                )
                .bind(org.0)
                .fetch_all(&self.pool)
                .await
                .map_err(map_err)?;
                Ok(rows.into_iter().map(AuditEntry::from).collect())
            }

            async fn create_rule(&self, org: OrgId, r: &Rule, now: DateTime<Utc>) -> StoreResult<Rule> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let (n,): (i64,) = sqlx::query_as(
                    "INSERT INTO counters (org_id, name, value) VALUES ($1, 'rule_code', 1) \
                     ON CONFLICT (org_id, name) DO UPDATE SET value = counters.value + 1 RETURNING value",
                )
                .bind(org.0)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
                let id = Uuid::new_v4();
                let insert = format!(
                    "INSERT INTO rules ({RULE_FIELDS}, id, org_id, rule_code, created_at, updated_at, bypass_active) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17, FALSE)"
                );
                bind_rule_fields(sqlx::query(&insert), r)
                    .bind(id)
                    .bind(org.0)
                    .bind(format!("R-{n:04}"))
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                bump_revision(&mut *tx, org).await?;
                let rule = rule_in(&mut *tx, org, RuleId(id)).await?;
                tx.commit().await.map_err(map_err)?;
                self.changed(org).await;
                rule.ok_or_else(|| super::StoreError::Corrupt("rule vanished after insert".into()))
            }

            async fn rule(&self, org: OrgId, id: RuleId) -> StoreResult<Option<Rule>> {
                rule_in(&self.pool, org, id).await
            }

            async fn list_rules(&self, org: OrgId, facets: Option<&[Facet]>, page: Page) -> StoreResult<(Vec<Rule>, u64)> {
                let wants = |f: Facet| FilterValue::Bool(facets.is_none_or(|fs| fs.contains(&f)));
                let clause = "org_id = $1 AND ((applies_to LIKE '%\"action\"%' AND $2) \
                     OR (applies_to LIKE '%\"retrieval\"%' AND $3) OR (applies_to LIKE '%\"delegation\"%' AND $4))";
                let values = [wants(Facet::Action), wants(Facet::Retrieval), wants(Facet::Delegation)];
                let order = "priority DESC, created_at, id";
                let (rows, total): (Vec<RuleRow>, u64) =
                    page_of(&self.pool, &rule_columns(false), "rules", clause, order, org, &values, page).await?;
                Ok((rows.into_iter().map(Rule::try_from).collect::<StoreResult<_>>()?, total))
            }

            async fn all_rules(&self, org: OrgId) -> StoreResult<Vec<Rule>> {
                let sql = format!(
                    "SELECT {} FROM rules WHERE org_id = $1 ORDER BY priority DESC, created_at, id",
                    rule_columns(true)
                );
                let rows: Vec<RuleRow> = sqlx::query_as(&sql).bind(org.0).fetch_all(&self.pool).await.map_err(map_err)?;
                rows.into_iter().map(Rule::try_from).collect()
            }

            async fn replace_rule(&self, org: OrgId, r: &Rule, now: DateTime<Utc>) -> StoreResult<Option<Rule>> {
                let sets: Vec<String> = RULE_FIELDS.split(", ").enumerate().map(|(i, c)| format!("{c} = ${}", i + 1)).collect();
                let update = format!("UPDATE rules SET {}, updated_at = $14 WHERE id = $15 AND org_id = $16", sets.join(", "));
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let done = bind_rule_fields(sqlx::query(&update), r)
                    .bind(now)
                    .bind(r.id)
                    .bind(org.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                bump_revision(&mut *tx, org).await?;
                let rule = rule_in(&mut *tx, org, RuleId(r.id)).await?;
                tx.commit().await.map_err(map_err)?;
                self.changed(org).await;
                Ok(rule)
            }

            async fn delete_rule(&self, org: OrgId, id: RuleId) -> StoreResult<bool> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let done = sqlx::query("DELETE FROM rules WHERE id = $1 AND org_id = $2")
                    .bind(id.0)
                    .bind(org.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                if done.rows_affected() > 0 {
                    bump_revision(&mut *tx, org).await?;
                }
                tx.commit().await.map_err(map_err)?;
                self.changed(org).await;
                Ok(done.rows_affected() > 0)
            }

            async fn set_bypass(&self, org: OrgId, id: RuleId, b: &Bypass, audit: AuditEntry, now: DateTime<Utc>) -> StoreResult<Option<Rule>> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let done = sqlx::query(
                    "UPDATE rules SET bypass_active = $1, bypass_reason = $2, bypass_activated_by = $3, \
                     bypass_activated_at = $4, bypass_expires_at = $5, updated_at = $6 WHERE id = $7 AND org_id = $8",
                )
                .bind(b.bypass_active)
                .bind(&b.bypass_reason)
                .bind(&b.bypass_activated_by)
                .bind(b.bypass_activated_at)
                .bind(b.bypass_expires_at)
                .bind(now)
                .bind(id.0)
                .bind(org.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                insert_audit(&mut *tx, &audit).await?;
                bump_revision(&mut *tx, org).await?;
                let rule = rule_in(&mut *tx, org, id).await?;
                tx.commit().await.map_err(map_err)?;
                self.changed(org).await;
                Ok(rule)
            }

            async fn ensure_settings(&self, org: OrgId, now: DateTime<Utc>) -> StoreResult<(Settings, bool)> {
                if let Some(settings) = self.cache.settings(org) {
                    return Ok((settings, false));
                }
                let ticket = self.cache.ticket();
                // The common case reads only: the row exists.
                let existing: Option<SettingsRow> = sqlx::query_as("SELECT id, doc, created_at, updated_at FROM settings WHERE org_id = $1")
                    .bind(org.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                if let Some(row) = existing {
                    let settings = Settings::try_from(row)?;
                    self.cache.fill_settings(ticket, org, &settings);
                    return Ok((settings, false));
                }
                let inserted = sqlx::query(
                    "INSERT INTO settings (org_id, id, doc, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) \
                     ON CONFLICT (org_id) DO NOTHING",
                )
                .bind(org.0)
                .bind(Uuid::new_v4())
                .bind(json_text(&SettingsDoc::default()))
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                let row: SettingsRow = sqlx::query_as("SELECT id, doc, created_at, updated_at FROM settings WHERE org_id = $1")
                    .bind(org.0)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(map_err)?;
                self.changed(org).await;
                Ok((Settings::try_from(row)?, inserted.rows_affected() == 1))
            }

            async fn save_settings(&self, org: OrgId, doc: &SettingsDoc, now: DateTime<Utc>) -> StoreResult<Settings> {
                let row: SettingsRow = sqlx::query_as(
                    "UPDATE settings SET doc = $1, updated_at = $2 WHERE org_id = $3 RETURNING id, doc, created_at, updated_at",
                )
                .bind(json_text(doc))
                .bind(now)
                .bind(org.0)
                .fetch_one(&self.pool)
                .await
                .map_err(map_err)?;
                self.changed(org).await;
                Settings::try_from(row)
            }

            async fn insert_agent(&self, org: OrgId, agent_id: &str, mode: Option<warden_engine::model::AgentMode>, doc: &AgentDoc, now: DateTime<Utc>) -> StoreResult<Agent> {
                let sql = format!(
                    "INSERT INTO agents (id, org_id, agent_id, mode, doc, deleted_at, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, NULL, $6, $6) RETURNING {AGENT_COLUMNS}"
                );
                let row: AgentRow = sqlx::query_as(&sql)
                    .bind(Uuid::new_v4())
                    .bind(org.0)
                    .bind(agent_id)
                    .bind(mode_text(mode))
                    .bind(json_text(doc))
                    .bind(now)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(map_err)?;
                self.changed(org).await;
                Agent::try_from(row)
            }

            async fn provision_agent(&self, org: OrgId, agent_id: &str, mode: Option<warden_engine::model::AgentMode>, doc: &AgentDoc, now: DateTime<Utc>) -> StoreResult<Agent> {
                // A known agent is read, never written: the cache answers,
                // or a plain read that fills it. (Every request that found
                // the cached entry just expired used to try an insert first:
                // a no-op, but one that takes SQLite's write lock, about a
                // hundred a second under load.)
                if let Some(agent) = self.agent_by_agent_id(org, agent_id).await? {
                    return Ok(agent);
                }
                match self.insert_agent(org, agent_id, mode, doc, now).await {
                    Err(super::StoreError::Conflict(_)) => {}
                    inserted => return inserted,
                }
                // A concurrent request provisioned it first. The cache may
                // still hold "unknown" (that request forgets the
                // organization only after its commit), so ask the database.
                read_agent(&self.pool, org, agent_id)
                    .await?
                    .ok_or_else(|| super::StoreError::Corrupt("agent vanished after insert".into()))
            }

            async fn agent(&self, org: OrgId, id: Uuid) -> StoreResult<Option<Agent>> {
                let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1 AND org_id = $2");
                let row: Option<AgentRow> = sqlx::query_as(&sql).bind(id).bind(org.0).fetch_optional(&self.pool).await.map_err(map_err)?;
                row.map(Agent::try_from).transpose()
            }

            async fn agent_by_agent_id(&self, org: OrgId, agent_id: &str) -> StoreResult<Option<Agent>> {
                if let Some(agent) = self.cache.agent(org, agent_id) {
                    return Ok(agent);
                }
                let ticket = self.cache.ticket();
                let agent = read_agent(&self.pool, org, agent_id).await?;
                self.cache.fill_agent(ticket, org, agent_id, agent.as_ref());
                Ok(agent)
            }

            async fn list_agents(&self, org: OrgId, page: Page) -> StoreResult<(Vec<Agent>, u64)> {
                let clause = "org_id = $1 AND deleted_at IS NULL";
                let (rows, total): (Vec<AgentRow>, u64) =
                    page_of(&self.pool, AGENT_COLUMNS, "agents", clause, "created_at DESC, id", org, &[], page).await?;
                Ok((rows.into_iter().map(Agent::try_from).collect::<StoreResult<_>>()?, total))
            }

            async fn save_agent(
                &self,
                org: OrgId,
                id: Uuid,
                mode: Option<warden_engine::model::AgentMode>,
                doc: &AgentDoc,
                deleted_at: Option<DateTime<Utc>>,
                now: DateTime<Utc>,
            ) -> StoreResult<Option<Agent>> {
                let sql = format!(
                    "UPDATE agents SET mode = $1, doc = $2, deleted_at = $3, updated_at = $4 \
                     WHERE id = $5 AND org_id = $6 RETURNING {AGENT_COLUMNS}"
                );
                let row: Option<AgentRow> = sqlx::query_as(&sql)
                    .bind(mode_text(mode))
                    .bind(json_text(doc))
                    .bind(deleted_at)
                    .bind(now)
                    .bind(id)
                    .bind(org.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                self.changed(org).await;
                row.map(Agent::try_from).transpose()
            }

            async fn rules_revision(&self, org: OrgId) -> StoreResult<i64> {
                if let Some(revision) = self.cache.revision(org) {
                    return Ok(revision);
                }
                let ticket = self.cache.ticket();
                let row: Option<(i64,)> = sqlx::query_as("SELECT value FROM counters WHERE org_id = $1 AND name = 'rules_revision'")
                    .bind(org.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                let revision = row.map_or(0, |r| r.0);
                self.cache.fill_revision(ticket, org, revision);
                Ok(revision)
            }

            async fn action_decision(&self, org: OrgId, id: Uuid) -> StoreResult<Option<ActionDecision>> {
                let sql = format!("SELECT {ACTION_DECISION_COLUMNS} FROM action_decisions WHERE id = $1 AND org_id = $2");
                let row: Option<ActionDecisionRow> = sqlx::query_as(&sql).bind(id).bind(org.0).fetch_optional(&self.pool).await.map_err(map_err)?;
                row.map(ActionDecision::try_from).transpose()
            }

            async fn insert_retrieval_with_hitl(&self, d: &RetrievalDecision, item: &HitlItem) -> StoreResult<()> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                insert_retrieval_decisions_in(&mut tx, &[d]).await?;
                insert_hitl_in(&mut *tx, item).await?;
                tx.commit().await.map_err(map_err)?;
                Ok(())
            }

            async fn insert_hitl(&self, item: &HitlItem) -> StoreResult<bool> {
                insert_hitl_in(&self.pool, item).await
            }

            async fn hitl(&self, org: OrgId, id: Uuid) -> StoreResult<Option<HitlItem>> {
                let sql = format!("SELECT {HITL_COLUMNS} FROM hitl_items WHERE id = $1 AND org_id = $2");
                let row: Option<HitlRow> = sqlx::query_as(&sql).bind(id).bind(org.0).fetch_optional(&self.pool).await.map_err(map_err)?;
                row.map(HitlItem::try_from).transpose()
            }

            async fn hitl_for_decision(&self, org: OrgId, decision_id: Uuid) -> StoreResult<Option<HitlItem>> {
                let sql = format!("SELECT {HITL_COLUMNS} FROM hitl_items WHERE decision_id = $1 AND org_id = $2");
                let row: Option<HitlRow> = sqlx::query_as(&sql).bind(decision_id).bind(org.0).fetch_optional(&self.pool).await.map_err(map_err)?;
                row.map(HitlItem::try_from).transpose()
            }

            async fn list_hitl(&self, org: OrgId, status: &str, page: Page) -> StoreResult<(Vec<HitlItem>, u64)> {
                let order = if status == "pending" { "created_at ASC, id" } else { "created_at DESC, id" };
                let values = [FilterValue::Text(status.to_owned())];
                let (rows, total): (Vec<HitlRow>, u64) =
                    page_of(&self.pool, HITL_COLUMNS, "hitl_items", "org_id = $1 AND status = $2", order, org, &values, page).await?;
                Ok((rows.into_iter().map(HitlItem::try_from).collect::<StoreResult<_>>()?, total))
            }

            async fn resolve_hitl(
                &self,
                org: OrgId,
                id: Uuid,
                status: &str,
                responded_by: Option<&str>,
                resolution: Option<&str>,
                now: DateTime<Utc>,
            ) -> StoreResult<bool> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let done = sqlx::query(
                    "UPDATE hitl_items SET status = $1, responded_by = $2, resolution = $3, responded_at = $4 \
                     WHERE id = $5 AND org_id = $6 AND status = 'pending' AND (expires_at IS NULL OR expires_at > $4)",
                )
                .bind(status)
                .bind(responded_by)
                .bind(resolution)
                .bind(now)
                .bind(id)
                .bind(org.0)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                if done.rows_affected() == 0 {
                    return Ok(false);
                }
                sqlx::query(
                    "UPDATE action_decisions SET hitl_result = $1, hitl_responded_at = $2, hitl_responded_by = $3 \
                     WHERE org_id = $4 AND id = (SELECT decision_id FROM hitl_items WHERE id = $5) \
                     AND $1 IN ('approved', 'rejected')",
                )
                .bind(status)
                .bind(now)
                .bind(responded_by)
                .bind(org.0)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                tx.commit().await.map_err(map_err)?;
                Ok(true)
            }

            async fn expire_hitl(&self, org: OrgId, now: DateTime<Utc>) -> StoreResult<()> {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                sqlx::query(
                    "UPDATE action_decisions SET hitl_result = 'timeout' WHERE org_id = $1 AND hitl_result IS NULL \
                     AND id IN (SELECT decision_id FROM hitl_items WHERE org_id = $1 AND status = 'pending' \
                     AND expires_at IS NOT NULL AND expires_at <= $2)",
                )
                .bind(org.0)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                sqlx::query(
                    "UPDATE hitl_items SET status = 'timeout' WHERE org_id = $1 AND status = 'pending' \
                     AND expires_at IS NOT NULL AND expires_at <= $2",
                )
                .bind(org.0)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
                tx.commit().await.map_err(map_err)?;
                Ok(())
            }

            async fn set_notified(&self, org: OrgId, id: Uuid, via: &[String]) -> StoreResult<()> {
                sqlx::query("UPDATE hitl_items SET notified_via = $1 WHERE id = $2 AND org_id = $3")
                    .bind(json_text(&via))
                    .bind(id)
                    .bind(org.0)
                    .execute(&self.pool)
                    .await
                    .map_err(map_err)?;
                Ok(())
            }

            async fn ingest_telemetry(&self, org: OrgId, decisions: &[ActionDecision], gaps: &[HitlItem], now: DateTime<Utc>) -> StoreResult<u64> {
                // Writes only, from the first statement on: a SQLite transaction
                // that read first could not upgrade to writing after another
                // connection wrote (SQLITE_BUSY_SNAPSHOT).
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                let rows: Vec<&ActionDecision> = decisions.iter().collect();
                insert_action_decisions_in(&mut tx, &rows, true).await?;
                for g in gaps {
                    insert_hitl_in(&mut *tx, g).await?;
                }
                let mut new_schemas = 0;
                for d in decisions {
                    let done = sqlx::query(
                        "INSERT INTO telemetry_schemas (org_id, target_app, action, first_seen_at) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (org_id, target_app, action) DO NOTHING",
                    )
                    .bind(org.0)
                    .bind(&d.target_app)
                    .bind(&d.action)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                    new_schemas += done.rows_affected();
                }
                tx.commit().await.map_err(map_err)?;
                Ok(new_schemas)
            }

            async fn record_execution(&self, org: OrgId, id: Uuid, result: &str, details: Option<&str>, now: DateTime<Utc>) -> StoreResult<Option<bool>> {
                let done = sqlx::query(
                    "UPDATE action_decisions SET execution_result = $1, execution_details = $2, execution_completed_at = $3 \
                     WHERE id = $4 AND org_id = $5 AND execution_result IS NULL",
                )
                .bind(result)
                .bind(details)
                .bind(now)
                .bind(id)
                .bind(org.0)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                if done.rows_affected() == 1 {
                    return Ok(Some(true));
                }
                let exists: Option<(Uuid,)> = sqlx::query_as("SELECT id FROM action_decisions WHERE id = $1 AND org_id = $2")
                    .bind(id)
                    .bind(org.0)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                Ok(exists.map(|_| false))
            }

            async fn action_log(&self, org: OrgId, filter: &AuditFilter, page: Page) -> StoreResult<(Vec<ActionDecision>, u64)> {
                let (clause, values) = audit_where(filter, true);
                let (rows, total): (Vec<ActionDecisionRow>, u64) = page_of(
                    &self.pool, ACTION_DECISION_COLUMNS, "action_decisions", &clause, "created_at DESC, id", org, &values, page,
                )
                .await?;
                Ok((rows.into_iter().map(ActionDecision::try_from).collect::<StoreResult<_>>()?, total))
            }

            async fn retrieval_log(&self, org: OrgId, filter: &AuditFilter, page: Page) -> StoreResult<(Vec<RetrievalDecision>, u64)> {
                let (clause, values) = audit_where(filter, false);
                let (rows, total): (Vec<RetrievalDecisionRow>, u64) = page_of(
                    &self.pool, RETRIEVAL_DECISION_COLUMNS, "retrieval_decisions", &clause, "created_at DESC, id", org, &values, page,
                )
                .await?;
                Ok((rows.into_iter().map(RetrievalDecision::try_from).collect::<StoreResult<_>>()?, total))
            }

            // Backend-specific methods (PostgreSQL's LISTEN/NOTIFY).
            $($($extra)*)?

            async fn idem_claim(
                &self,
                key: IdemKey<'_>,
                request_hash: &str,
                now: DateTime<Utc>,
                expires_at: DateTime<Utc>,
            ) -> StoreResult<IdemClaim> {
                let inserted = sqlx::query(
                    "INSERT INTO idempotency (credential_id, idem_key, org_id, request_hash, done, status, \
                     headers, body, started_at, expires_at) VALUES ($1, $2, $3, $4, FALSE, NULL, $5, $6, $7, $8) \
                     ON CONFLICT (credential_id, idem_key) DO NOTHING",
                )
                .bind(key.credential.0)
                .bind(key.key)
                .bind(key.org.0)
                .bind(request_hash)
                .bind(sqlx::types::Json(Vec::<(String, String)>::new()))
                .bind(Vec::<u8>::new())
                .bind(now)
                .bind(expires_at)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                if inserted.rows_affected() == 1 {
                    return Ok(IdemClaim::Claimed);
                }
                let row: Option<IdemRow> = sqlx::query_as(
                    "SELECT request_hash, done, status, headers, body, started_at, expires_at \
                     FROM idempotency WHERE credential_id = $1 AND idem_key = $2",
                )
                .bind(key.credential.0)
                .bind(key.key)
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
                // Released between the insert and the read: claim it again.
                match row {
                    Some(row) => Ok(IdemClaim::Held(IdemRecord::from(row))),
                    None => Box::pin(self.idem_claim(key, request_hash, now, expires_at)).await,
                }
            }

            async fn idem_take_over(
                &self,
                key: IdemKey<'_>,
                request_hash: &str,
                now: DateTime<Utc>,
                expires_at: DateTime<Utc>,
                abandoned_before: DateTime<Utc>,
            ) -> StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE idempotency SET request_hash = $1, done = FALSE, status = NULL, headers = $2, \
                     body = $3, started_at = $4, expires_at = $5 \
                     WHERE credential_id = $6 AND idem_key = $7 \
                     AND (expires_at <= $4 OR (done = FALSE AND started_at < $8))",
                )
                .bind(request_hash)
                .bind(sqlx::types::Json(Vec::<(String, String)>::new()))
                .bind(Vec::<u8>::new())
                .bind(now)
                .bind(expires_at)
                .bind(key.credential.0)
                .bind(key.key)
                .bind(abandoned_before)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                Ok(done.rows_affected() == 1)
            }

            async fn idem_finish(&self, key: IdemKey<'_>, status: u16, headers: &[(String, String)], body: &[u8]) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE idempotency SET done = TRUE, status = $1, headers = $2, body = $3 \
                     WHERE credential_id = $4 AND idem_key = $5",
                )
                .bind(i32::from(status))
                .bind(sqlx::types::Json(headers))
                .bind(body)
                .bind(key.credential.0)
                .bind(key.key)
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
                Ok(())
            }

            async fn idem_release(&self, key: IdemKey<'_>) -> StoreResult<()> {
                sqlx::query("DELETE FROM idempotency WHERE credential_id = $1 AND idem_key = $2")
                    .bind(key.credential.0)
                    .bind(key.key)
                    .execute(&self.pool)
                    .await
                    .map_err(map_err)?;
                Ok(())
            }
        }
    };
}

pub(super) use store_impl;
