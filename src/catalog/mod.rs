//! The rules of the catalog: names, modes, locations, listing, renames, and the order of
//! writes that keeps many gateways over one warehouse consistent. It speaks in ids and
//! records, never in HTTP or S3 terms.
//!
//! Invariants, held with nothing but the store's single-object conditional writes (the
//! whole protocol, with why each step is safe, is in `docs/consistency.md`):
//! - **A visible record is a whole record**, and every change becomes visible in one
//!   conditional write: the *linearization point* of each operation.
//! - **Every multi-step operation is decided by one object.** A create or rename reserves
//!   its target name with an entry at the name's pending key; a drop writes an intent under
//!   `drops/`. The entry is `prepared` until the operation commits (a conditional write on
//!   the entry, or, on a store that moves objects, the move that publishes the staged
//!   record); anyone who finds it abandoned rolls it back with a conditional delete of the
//!   same entry. Exactly one of the two wins, whatever the timing, so an operation that
//!   committed is only ever finished (rolled forward) and one that did not is only ever
//!   undone.
//! - **A record being removed is marked first** with the operation's id; whoever wants to
//!   change a marked record asks the operation's intent first, so two removals of one table
//!   never both proceed, and a removal never proceeds on a table someone else committed to
//!   move.
//! - **No table or namespace under a namespace that is gone.** A create reserves its name
//!   under the parent before it checks the parent; a namespace drop marks the namespace
//!   before it looks at what is reserved or published under it.
//! - **No two tables share or nest their data**: each table claims its data folder.
//! - **Rivals are told the truth.** A request that meets an operation in flight on the same
//!   name waits briefly for its outcome, then answers ConcurrentModification (409, code 14),
//!   never a state readers cannot see.

pub mod authorize;
pub mod backup;
pub mod batch;
pub mod claims;
pub mod commits;
pub mod dropped;
pub mod fsck;
pub mod idempotency;
pub mod intents;
pub mod layout;
pub mod leases;
pub mod listing;
pub mod log;
pub mod maintenance;
pub mod modes;
pub mod names;
pub mod namespaces;
pub mod own_commits;
pub mod policy;
pub mod records;
pub mod recovery;
pub mod tables;
pub mod transactions;
pub mod upgrade;
pub mod versions;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use self::layout::Layout;
use self::names::join;
use self::records::*;
use crate::access::Grants;
use crate::error::{Error, Result};
use crate::store::{Condition, Object, Store, StoreError};

pub use self::listing::Listing;
pub use self::modes::{CreateMode, DropBehavior, DropMode};

/// Reads the parts of a dataset the catalog reports but does not own (version, schema).
#[async_trait]
pub trait DatasetReader: Send + Sync {
    async fn describe(&self, location: &str) -> Result<DatasetDetails>;
}

#[derive(Clone, Debug, Default)]
pub struct DatasetDetails {
    pub version: i64,
    pub schema: Option<lance_namespace::models::JsonArrowSchema>,
    pub num_deleted_rows: i64,
    pub num_fragments: i64,
    pub metadata: std::collections::HashMap<String, String>,
}

/// How a catalog runs beside others over one warehouse.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long an operation may be in flight before others treat it as abandoned and settle
    /// it. Its owner does the steps that are not conditional writes (publishing a record
    /// from a committed intent, deleting a dropped table's data) only in the first half.
    pub grace: Duration,
    /// This gateway's name in the intents it writes. A gateway restarted under the same
    /// name settles at once what its earlier run left unfinished.
    pub node: String,
    /// Who may do what (everyone everything, unless a grants file is configured).
    pub grants: Arc<Grants>,
    /// Whether clients commit versions through the gateway (`versions`).
    pub managed_versioning: bool,
    /// The maintenance policy of tables whose properties do not override it.
    pub maintenance: policy::Policy,
    /// How long a commit may wait for one batch holding a table it needs (twice that for
    /// all the batches ahead of it), and for the store to say whether its deciding write
    /// landed (`batch`): a quarter of the grace period, at most 10 s, and at most a quarter
    /// of the request timeout where one is set, so the three waits end within the request.
    pub commit_wait: Duration,
}

impl Settings {
    pub fn new(grace: Duration, node: impl Into<String>) -> Self {
        Settings {
            grace,
            node: node.into(),
            grants: Arc::new(Grants::open()),
            managed_versioning: false,
            maintenance: policy::Policy::default(),
            commit_wait: (grace / 4).min(Duration::from_secs(10)),
        }
    }

    /// Bounds `commit_wait` by a quarter of the request timeout, so a commit that waits
    /// still answers within its request.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.commit_wait = self.commit_wait.min(timeout / 4);
        self
    }

    pub fn with_maintenance(mut self, policy: policy::Policy) -> Self {
        self.maintenance = policy;
        self
    }

    pub fn with_grants(mut self, grants: Arc<Grants>) -> Self {
        self.grants = grants;
        self
    }

    pub fn with_managed_versioning(mut self, on: bool) -> Self {
        self.managed_versioning = on;
        self
    }
}

/// How long a request waits for a rival operation on the same name to finish before it
/// answers ConcurrentModification (at most a quarter of the grace period).
const RIVAL_WAIT: Duration = Duration::from_secs(2);

/// Waits with growing pauses until a deadline.
pub(crate) struct Patience {
    deadline: Instant,
    pause: Duration,
}

impl Patience {
    fn new(wait: Duration) -> Self {
        Patience {
            deadline: Instant::now() + wait,
            pause: Duration::from_millis(5),
        }
    }

    /// Sleeps a little and returns true, or returns false once the deadline has passed.
    pub(crate) async fn wait(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.pause.min(self.deadline - now)).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(100));
        true
    }
}

/// Where a namespace's record is kept.
pub(crate) enum Slot {
    /// The root: always exists, has no record.
    Root,
    /// A level-1 namespace in endpoint mode: the bucket's `catalog.json`.
    Cell(String),
    /// Any other namespace.
    Plain(String),
}

pub struct Catalog {
    store: Arc<dyn Store>,
    layout: Layout,
    datasets: Arc<dyn DatasetReader>,
    grace_ms: u64,
    /// `Settings::commit_wait`.
    commit_wait: Duration,
    node: String,
    grants: Arc<Grants>,
    managed_versioning: bool,
    /// When this run opened the catalog: entries this node started before belong to an
    /// earlier run, which is gone.
    started_ms: u64,
    /// The delimiter used in messages.
    delim: &'static str,
    /// Managed tables' versions as this gateway has seen them (`commits`).
    pub(crate) watch: commits::Watch,
    /// Told of every version this gateway commits or publishes (maintenance's scheduler).
    commit_listener: std::sync::OnceLock<CommitListener>,
    /// The maintenance policy tables have unless their properties say otherwise.
    maintenance: policy::Policy,
    /// Whether the data plane commits through the log (`own_commits::OwnCommits`).
    own_commits: std::sync::atomic::AtomicBool,
    /// Work requests left to run after their answers (`after_answer`).
    after_answers: std::sync::Mutex<tokio::task::JoinSet<()>>,
    /// The warehouse formats read so far (`upgrade`).
    formats: upgrade::Formats,
}

/// Called with a table's record each time this gateway commits a version of it.
pub type CommitListener = Arc<dyn Fn(&TableRecord) + Send + Sync>;

/// How many records a listing without a limit returns per store round trip.
pub(crate) const PAGE: usize = 1000;

impl Catalog {
    /// Runs `work` after the request's answer (removing a staged entry, writing a receipt,
    /// deleting a staging manifest): the client need not wait for it, but a graceful stop
    /// does (`finish_after_answers`), so a stop right after an answer leaves nothing for
    /// recovery or fsck to find.
    pub(crate) fn after_answer(&self, work: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self
            .after_answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        // Fault injection (the suites' stop test): the work starts this much later.
        static DELAY: std::sync::LazyLock<Option<std::time::Duration>> =
            std::sync::LazyLock::new(|| {
                std::env::var("LANCE_GATEWAY_FAULT_AFTER_ANSWER_DELAY_MS")
                    .ok()
                    .and_then(|ms| ms.parse().ok())
                    .map(std::time::Duration::from_millis)
            });
        let delay = *DELAY;
        tasks.spawn(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            work.await
        });
    }

    /// Waits for the work requests left after their answers, including work added while it
    /// waits. A graceful stop bounds the wait; what is still running then is stopped with the
    /// process, and recovery finishes it, as after a crash.
    pub async fn finish_after_answers(&self) {
        loop {
            let mut tasks = std::mem::take(
                &mut *self
                    .after_answers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if tasks.is_empty() {
                return;
            }
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Opens the catalog, writing the cell record of a directory or bucket-prefix warehouse
    /// on first use and refusing a warehouse written in a newer format.
    pub async fn open(
        store: Arc<dyn Store>,
        layout: Layout,
        datasets: Arc<dyn DatasetReader>,
        settings: Settings,
    ) -> Result<Self> {
        let catalog = Catalog {
            store,
            layout,
            datasets,
            grace_ms: settings.grace.as_millis() as u64,
            commit_wait: settings.commit_wait,
            node: settings.node,
            grants: settings.grants,
            managed_versioning: settings.managed_versioning,
            started_ms: now_ms(),
            delim: "$",
            watch: commits::Watch::default(),
            commit_listener: std::sync::OnceLock::new(),
            maintenance: settings.maintenance,
            own_commits: std::sync::atomic::AtomicBool::new(false),
            after_answers: std::sync::Mutex::new(tokio::task::JoinSet::new()),
            formats: upgrade::Formats::default(),
        };
        if !catalog.layout.endpoint_mode() {
            let key = Layout::cell_record("");
            // A new warehouse has no gateway of an older release beside it: it starts at
            // the newest format (`upgrade`).
            let record = CellRecord {
                format_version: FORMAT_VERSION,
                created_at_ms: now_ms(),
                namespace: None,
                warehouse_format: Some(WRITES_UP_TO),
            };
            // The store may not be up yet (a sidecar starting beside its S3 server): then the
            // record is written by the first create, and /readyz reports the store meanwhile.
            // Looked for first: opening an existing warehouse writes nothing.
            let exists = matches!(catalog.store.get(&key).await, Ok(Some(_)));
            let put = if exists {
                Err(StoreError::PreconditionFailed)
            } else {
                catalog
                    .store
                    .put(&key, encode(&record), Condition::IfAbsent)
                    .await
            };
            match put {
                Ok(_) | Err(StoreError::PreconditionFailed) => {
                    if let Some(obj) = catalog.store.get(&key).await? {
                        decode::<CellRecord>(&key, &obj.body)?;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the warehouse is not reachable yet"),
            }
        }
        Ok(catalog)
    }

    /// Whether clients are told to commit versions through the gateway.
    pub fn managed_versioning(&self) -> bool {
        self.managed_versioning
    }

    /// Has `listener` told of every version this gateway commits from now on (once).
    pub fn listen_for_commits(&self, listener: CommitListener) {
        let _ = self.commit_listener.set(listener);
    }

    /// Tells the listener that this gateway committed a version of `record`'s table.
    pub(crate) fn commit_seen(&self, record: &TableRecord) {
        if let Some(listener) = self.commit_listener.get() {
            listener(record);
        }
    }

    /// The maintenance policy tables have by default.
    pub fn default_policy(&self) -> &policy::Policy {
        &self.maintenance
    }

    /// Every key under `prefix`, in order, read a page at a time (`shallow`: direct
    /// children only, see `Store::list`).
    pub(crate) async fn all_keys(&self, prefix: &str, shallow: bool) -> Result<Vec<String>> {
        use futures::TryStreamExt;
        self.key_pages(prefix, shallow).try_concat().await
    }

    /// The keys under `prefix`, a page (`PAGE` keys) at a time, in key order: a walk that
    /// looks at each page before listing the next holds one page, not the whole listing.
    pub(crate) fn key_pages<'a>(
        &'a self,
        prefix: &'a str,
        shallow: bool,
    ) -> impl futures::Stream<Item = Result<Vec<String>>> + 'a {
        // The state: where the next page starts, or None once the listing has ended.
        futures::stream::try_unfold(Some(None::<String>), move |next| async move {
            let Some(after) = next else {
                return Ok(None);
            };
            let page = self
                .store
                .list(prefix, after.as_deref(), PAGE, shallow)
                .await?;
            let next = match page.keys.last() {
                Some(last) if page.more => Some(Some(last.clone())),
                _ => None,
            };
            Ok(Some((page.keys, next)))
        })
    }

    /// Every key under `prefix` with its ETag, page by page.
    pub(crate) async fn all_keys_with_etags(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .list_with_etags(prefix, after.as_deref(), PAGE, false)
                .await?;
            after = page.keys.last().cloned();
            out.extend(page.keys.into_iter().zip(page.etags));
            if !page.more || after.is_none() {
                return Ok(out);
            }
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms)
    }

    pub async fn ready(&self) -> Result<()> {
        self.store.check().await.map_err(|e| {
            Error::unavailable("the warehouse store is not reachable").with_detail(e.to_string())
        })
    }

    /// A fresh wait for a rival operation.
    pub(crate) fn patience(&self) -> Patience {
        Patience::new(RIVAL_WAIT.min(Duration::from_millis(self.grace_ms / 4)))
    }

    pub(crate) fn show(&self, id: &[String]) -> String {
        join(id, self.delim)
    }

    fn stale(&self, since_ms: u64) -> bool {
        now_ms().saturating_sub(since_ms) > self.grace_ms
    }

    /// Whether an operation may be settled by whoever finds it: nobody has driven it since
    /// `alive_ms` for the grace period, or this node started it (at `started_ms`) in an
    /// earlier run, which is gone.
    pub(crate) fn settleable(&self, owner: Option<&str>, started_ms: u64, alive_ms: u64) -> bool {
        self.stale(alive_ms) || (owner == Some(self.node.as_str()) && started_ms < self.started_ms)
    }

    /// Whether the owner of an operation started at `started_ms` may still do its steps
    /// that are not conditional writes. Past this, they are left to a settler, who starts
    /// only once the operation is stale: a step sent in time has the other half of the grace
    /// period to land.
    pub(crate) fn owner_in_time(&self, started_ms: u64) -> bool {
        now_ms().saturating_sub(started_ms) <= self.grace_ms / 2
    }

    pub(crate) async fn read<T: for<'de> serde::Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Option<(T, String)>> {
        match self.store.get(key).await {
            Ok(Some(Object { body, etag })) => Ok(Some((decode(key, &body)?, etag))),
            Ok(None) | Err(StoreError::NoSuchBucket(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the entry at a pending key or under `drops/`.
    pub(crate) async fn read_entry(&self, key: &str) -> Result<Option<(Entry, String)>> {
        let kind = Layout::entry_kind(key);
        match self.store.get(key).await {
            Ok(Some(Object { body, etag })) => Ok(Some((Entry::decode(key, kind, &body)?, etag))),
            Ok(None) | Err(StoreError::NoSuchBucket(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A conditional write whose outcome is known even when the store's answer is lost
    /// (`intents::write_known`).
    pub(crate) async fn write(
        &self,
        key: &str,
        body: Bytes,
        cond: Condition,
    ) -> Result<String, StoreError> {
        intents::write_known(&*self.store, key, body, cond).await
    }

    /// Deletes the object at `key` if it is still at `etag`. `Ok(true)` when this delete
    /// removed it (or it went and the store's answer was lost), `Ok(false)` when the object
    /// changed first.
    pub(crate) async fn remove(&self, key: &str, etag: &str) -> Result<bool, StoreError> {
        match self
            .store
            .delete(key, Condition::IfMatch(etag.to_string()))
            .await
        {
            Ok(()) => Ok(true),
            Err(StoreError::PreconditionFailed) => Ok(false),
            Err(e) => match self.store.get(key).await {
                Ok(None) => Ok(true),
                Ok(Some(obj)) if obj.etag != etag => Ok(false),
                _ => Err(e),
            },
        }
    }

    /// The key of a namespace's record.
    pub(crate) fn slot(&self, id: &[String]) -> Result<Slot> {
        if id.is_empty() {
            return Ok(Slot::Root);
        }
        if self.layout.endpoint_mode() && id.len() == 1 {
            layout::validate_bucket(&id[0])?;
            return Ok(Slot::Cell(Layout::cell_record(&format!("{}/", id[0]))));
        }
        let placed = self.layout.place(id)?;
        Ok(Slot::Plain(Layout::namespace_key(&placed)))
    }

    pub(crate) fn split_table<'a>(&self, id: &'a [String]) -> Result<(&'a [String], &'a String)> {
        let (name, parent) = id
            .split_last()
            .ok_or_else(|| Error::invalid("a table id needs at least a name"))?;
        if self.layout.endpoint_mode() && parent.is_empty() {
            return Err(Error::invalid(
                "in endpoint mode a table id starts with its bucket: [bucket, namespace..., table]",
            ));
        }
        Ok((parent, name))
    }

    pub fn table_key(&self, id: &[String]) -> Result<String> {
        let (parent, name) = self.split_table(id)?;
        Ok(Layout::table_key(&self.layout.place(parent)?, name))
    }

    /// The pending key that reserves table name `id`.
    pub fn table_pending_key(&self, id: &[String]) -> Result<String> {
        let (parent, name) = self.split_table(id)?;
        Ok(Layout::pending_table_key(&self.layout.place(parent)?, name))
    }
}
