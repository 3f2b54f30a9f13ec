//! The read cache: what every evaluation reads before it decides (the key
//! by its hash, the agent, the organization's settings and its rules
//! revision), kept in memory so that the hot path does not ask the
//! database four questions per request.
//!
//! Correctness rests on three rules:
//! - **Every write that changes one of these forgets its organization**
//!   (`forget`), after its commit. The backends call it from each such
//!   method; PostgreSQL also tells every other replica (`NOTIFY`), whose
//!   listener forgets the organization there too.
//! - **A read that raced with a write is not cached.** A reader takes a
//!   ticket (the write counter) before it asks the database and fills the
//!   cache only if no write happened since; otherwise it answers uncached.
//! - **Nothing is trusted for long**: an entry older than [`MAX_AGE`] is
//!   read again, so a change the process was not told about (another
//!   process writing the same SQLite file, a lost notification) is seen
//!   within that bound, plus the time of that one read (at most
//!   [`REFRESH_GRACE`]). PostgreSQL's cache is off while its listener is
//!   not connected (`set_live`), and emptied whenever the listener drops.
//!
//! **One reader refreshes an aged entry.** The first reader to find an
//! entry past [`MAX_AGE`] reads the database again; until its answer fills
//! the cache (or [`REFRESH_GRACE`] passes), the other readers keep getting
//! the aged entry. Without this, every request that arrived while the entry
//! was being read went to the database too: under `scripts/load-evaluate`,
//! about a hundred reads of the same agent a second, in bursts, each one a
//! round trip to the database's connection thread. An entry a write made
//! stale (`forget`) is never served: that rule is not relaxed.
//!
//! Negative answers are cached for agents (an unknown agent's retrieval)
//! but never for keys: a flood of wrong keys must not evict right ones.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Agent, ApiKey, OrgId, Settings};

/// The longest an entry is used without reading it again.
pub(super) const MAX_AGE: Duration = Duration::from_secs(1);

/// How long the other readers are given an aged entry while one reader
/// reads it again; past this, the next reader tries too (the first may
/// have failed).
pub(super) const REFRESH_GRACE: Duration = Duration::from_millis(100);

/// The cache empties itself past this many entries of one kind.
const MAX_ENTRIES: usize = 100_000;

/// The write counter when a read began; see [`ReadCache::ticket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket(u64);

/// The read cache of one store.
#[derive(Debug)]
pub(super) struct ReadCache {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    live: bool,
    /// Bumped by every `forget` and `flush`.
    writes: u64,
    /// The write counter at each organization's last change.
    changed: HashMap<OrgId, u64>,
    keys: HashMap<String, Entry<ApiKey>>,
    agents: HashMap<(OrgId, String), Entry<Option<Agent>>>,
    settings: HashMap<OrgId, Entry<Settings>>,
    revisions: HashMap<OrgId, Entry<i64>>,
}

#[derive(Debug)]
struct Entry<T> {
    org: OrgId,
    /// The organization's change counter when the entry was filled.
    version: u64,
    at: Instant,
    /// When a reader set out to read this aged entry again.
    refreshing: Option<Instant>,
    value: T,
}

/// `org`'s change counter: 0 until its first write.
fn version(changed: &HashMap<OrgId, u64>, org: OrgId) -> u64 {
    changed.get(&org).copied().unwrap_or(0)
}

impl<T: Clone> Entry<T> {
    /// The value, if a reader may use it: fresh, or aged while another
    /// reader reads it again. The first reader to find it aged gets `None`
    /// and is expected to read the database and fill the cache.
    fn serve(&mut self, live: bool, changed: &HashMap<OrgId, u64>) -> Option<T> {
        if !live || self.version != version(changed, self.org) {
            return None;
        }
        if self.at.elapsed() < MAX_AGE {
            return Some(self.value.clone());
        }
        match self.refreshing {
            Some(since) if since.elapsed() < REFRESH_GRACE => Some(self.value.clone()),
            _ => {
                self.refreshing = Some(Instant::now());
                None
            }
        }
    }
}

impl Inner {
    /// Whether a read that took `ticket` may fill the cache now.
    fn admits(&self, ticket: Ticket) -> bool {
        self.live && self.writes == ticket.0
    }

    fn entry<T>(&self, org: OrgId, value: T) -> Entry<T> {
        Entry {
            org,
            version: version(&self.changed, org),
            at: Instant::now(),
            refreshing: None,
            value,
        }
    }

    fn clear(&mut self) {
        self.writes += 1;
        self.changed.clear();
        self.keys.clear();
        self.agents.clear();
        self.settings.clear();
        self.revisions.clear();
    }

    fn crowded(&self) -> bool {
        self.keys.len() >= MAX_ENTRIES
            || self.agents.len() >= MAX_ENTRIES
            || self.settings.len() >= MAX_ENTRIES
            || self.revisions.len() >= MAX_ENTRIES
    }
}

impl ReadCache {
    /// A cache that serves at once (`live`) or only after [`ReadCache::set_live`].
    pub(super) fn new(live: bool) -> ReadCache {
        ReadCache {
            inner: Mutex::new(Inner {
                live,
                writes: 0,
                changed: HashMap::new(),
                keys: HashMap::new(),
                agents: HashMap::new(),
                settings: HashMap::new(),
                revisions: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns the cache on, or off and empty (a PostgreSQL listener that is
    /// not connected cannot hear other replicas' writes).
    pub(super) fn set_live(&self, live: bool) {
        let mut inner = self.lock();
        inner.clear();
        inner.live = live;
    }

    /// Whether the cache serves (for PostgreSQL: its listener is connected).
    pub(super) fn is_live(&self) -> bool {
        self.lock().live
    }

    /// Forgets everything.
    pub(super) fn flush(&self) {
        self.lock().clear();
    }

    /// Forgets everything cached for `org`: call after a write commits.
    pub(super) fn forget(&self, org: OrgId) {
        let mut inner = self.lock();
        inner.writes += 1;
        let writes = inner.writes;
        inner.changed.insert(org, writes);
    }

    /// Take before reading the database; pass to the `fill_*` call after.
    pub(super) fn ticket(&self) -> Ticket {
        Ticket(self.lock().writes)
    }

    fn fill(&self, ticket: Ticket, put: impl FnOnce(&mut Inner)) {
        let mut inner = self.lock();
        if !inner.admits(ticket) {
            return;
        }
        if inner.crowded() {
            inner.clear();
            return;
        }
        put(&mut inner);
    }

    pub(super) fn key(&self, hash: &str) -> Option<ApiKey> {
        let inner = &mut *self.lock();
        inner.keys.get_mut(hash)?.serve(inner.live, &inner.changed)
    }

    pub(super) fn fill_key(&self, ticket: Ticket, key: &ApiKey) {
        self.fill(ticket, |inner| {
            let e = inner.entry(key.org, key.clone());
            inner.keys.insert(key.hash.clone(), e);
        });
    }

    /// `Some(None)`: known not to exist.
    pub(super) fn agent(&self, org: OrgId, agent_id: &str) -> Option<Option<Agent>> {
        let inner = &mut *self.lock();
        let e = inner.agents.get_mut(&(org, agent_id.to_owned()))?;
        e.serve(inner.live, &inner.changed)
    }

    pub(super) fn fill_agent(
        &self,
        ticket: Ticket,
        org: OrgId,
        agent_id: &str,
        agent: Option<&Agent>,
    ) {
        self.fill(ticket, |inner| {
            let e = inner.entry(org, agent.cloned());
            inner.agents.insert((org, agent_id.to_owned()), e);
        });
    }

    pub(super) fn settings(&self, org: OrgId) -> Option<Settings> {
        let inner = &mut *self.lock();
        inner
            .settings
            .get_mut(&org)?
            .serve(inner.live, &inner.changed)
    }

    pub(super) fn fill_settings(&self, ticket: Ticket, org: OrgId, settings: &Settings) {
        self.fill(ticket, |inner| {
            let e = inner.entry(org, settings.clone());
            inner.settings.insert(org, e);
        });
    }

    pub(super) fn revision(&self, org: OrgId) -> Option<i64> {
        let inner = &mut *self.lock();
        inner
            .revisions
            .get_mut(&org)?
            .serve(inner.live, &inner.changed)
    }

    pub(super) fn fill_revision(&self, ticket: Ticket, org: OrgId, revision: i64) {
        self.fill(ticket, |inner| {
            let e = inner.entry(org, revision);
            inner.revisions.insert(org, e);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org() -> OrgId {
        OrgId(uuid::Uuid::new_v4())
    }

    #[test]
    fn serves_what_was_filled_until_the_organization_changes() {
        let cache = ReadCache::new(true);
        let (a, b) = (org(), org());
        let t = cache.ticket();
        cache.fill_revision(t, a, 7);
        cache.fill_revision(t, b, 9);
        assert_eq!(cache.revision(a), Some(7));
        cache.forget(a);
        assert_eq!(cache.revision(a), None);
        // Another organization's write leaves b's entry alone.
        assert_eq!(cache.revision(b), Some(9));
    }

    /// Guards the read/write race: a read that began before a write
    /// committed must not put its (old) answer in the cache after it.
    #[test]
    fn a_read_that_raced_a_write_is_not_cached() {
        let cache = ReadCache::new(true);
        let a = org();
        let t = cache.ticket();
        cache.forget(org());
        cache.fill_revision(t, a, 1);
        assert_eq!(cache.revision(a), None);
    }

    #[test]
    fn an_idle_cache_serves_nothing() {
        let cache = ReadCache::new(false);
        let a = org();
        cache.fill_revision(cache.ticket(), a, 1);
        assert_eq!(cache.revision(a), None);
        cache.set_live(true);
        cache.fill_revision(cache.ticket(), a, 2);
        assert_eq!(cache.revision(a), Some(2));
        cache.set_live(false);
        assert_eq!(cache.revision(a), None);
    }

    /// A cache whose revision entry for the returned organization aged past
    /// [`MAX_AGE`] and was just claimed for a refresh by a first reader
    /// (which got `None`).
    fn claimed() -> (ReadCache, OrgId) {
        let cache = ReadCache::new(true);
        let a = org();
        cache.fill_revision(cache.ticket(), a, 1);
        cache.lock().revisions.get_mut(&a).unwrap().at =
            Instant::now().checked_sub(MAX_AGE).unwrap();
        assert_eq!(cache.revision(a), None, "the first reader refreshes");
        (cache, a)
    }

    // Guards the single refresh: the readers that find an aged entry while
    // the first one reads it again must not all go to the database.
    #[test]
    fn one_reader_refreshes_an_aged_entry_while_the_others_keep_it() {
        let (cache, a) = claimed();
        // While the first reader reads the database, the others keep the
        // aged value...
        assert_eq!(cache.revision(a), Some(1));
        assert_eq!(cache.revision(a), Some(1));
        // ...until the first one's answer replaces it.
        cache.fill_revision(cache.ticket(), a, 2);
        assert_eq!(cache.revision(a), Some(2));
    }

    #[test]
    fn a_refresh_that_never_fills_is_tried_again_after_the_grace() {
        let (cache, a) = claimed();
        // The first reader gave up; past the grace, the next one tries.
        let since = Instant::now().checked_sub(REFRESH_GRACE).unwrap();
        cache.lock().revisions.get_mut(&a).unwrap().refreshing = Some(since);
        assert_eq!(cache.revision(a), None);
        assert_eq!(cache.revision(a), Some(1));
    }

    #[test]
    fn an_aged_entry_that_a_write_made_stale_is_never_served() {
        let (cache, a) = claimed();
        cache.forget(a);
        // Another reader during the refresh: the write wins over the grace.
        assert_eq!(cache.revision(a), None);
    }

    #[test]
    fn unknown_agents_are_remembered_as_unknown() {
        let cache = ReadCache::new(true);
        let a = org();
        assert_eq!(cache.agent(a, "x").map(|o| o.is_none()), None);
        cache.fill_agent(cache.ticket(), a, "x", None);
        assert_eq!(cache.agent(a, "x").map(|o| o.is_none()), Some(true));
    }
}
