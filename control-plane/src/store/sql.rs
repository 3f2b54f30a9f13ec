//! The queries, written once in the SQL both backends accept (`$n`
//! placeholders, `ON CONFLICT`, `RETURNING`), and implemented for each
//! backend's pool by `store_impl!`. A backend's own concerns (connection
//! options, migrations, notifications) stay in its module.

/// Columns of `api_keys`, in `KeyRow`'s order.
pub(super) const KEY_COLUMNS: &str = "id, org_id, name, key_hash, display, audience, environment, \
     permissions, scopes, agent_id, created_by, created_at, expires_at, revoked_at, replaced_by, \
     last_used_at";

/// Maps a driver error, turning unique violations into conflicts.
pub(super) fn map_err(e: sqlx::Error) -> super::StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            super::StoreError::Conflict(db.message().to_owned())
        }
        _ => super::StoreError::Database(e),
    }
}

macro_rules! store_impl {
    ($store:ty, $db:ty) => {
        use async_trait::async_trait;
        use chrono::{DateTime, Utc};
        use uuid::Uuid;

        use super::rows::{AuditRow, IdemRow, KeyRow, OrgRow, names};
        use super::sql::{KEY_COLUMNS, map_err};
        use super::{
            ApiKey, AuditEntry, IdemClaim, IdemKey, IdemRecord, KeyId, NewKey, OrgId, Organization, Page,
            Retire, Store, StoreResult,
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

        #[async_trait]
        impl Store for $store {
            async fn ping(&self) -> StoreResult<()> {
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
                Ok(created)
            }

            async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>> {
                let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = $1");
                let row: Option<KeyRow> = sqlx::query_as(&sql)
                    .bind(hash)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(map_err)?;
                row.map(ApiKey::try_from).transpose()
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
                let sql = format!(
                    "SELECT {KEY_COLUMNS} FROM api_keys WHERE org_id = $1 \
                     ORDER BY created_at DESC, id LIMIT $2 OFFSET $3"
                );
                let rows: Vec<KeyRow> = sqlx::query_as(&sql)
                    .bind(org.0)
                    .bind(i64::from(page.limit))
                    .bind(page.offset())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(map_err)?;
                let (total,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM api_keys WHERE org_id = $1")
                    .bind(org.0)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(map_err)?;
                let keys = rows.into_iter().map(ApiKey::try_from).collect::<StoreResult<_>>()?;
                Ok((keys, u64::try_from(total).unwrap_or(0)))
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
