//! Storage: one interface, two backends (SQLite, the embedded default, and
//! PostgreSQL for several replicas). Only this module knows SQL.
//!
//! Every row carries its organization, and every read that takes an id also
//! takes the organization: another organization's row is simply not found.

mod cache;
mod decisions;
mod postgres;
mod rows;
mod sql;
mod sqlite;
mod sqlite_writer;
mod statements;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use serde::Deserialize;
use warden_engine::model::{
    AgentMode, AgentNoCoverage, BusinessFunction, Bypass, Facet, ModeByOperation,
    NoCoverageSettings, Rule,
};

use crate::auth::{Audience, Environment, Permission, Scope};

pub use decisions::{
    ActionDecision, AuditFilter, DecisionBatch, Flush, HitlItem, RetrievalDecision,
};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// An organization (tenant). Its id is the `vendor_id` every row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct OrgId(pub Uuid);

/// An API key's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct KeyId(pub Uuid);

/// A rule's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct RuleId(pub Uuid);

/// A webhook (or later, other) channel approval items are announced on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationChannel {
    /// `webhook`: a JSON `POST` of the item to `url`.
    #[serde(rename = "type")]
    pub kind: ChannelKind,
    /// `http://` or `https://`.
    pub url: String,
}

/// Kinds of notification channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    Webhook,
}

/// An organization's action-governance settings (spec 2.9) as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingsDoc {
    #[serde(flatten)]
    pub no_coverage: NoCoverageSettings,
    #[serde(default)]
    pub notification_channels: Vec<NotificationChannel>,
    #[serde(default = "monitor")]
    pub default_agent_mode: AgentMode,
}

fn monitor() -> AgentMode {
    AgentMode::Monitor
}

impl Default for SettingsDoc {
    fn default() -> SettingsDoc {
        SettingsDoc {
            no_coverage: NoCoverageSettings::default(),
            notification_channels: Vec::new(),
            default_agent_mode: AgentMode::Monitor,
        }
    }
}

/// The settings row of an organization.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub id: Uuid,
    pub doc: SettingsDoc,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An agent's fields that no query filters on (spec 2.2), stored as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentDoc {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub mode_by_operation: ModeByOperation,
    #[serde(default)]
    pub owner_email: Option<String>,
    #[serde(default)]
    pub hitl_pathway: Option<String>,
    #[serde(default)]
    pub trust_tier: Option<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    #[serde(default)]
    pub no_coverage: Option<AgentNoCoverage>,
    #[serde(default)]
    pub business_function: Option<BusinessFunction>,
    #[serde(default)]
    pub agent_os: Option<String>,
    #[serde(default)]
    pub agent_hostname: Option<String>,
    #[serde(default)]
    pub agent_ip: Option<String>,
    #[serde(default)]
    pub agent_username: Option<String>,
    /// `sdk` or `cli_harness` (from registration).
    #[serde(default)]
    pub kind: Option<String>,
    /// A human set the name: AI naming leaves it alone.
    #[serde(default)]
    pub name_pinned: bool,
    /// A human set the business function: AI classification leaves it alone.
    #[serde(default)]
    pub business_function_pinned: bool,
}

/// An agent row.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// Row id (the `:id` of `/allow/agents/:id`).
    pub id: Uuid,
    pub org: OrgId,
    /// The logical identifier agents present.
    pub agent_id: String,
    /// `None`: inherits the organization's `default_agent_mode`.
    pub mode: Option<AgentMode>,
    pub doc: AgentDoc,
    /// Set when the agent was shut down by `DELETE`.
    pub deleted_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A mode change to announce to stream subscribers: one agent's, or (with
/// no agent) the organization default's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeEvent {
    pub org: OrgId,
    pub agent_id: Option<String>,
}

impl ModeEvent {
    /// The `NOTIFY` payload: `org|agent_id` (empty agent: organization-wide).
    pub fn payload(&self) -> String {
        format!("{}|{}", self.org.0, self.agent_id.as_deref().unwrap_or(""))
    }

    /// Parses a payload made by [`ModeEvent::payload`].
    pub fn parse(payload: &str) -> Option<ModeEvent> {
        let (org, agent) = payload.split_once('|')?;
        Some(ModeEvent {
            org: OrgId(Uuid::parse_str(org).ok()?),
            agent_id: (!agent.is_empty()).then(|| agent.to_owned()),
        })
    }
}

/// An organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Organization {
    pub id: OrgId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// A stored API key (never the plaintext).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: KeyId,
    pub org: OrgId,
    pub name: String,
    /// SHA-256 of the plaintext, hex.
    pub hash: String,
    /// First 16 characters and asterisks.
    pub display: String,
    pub audience: Audience,
    pub environment: Environment,
    pub permissions: Vec<Permission>,
    pub scopes: Vec<Scope>,
    /// For agent keys (`allow_…`): the agent they act as.
    pub agent_id: Option<String>,
    /// The key that created this one (`None` for keys made by the CLI).
    pub created_by: Option<KeyId>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub replaced_by: Option<KeyId>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Where a key stands at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    Active,
    /// Rotated, still accepted until its grace ends.
    Retiring,
    Expired,
    Revoked,
}

impl ApiKey {
    /// The key's state at `now` (spec 3.1).
    pub fn status(&self, now: DateTime<Utc>) -> KeyStatus {
        if self.revoked_at.is_some_and(|t| t <= now) {
            KeyStatus::Revoked
        } else if self.expires_at.is_some_and(|t| t <= now) {
            KeyStatus::Expired
        } else if self.replaced_by.is_some() {
            KeyStatus::Retiring
        } else {
            KeyStatus::Active
        }
    }
}

/// A key to insert.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub org: OrgId,
    pub name: String,
    pub hash: String,
    pub display: String,
    pub audience: Audience,
    pub environment: Environment,
    pub permissions: Vec<Permission>,
    pub scopes: Vec<Scope>,
    pub agent_id: Option<String>,
    pub created_by: Option<KeyId>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What happens to a rotated key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retire {
    /// Its new expiry: the end of the grace window, never later than before.
    pub expires_at: DateTime<Utc>,
    /// Revoke it at once (it had already expired).
    pub revoke: bool,
}

/// An audit-log entry (key lifecycle, emergency bypass, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub org: OrgId,
    /// `API_KEY_CREATED`, `API_KEY_ROTATED`, `API_KEY_REVOKED`, …
    pub action: String,
    /// The key that did it (`None` for the CLI).
    pub actor: Option<KeyId>,
    pub target_type: String,
    pub target_id: String,
    pub details: serde_json::Value,
    pub at: DateTime<Utc>,
}

/// A stored idempotent request (spec 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemRecord {
    /// SHA-256 over method, path, query and body.
    pub request_hash: String,
    /// The response is stored (else the first request is still running).
    pub done: bool,
    pub status: Option<u16>,
    /// The replayable response headers.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub started_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// The outcome of claiming an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdemClaim {
    /// The key was free: this request runs and must finish or release it.
    Claimed,
    /// The key is held: by a finished request, or one still running.
    Held(IdemRecord),
}

/// The identity of an idempotency key: the sending credential and the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdemKey<'a> {
    pub org: OrgId,
    pub credential: KeyId,
    pub key: &'a str,
}

/// One page of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// 1-based.
    pub page: u32,
    pub limit: u32,
}

impl Page {
    pub(crate) fn offset(self) -> i64 {
        i64::from(self.page.saturating_sub(1)) * i64::from(self.limit)
    }
}

/// A storage failure. Details are logged, never sent to clients.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint was violated (a duplicate name, say).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database could not be reached or failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// SQLite failed under the decision writer's own connection, or the
    /// writer thread is gone.
    #[error("database error: {0}")]
    Writer(String),
    /// A stored value could not be read back (a corrupt or foreign row).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Migrations failed at start.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// The result of the store's operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// The storage interface. Both backends run the same test sequence.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Succeeds when the database answers (readiness).
    async fn ping(&self) -> StoreResult<()>;

    /// The organization called `name`, created if missing.
    async fn ensure_org(&self, name: &str, now: DateTime<Utc>) -> StoreResult<Organization>;

    /// The organization called `name`.
    async fn org_by_name(&self, name: &str) -> StoreResult<Option<Organization>>;

    /// Inserts a key and its audit entry in one transaction (an entry with
    /// an empty `target_id` gets the new key's id).
    async fn create_key(
        &self,
        key: NewKey,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<ApiKey>;

    /// The key whose hash is `hash`, in any organization (authentication).
    async fn key_by_hash(&self, hash: &str) -> StoreResult<Option<ApiKey>>;

    /// The key `id` of organization `org`.
    async fn key(&self, org: OrgId, id: KeyId) -> StoreResult<Option<ApiKey>>;

    /// The key `id`, whatever its organization (the CLI's `rotate`/`revoke`).
    async fn key_any_org(&self, id: KeyId) -> StoreResult<Option<ApiKey>>;

    /// Keys of `org`, newest first, and how many there are.
    async fn list_keys(&self, org: OrgId, page: Page) -> StoreResult<(Vec<ApiKey>, u64)>;

    /// Inserts `replacement`, links `old` to it, sets `old`'s expiry to
    /// `retire.expires_at` (and revokes it when `retire.revoke`), and writes
    /// the audit entry: one transaction.
    async fn rotate_key(
        &self,
        org: OrgId,
        old: KeyId,
        replacement: NewKey,
        retire: Retire,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<ApiKey>;

    /// Revokes key `id` at `now` if it is not revoked yet; `false` if there
    /// was nothing to revoke.
    async fn revoke_key(&self, org: OrgId, id: KeyId, now: DateTime<Utc>) -> StoreResult<bool>;

    /// Records that the key was used at `at`.
    async fn touch_key(&self, id: KeyId, at: DateTime<Utc>) -> StoreResult<()>;

    /// Appends an audit entry.
    async fn append_audit(&self, entry: AuditEntry) -> StoreResult<()>;

    /// Audit entries of `org`, oldest first.
    async fn audit_entries(&self, org: OrgId) -> StoreResult<Vec<AuditEntry>>;

    /// Inserts `rule`'s authored fields with a new id, the organization's
    /// next `R-####` code, timestamps `now` and no bypass.
    async fn create_rule(&self, org: OrgId, rule: &Rule, now: DateTime<Utc>) -> StoreResult<Rule>;

    /// The rule `id` of `org`, with its source.
    async fn rule(&self, org: OrgId, id: RuleId) -> StoreResult<Option<Rule>>;

    /// Rules of `org` (without source) applying to any of `facets` (all
    /// when `None`), priority descending, and how many there are.
    async fn list_rules(
        &self,
        org: OrgId,
        facets: Option<&[Facet]>,
        page: Page,
    ) -> StoreResult<(Vec<Rule>, u64)>;

    /// Every rule of `org` with its source, in cascade order (bundles).
    async fn all_rules(&self, org: OrgId) -> StoreResult<Vec<Rule>>;

    /// Writes every mutable field of `rule` (matched by id within `org`);
    /// `None` if there is no such rule.
    async fn replace_rule(
        &self,
        org: OrgId,
        rule: &Rule,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Rule>>;

    /// Deletes rule `id`; `false` if there was none.
    async fn delete_rule(&self, org: OrgId, id: RuleId) -> StoreResult<bool>;

    /// Sets the bypass state of rule `id` and writes `audit`, in one
    /// transaction; `None` if there is no such rule.
    async fn set_bypass(
        &self,
        org: OrgId,
        id: RuleId,
        bypass: &Bypass,
        audit: AuditEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Rule>>;

    /// The settings of `org`, created with the defaults if missing; `true`
    /// when this call created them.
    async fn ensure_settings(
        &self,
        org: OrgId,
        now: DateTime<Utc>,
    ) -> StoreResult<(Settings, bool)>;

    /// Replaces the settings document of `org` (which must exist).
    async fn save_settings(
        &self,
        org: OrgId,
        doc: &SettingsDoc,
        now: DateTime<Utc>,
    ) -> StoreResult<Settings>;

    /// Inserts an agent; `Conflict` when `agent_id` exists in `org` (even
    /// shut down).
    async fn insert_agent(
        &self,
        org: OrgId,
        agent_id: &str,
        mode: Option<AgentMode>,
        doc: &AgentDoc,
        now: DateTime<Utc>,
    ) -> StoreResult<Agent>;

    /// Inserts the agent if `agent_id` is unknown in `org`; returns the row
    /// either way (auto-provisioning and registration).
    async fn provision_agent(
        &self,
        org: OrgId,
        agent_id: &str,
        mode: Option<AgentMode>,
        doc: &AgentDoc,
        now: DateTime<Utc>,
    ) -> StoreResult<Agent>;

    /// The agent with row id `id` (shut-down ones included).
    async fn agent(&self, org: OrgId, id: Uuid) -> StoreResult<Option<Agent>>;

    /// The agent whose logical id is `agent_id` (shut-down ones included).
    async fn agent_by_agent_id(&self, org: OrgId, agent_id: &str) -> StoreResult<Option<Agent>>;

    /// Live agents of `org`, newest first, and how many there are.
    async fn list_agents(&self, org: OrgId, page: Page) -> StoreResult<(Vec<Agent>, u64)>;

    /// Writes `mode`, `doc` and `deleted_at` of agent `id`; `None` if missing.
    async fn save_agent(
        &self,
        org: OrgId,
        id: Uuid,
        mode: Option<AgentMode>,
        doc: &AgentDoc,
        deleted_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Agent>>;

    /// A number that changes whenever any rule of `org` changes (policy
    /// caches compare it).
    async fn rules_revision(&self, org: OrgId) -> StoreResult<i64>;

    /// The action decision `id` of `org`.
    async fn action_decision(&self, org: OrgId, id: Uuid) -> StoreResult<Option<ActionDecision>>;

    /// Stores a retrieval decision and its escalation item together.
    async fn insert_retrieval_with_hitl(
        &self,
        d: &RetrievalDecision,
        item: &HitlItem,
    ) -> StoreResult<()>;

    /// Commits a batch of decisions, and the approval gates of some, in one
    /// transaction (the group commit of the decision sink). `Ok` means
    /// committed; the batch is durable once the returned [`Flush`] resolves.
    /// The batch is shared so that a backend may hand it to its own writer
    /// thread, which lets go of it before answering.
    async fn commit_decisions(&self, batch: Arc<DecisionBatch>) -> StoreResult<Flush>;

    /// Commits a batch (see [`Store::commit_decisions`]) and waits until it
    /// is durable.
    async fn insert_decisions(&self, batch: Arc<DecisionBatch>) -> StoreResult<()> {
        self.commit_decisions(batch).await?.wait().await
    }

    /// Inserts a queue item; with a `dedupe_key` already present, returns
    /// `false` and inserts nothing.
    async fn insert_hitl(&self, item: &HitlItem) -> StoreResult<bool>;

    /// The queue item `id` of `org`.
    async fn hitl(&self, org: OrgId, id: Uuid) -> StoreResult<Option<HitlItem>>;

    /// The queue item of decision `decision_id`.
    async fn hitl_for_decision(
        &self,
        org: OrgId,
        decision_id: Uuid,
    ) -> StoreResult<Option<HitlItem>>;

    /// Items of `org` with `status`: pending ones oldest first, others
    /// newest first; and how many there are.
    async fn list_hitl(
        &self,
        org: OrgId,
        status: &str,
        page: Page,
    ) -> StoreResult<(Vec<HitlItem>, u64)>;

    /// Resolves a pending item (and its decision's `hitl_*` fields) in one
    /// transaction; `false` if it was not pending.
    async fn resolve_hitl(
        &self,
        org: OrgId,
        id: Uuid,
        status: &str,
        responded_by: Option<&str>,
        resolution: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// Moves every pending item of `org` whose window lapsed to `timeout`
    /// (and its decision's `hitl_result`).
    async fn expire_hitl(&self, org: OrgId, now: DateTime<Utc>) -> StoreResult<()>;

    /// Records where an item was announced.
    async fn set_notified(&self, org: OrgId, id: Uuid, via: &[String]) -> StoreResult<()>;

    /// Ingests reported decisions in one transaction: each decision once
    /// (a re-sent id is ignored), a coverage-gap item per new dedupe key,
    /// and the app/action pairs. Returns how many pairs were new.
    async fn ingest_telemetry(
        &self,
        org: OrgId,
        decisions: &[ActionDecision],
        gaps: &[HitlItem],
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;

    /// Records a decision's execution outcome once: `Ok(true)` when stored,
    /// `Ok(false)` when it already had one, `NotFound`-like `None` when the
    /// decision does not exist.
    async fn record_execution(
        &self,
        org: OrgId,
        id: Uuid,
        result: &str,
        details: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<bool>>;

    /// Action decisions of `org` matching `filter`, newest first, and the total.
    async fn action_log(
        &self,
        org: OrgId,
        filter: &AuditFilter,
        page: Page,
    ) -> StoreResult<(Vec<ActionDecision>, u64)>;

    /// Retrieval decisions of `org` matching `filter`, newest first, and the total.
    async fn retrieval_log(
        &self,
        org: OrgId,
        filter: &AuditFilter,
        page: Page,
    ) -> StoreResult<(Vec<RetrievalDecision>, u64)>;

    /// Whether this process hears the writes and mode changes of the other
    /// replicas sharing its database (always, for a backend without replicas).
    fn hears_replicas(&self) -> bool {
        true
    }

    /// Announces a mode change to every replica sharing this database;
    /// `false` when the backend cannot (then only this process is told).
    async fn announce_mode(&self, _event: &ModeEvent) -> StoreResult<bool> {
        Ok(false)
    }

    /// Starts listening to the replicas sharing this database: their mode
    /// announcements go into `bus`, and their writes empty this process's
    /// read cache. A no-op for backends without replicas; a backend with
    /// replicas does not cache reads until it listens.
    fn listen(&self, _bus: tokio::sync::broadcast::Sender<ModeEvent>) {}

    /// Claims `key` for a request with `request_hash`, in flight from `now`
    /// until done or `expires_at`.
    async fn idem_claim(
        &self,
        key: IdemKey<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<IdemClaim>;

    /// Takes `key` over for a new request when it is expired (at `now`) or
    /// held by a request started before `abandoned_before`; `false` if it is not.
    async fn idem_take_over(
        &self,
        key: IdemKey<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
        abandoned_before: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// Stores the response of the request holding `key`.
    async fn idem_finish(
        &self,
        key: IdemKey<'_>,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> StoreResult<()>;

    /// Frees `key` (the request failed with a 5xx or 429).
    async fn idem_release(&self, key: IdemKey<'_>) -> StoreResult<()>;
}

/// Opens the store a database URL names: `sqlite:…` or `postgres://…`, and
/// runs its migrations.
pub async fn open(url: &str) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::open(url).await?))
    } else {
        Ok(Arc::new(SqliteStore::open(url).await?))
    }
}
