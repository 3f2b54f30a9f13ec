//! Statements several store methods share, and the items both backends'
//! SQL uses. `statements!` generates, in a backend's module, the helper
//! functions for that backend's pool; `store_impl!` (in `sql.rs`), expanded
//! in the same module after it, uses them.

/// Columns of `api_keys`, in `KeyRow`'s order.
pub(super) const KEY_COLUMNS: &str = "id, org_id, name, key_hash, display, audience, environment, \
     permissions, scopes, agent_id, created_by, created_at, expires_at, revoked_at, replaced_by, \
     last_used_at";

/// The columns a rule's author sets, bound as `$1`..`$13` by `bind_rule_fields`.
pub(super) const RULE_FIELDS: &str = "name, description, natural_language, rego_source, effect, priority, enabled, \
     applies_to, target_app, action_pattern, trust_tier, surface, principal_exclusions";

/// Columns of `rules`, in `RuleRow`'s order; `{source}` is `rego_source`
/// or a NULL for lists.
pub(super) fn rule_columns(with_source: bool) -> String {
    format!(
        "id, rule_code, name, description, natural_language, {}, effect, priority, enabled, \
         applies_to, target_app, action_pattern, trust_tier, surface, principal_exclusions, \
         bypass_active, bypass_reason, bypass_activated_by, bypass_activated_at, bypass_expires_at, \
         created_at, updated_at",
        if with_source {
            "rego_source"
        } else {
            "CAST(NULL AS TEXT) AS rego_source"
        }
    )
}

/// `applies_to` as stored: a JSON array of facet names.
pub(super) fn facets_json(facets: &[warden_engine::model::Facet]) -> String {
    serde_json::to_string(&facets.iter().map(|f| f.as_str()).collect::<Vec<_>>())
        .unwrap_or_else(|_| "[]".into())
}

/// A value bound into a filter (`$2`… of a paged read).
pub(super) enum FilterValue {
    Text(String),
    Time(chrono::DateTime<chrono::Utc>),
    Bool(bool),
}

/// `WHERE` clauses of an audit-log read, with their values in `$n` order
/// after `$1` (the organization).
pub(super) fn audit_where(f: &super::AuditFilter, action_log: bool) -> (String, Vec<FilterValue>) {
    let mut clauses = vec!["org_id = $1".to_owned()];
    let mut values = Vec::new();
    let text = |col: &str,
                v: &Option<String>,
                clauses: &mut Vec<String>,
                values: &mut Vec<FilterValue>| {
        if let Some(v) = v {
            values.push(FilterValue::Text(v.clone()));
            clauses.push(format!("{col} = ${}", values.len() + 1));
        }
    };
    text("agent_id", &f.agent_id, &mut clauses, &mut values);
    text("decision", &f.decision, &mut clauses, &mut values);
    if action_log {
        text("target_app", &f.target_app, &mut clauses, &mut values);
        text("hitl_result", &f.hitl_result, &mut clauses, &mut values);
    } else {
        text("operation", &f.operation, &mut clauses, &mut values);
        text("reason_code", &f.reason_code, &mut clauses, &mut values);
    }
    for (op, t) in [(">=", f.start), ("<=", f.end)] {
        if let Some(t) = t {
            values.push(FilterValue::Time(t));
            clauses.push(format!("created_at {op} ${}", values.len() + 1));
        }
    }
    (clauses.join(" AND "), values)
}

pub(super) const ACTION_DECISION_COLUMNS: &str = "id, org_id, agent_id, target_app, action, context, decision, would_decide, \
     reason, reason_code, rule_id, rule_code, enforced, agent_mode, floor_detectors, source, hitl_result, \
     hitl_responded_at, hitl_responded_by, execution_result, execution_completed_at, execution_details, created_at";

pub(super) const HITL_COLUMNS: &str = "id, org_id, decision_id, agent_id, target_app, action, context, category, status, \
     ai_recommended_rule, notified_via, resolution, dedupe_key, expires_at, responded_at, responded_by, created_at";

pub(super) const RETRIEVAL_DECISION_COLUMNS: &str = "id, org_id, agent_id, operation, resource_type, resource_metadata, \
     query, surface, trust_tier, decision, would_decide, reason, reason_code, rule_id, enforced, agent_mode, \
     floor_detectors, created_at";

/// A value as the stores keep JSON: its text.
pub(super) fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The most rows one multi-row `INSERT` carries.
const MAX_ROWS_PER_STATEMENT: usize = 64;

/// Splits a batch of rows into chunks whose sizes are powers of two (at most
/// [`MAX_ROWS_PER_STATEMENT`]): a multi-row `INSERT` then has at most seven
/// shapes, which the connection's prepared-statement cache keeps, instead of
/// one new statement per batch size.
pub(super) fn row_chunks<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = if rest.len() >= MAX_ROWS_PER_STATEMENT {
            MAX_ROWS_PER_STATEMENT
        } else {
            1 << rest.len().ilog2()
        };
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

pub(super) fn map_err(e: sqlx::Error) -> super::StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            super::StoreError::Conflict(db.message().to_owned())
        }
        _ => super::StoreError::Database(e),
    }
}

macro_rules! statements {
    ($db:ty) => {
        use async_trait::async_trait;
        use chrono::{DateTime, Utc};
        use uuid::Uuid;

        use warden_engine::model::{Bypass, Facet, Rule};

        use super::rows::{ActionDecisionRow, RetrievalDecisionRow, HitlRow, AgentRow, AuditRow, IdemRow, KeyRow, OrgRow, RuleRow, SettingsRow, names};
        use super::statements::{FilterValue, audit_where, ACTION_DECISION_COLUMNS, HITL_COLUMNS, RETRIEVAL_DECISION_COLUMNS, json_text, KEY_COLUMNS, RULE_FIELDS, facets_json, map_err, row_chunks, rule_columns};
        use super::{
            ApiKey, AuditEntry, IdemClaim, IdemKey, IdemRecord, KeyId, NewKey, OrgId, Organization,
            Page, Retire, RuleId, Store, StoreResult, Settings, SettingsDoc, Agent, AgentDoc, ActionDecision,
            RetrievalDecision, HitlItem, AuditFilter,
        };

        async fn insert_key<'c, E>(exec: E, key: &NewKey, now: DateTime<Utc>) -> StoreResult<ApiKey>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            let sql = format!(
                "INSERT INTO api_keys ({KEY_COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, NULL, NULL, NULL) \
                 RETURNING {KEY_COLUMNS}"
            );
            let row: KeyRow = sqlx::query_as(&sql)
                .bind(Uuid::new_v4())
                .bind(key.org.0)
                .bind(&key.name)
                .bind(&key.hash)
                .bind(&key.display)
                .bind(key.audience.as_str())
                .bind(key.environment.as_str())
                .bind(names(&key.permissions, |p| p.as_str()))
                .bind(names(&key.scopes, |s| s.as_str()))
                .bind(&key.agent_id)
                .bind(key.created_by.map(|k| k.0))
                .bind(now)
                .bind(key.expires_at)
                .fetch_one(exec)
                .await
                .map_err(map_err)?;
            ApiKey::try_from(row)
        }

        async fn insert_audit<'c, E>(exec: E, e: &AuditEntry) -> StoreResult<()>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            sqlx::query(
                "INSERT INTO audit_log (org_id, action, actor, target_type, target_id, details, at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(e.org.0)
            .bind(&e.action)
            .bind(e.actor.map(|k| k.0))
            .bind(&e.target_type)
            .bind(&e.target_id)
            .bind(sqlx::types::Json(&e.details))
            .bind(e.at)
            .execute(exec)
            .await
            .map_err(map_err)?;
            Ok(())
        }

        /// Binds the rule's own fields as `$1`..`$13`, in `RULE_FIELDS` order.
        fn bind_rule_fields<'q>(
            q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            r: &'q Rule,
        ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>> {
            q.bind(&r.name)
                .bind(&r.description)
                .bind(&r.natural_language)
                .bind(r.rego_source.as_deref().unwrap_or_default())
                .bind(r.effect.as_str())
                .bind(r.priority)
                .bind(r.enabled)
                .bind(facets_json(&r.applies_to))
                .bind(&r.target_app)
                .bind(&r.action_pattern)
                .bind(&r.trust_tier)
                .bind(&r.surface)
                .bind(r.principal_exclusions.as_ref().map(sqlx::types::Json))
        }

        const AGENT_COLUMNS: &str = "id, org_id, agent_id, mode, doc, deleted_at, created_at, updated_at";

        fn mode_text(m: Option<warden_engine::model::AgentMode>) -> Option<&'static str> {
            m.map(|m| m.as_str())
        }

        /// Moves the organization's rules revision (inside the rule write's transaction).
        async fn bump_revision<'c, E>(exec: E, org: OrgId) -> StoreResult<()>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            sqlx::query(
                "INSERT INTO counters (org_id, name, value) VALUES ($1, 'rules_revision', 1) \
                 ON CONFLICT (org_id, name) DO UPDATE SET value = counters.value + 1",
            )
            .bind(org.0)
            .execute(exec)
            .await
            .map_err(map_err)?;
            Ok(())
        }

        async fn insert_hitl_in<'c, E>(exec: E, i: &HitlItem) -> StoreResult<bool>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            let sql = format!(
                "INSERT INTO hitl_items ({HITL_COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) ON CONFLICT DO NOTHING"
            );
            let done = sqlx::query(&sql)
                .bind(i.id)
                .bind(i.org.0)
                .bind(i.decision_id)
                .bind(&i.agent_id)
                .bind(&i.target_app)
                .bind(&i.action)
                .bind(json_text(&i.context))
                .bind(&i.category)
                .bind(&i.status)
                .bind(&i.ai_recommended_rule)
                .bind(json_text(&i.notified_via))
                .bind(&i.resolution)
                .bind(&i.dedupe_key)
                .bind(i.expires_at)
                .bind(i.responded_at)
                .bind(&i.responded_by)
                .bind(i.created_at)
                .execute(exec)
                .await
                .map_err(map_err)?;
            Ok(done.rows_affected() == 1)
        }

        /// Inserts decisions, as few statements as the batch allows (see
        /// `row_chunks`); with `replay_ok`, an id already stored is left alone
        /// (a re-sent telemetry item) instead of being an error.
        async fn insert_action_decisions_in(
            conn: &mut <$db as sqlx::Database>::Connection,
            rows: &[&ActionDecision],
            replay_ok: bool,
        ) -> StoreResult<()> {
            for chunk in row_chunks(rows) {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                    "INSERT INTO action_decisions ({ACTION_DECISION_COLUMNS}) "
                ));
                q.push_values(chunk, |mut b, d| {
                    b.push_bind(d.id)
                        .push_bind(d.org.0)
                        .push_bind(&d.agent_id)
                        .push_bind(&d.target_app)
                        .push_bind(&d.action)
                        .push_bind(json_text(&d.context))
                        .push_bind(d.decision.as_str())
                        .push_bind(d.would_decide.map(|w| w.as_str()))
                        .push_bind(&d.reason)
                        .push_bind(d.reason_code.map(|c| c.as_str()))
                        .push_bind(d.rule_id)
                        .push_bind(&d.rule_code)
                        .push_bind(d.enforced)
                        .push_bind(d.agent_mode.as_str())
                        .push_bind(json_text(&d.floor_detectors))
                        .push_bind(&d.source)
                        .push_bind(&d.hitl_result)
                        .push_bind(d.hitl_responded_at)
                        .push_bind(&d.hitl_responded_by)
                        .push_bind(&d.execution_result)
                        .push_bind(d.execution_completed_at)
                        .push_bind(&d.execution_details)
                        .push_bind(d.created_at);
                });
                if replay_ok {
                    q.push(" ON CONFLICT (id) DO NOTHING");
                }
                q.build().execute(&mut *conn).await.map_err(map_err)?;
            }
            Ok(())
        }

        /// Binds filter values after the organization.
        fn bind_filter<'q, O>(
            mut q: sqlx::query::QueryAs<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            values: &'q [FilterValue],
        ) -> sqlx::query::QueryAs<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>> {
            for v in values {
                q = match v {
                    FilterValue::Text(t) => q.bind(t),
                    FilterValue::Time(t) => q.bind(*t),
                    FilterValue::Bool(b) => q.bind(*b),
                };
            }
            q
        }

        /// Inserts retrieval decisions, as few statements as the batch allows.
        async fn insert_retrieval_decisions_in(
            conn: &mut <$db as sqlx::Database>::Connection,
            rows: &[&RetrievalDecision],
        ) -> StoreResult<()> {
            for chunk in row_chunks(rows) {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                    "INSERT INTO retrieval_decisions ({RETRIEVAL_DECISION_COLUMNS}) "
                ));
                q.push_values(chunk, |mut b, d| {
                    b.push_bind(d.id)
                        .push_bind(d.org.0)
                        .push_bind(&d.agent_id)
                        .push_bind(&d.operation)
                        .push_bind(&d.resource_type)
                        .push_bind(json_text(&d.resource_metadata))
                        .push_bind(&d.query)
                        .push_bind(&d.surface)
                        .push_bind(&d.trust_tier)
                        .push_bind(d.decision.as_str())
                        .push_bind(d.would_decide.map(|w| w.as_str()))
                        .push_bind(&d.reason)
                        .push_bind(d.reason_code.as_str())
                        .push_bind(d.rule_id)
                        .push_bind(d.enforced)
                        .push_bind(d.agent_mode.as_str())
                        .push_bind(json_text(&d.floor_detectors))
                        .push_bind(d.created_at);
                });
                q.build().execute(&mut *conn).await.map_err(map_err)?;
            }
            Ok(())
        }

        async fn rule_in<'c, E>(exec: E, org: OrgId, id: RuleId) -> StoreResult<Option<Rule>>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            let sql = format!("SELECT {} FROM rules WHERE id = $1 AND org_id = $2", rule_columns(true));
            let row: Option<RuleRow> = sqlx::query_as(&sql).bind(id.0).bind(org.0).fetch_optional(exec).await.map_err(map_err)?;
            row.map(Rule::try_from).transpose()
        }

        /// The agent `agent_id` of `org`, read from the database (never the
        /// cache).
        async fn read_agent(
            pool: &sqlx::Pool<$db>,
            org: OrgId,
            agent_id: &str,
        ) -> StoreResult<Option<Agent>> {
            let sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE agent_id = $1 AND org_id = $2");
            let row: Option<AgentRow> = sqlx::query_as(&sql)
                .bind(agent_id)
                .bind(org.0)
                .fetch_optional(pool)
                .await
                .map_err(map_err)?;
            row.map(Agent::try_from).transpose()
        }

        /// One page of `SELECT {columns} FROM {from} WHERE {clause} ORDER BY
        /// {order}` and how many rows match: `$1` is the organization and
        /// `values` follow as `$2`….
        #[allow(clippy::too_many_arguments)]
        async fn page_of<R>(
            pool: &sqlx::Pool<$db>,
            columns: &str,
            from: &str,
            clause: &str,
            order: &str,
            org: OrgId,
            values: &[FilterValue],
            page: Page,
        ) -> StoreResult<(Vec<R>, u64)>
        where
            R: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
        {
            let n = values.len();
            let sql = format!(
                "SELECT {columns} FROM {from} WHERE {clause} ORDER BY {order} LIMIT ${} OFFSET ${}",
                n + 2,
                n + 3
            );
            let rows: Vec<R> = bind_filter(sqlx::query_as(&sql).bind(org.0), values)
                .bind(i64::from(page.limit))
                .bind(page.offset())
                .fetch_all(pool)
                .await
                .map_err(map_err)?;
            let count = format!("SELECT COUNT(*) FROM {from} WHERE {clause}");
            let (total,): (i64,) = bind_filter(sqlx::query_as(&count).bind(org.0), values)
                .fetch_one(pool)
                .await
                .map_err(map_err)?;
            Ok((rows, u64::try_from(total).unwrap_or(0)))
        }
    };
}

pub(super) use statements;

#[cfg(test)]
mod tests {
    use super::row_chunks;

    #[test]
    fn batches_split_into_power_of_two_chunks() {
        let sizes = |n: usize| -> Vec<usize> {
            let rows = vec![0u8; n];
            row_chunks(&rows).map(<[u8]>::len).collect()
        };
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert_eq!(sizes(1), vec![1]);
        assert_eq!(sizes(37), vec![32, 4, 1]);
        assert_eq!(sizes(200), vec![64, 64, 64, 8]);
    }
}
