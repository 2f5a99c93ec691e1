//! The rules of the catalog: names, modes, locations, listing, renames, and the order of
//! writes that keeps many gateways over one warehouse consistent. It speaks in ids and
//! records, never in HTTP or S3 terms.
//!
//! Invariants, held with nothing but the store's single-object conditional writes:
//! - **A visible record is a whole record.** Namespaces and tables appear by one create-if-absent
//!   of their record; nothing half-made is ever readable.
//! - **No table or namespace under a namespace that is gone.** A create first writes a
//!   *pending* entry under the parent, then checks that the parent exists and is not being
//!   dropped, and only then publishes its record (and then removes the pending entry). A drop
//!   first marks the namespace (one conditional write), then lists its pending entries, then
//!   its records, then deletes it only if the mark is still its own. Whichever interleaving,
//!   the drop sees the create (as pending or as published) or the create sees the mark.
//! - **No two tables share or nest their data.** Each table claims its data folder; a claim is
//!   refused when an ancestor or descendant folder is claimed.
//! - **A crash loses nothing.** Every multi-step operation is bracketed by an intent record
//!   (pending or drop). `recovery` finishes or undoes intents older than the grace period,
//!   so whatever a crashed gateway left half-done is settled by any other.

pub mod layout;
pub mod names;
pub mod records;
pub mod recovery;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::join_all;

use self::layout::Layout;
use self::names::{Id, join};
use self::records::*;
use crate::error::{Code, Error, Result};
use crate::store::{Condition, Object, Store, StoreError};

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

/// How CreateNamespace treats an existing namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    Create,
    ExistOk,
    Overwrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropMode {
    Fail,
    Skip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropBehavior {
    Restrict,
    Cascade,
}

/// Folds the spellings clients use (`ExistOk`, `exist_ok`, `EXIST_OK`) into one word.
fn fold(mode: &str) -> String {
    mode.chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect::<String>()
        .to_ascii_lowercase()
}

impl CreateMode {
    pub fn parse(mode: Option<&str>) -> Result<Self> {
        match mode.map(fold).as_deref() {
            None | Some("") | Some("create") => Ok(CreateMode::Create),
            Some("existok") => Ok(CreateMode::ExistOk),
            Some("overwrite") => Ok(CreateMode::Overwrite),
            Some(_) => Err(Error::invalid(format!(
                "unknown mode '{}': use Create, ExistOk or Overwrite",
                mode.unwrap_or_default()
            ))),
        }
    }
}

impl DropMode {
    pub fn parse(mode: Option<&str>) -> Result<Self> {
        match mode.map(fold).as_deref() {
            None | Some("") | Some("fail") => Ok(DropMode::Fail),
            Some("skip") => Ok(DropMode::Skip),
            Some(_) => Err(Error::invalid(format!(
                "unknown mode '{}': use Fail or Skip",
                mode.unwrap_or_default()
            ))),
        }
    }
}

impl DropBehavior {
    pub fn parse(behavior: Option<&str>) -> Result<Self> {
        match behavior.map(fold).as_deref() {
            None | Some("") | Some("restrict") => Ok(DropBehavior::Restrict),
            Some("cascade") => Ok(DropBehavior::Cascade),
            Some(_) => Err(Error::invalid(format!(
                "unknown behavior '{}': use Restrict or Cascade",
                behavior.unwrap_or_default()
            ))),
        }
    }
}

/// The outcome of claiming a data folder.
#[derive(PartialEq, Eq)]
enum Claim {
    Claimed,
    /// The same folder is claimed by this table.
    Taken(Vec<String>),
    /// A folder above or below is claimed by this table.
    Overlaps(Vec<String>),
}

/// A page of names or ids and the token for the next page, if any.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub items: Vec<String>,
    pub next: Option<String>,
}

/// Where a namespace's record is kept.
enum Slot {
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
    /// How long an intent or a drop mark may be in flight before others treat it as
    /// abandoned. Operations abort themselves when half of it has passed.
    grace_ms: u64,
    /// The delimiter used in messages.
    delim: &'static str,
}

/// How many records a listing without a limit returns per store round trip.
const PAGE: usize = 1000;

impl Catalog {
    /// Opens the catalog, writing the cell record of a directory or bucket-prefix warehouse
    /// on first use and refusing a warehouse written in a newer format.
    pub async fn open(
        store: Arc<dyn Store>,
        layout: Layout,
        datasets: Arc<dyn DatasetReader>,
        grace: Duration,
    ) -> Result<Self> {
        let catalog = Catalog {
            store,
            layout,
            datasets,
            grace_ms: grace.as_millis() as u64,
            delim: "$",
        };
        if !catalog.layout.endpoint_mode() {
            let key = Layout::cell_record("");
            let record = CellRecord {
                format_version: FORMAT_VERSION,
                created_at_ms: now_ms(),
                namespace: None,
            };
            // The store may not be up yet (a sidecar starting beside its S3 server): then the
            // record is written by the first create, and /readyz reports the store meanwhile.
            match catalog
                .store
                .put(&key, encode(&record), Condition::IfAbsent)
                .await
            {
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

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub async fn ready(&self) -> Result<()> {
        self.store.check().await.map_err(|e| {
            Error::unavailable("the warehouse store is not reachable").with_detail(e.to_string())
        })
    }

    fn show(&self, id: &[String]) -> String {
        join(id, self.delim)
    }

    fn stale(&self, since_ms: u64) -> bool {
        now_ms().saturating_sub(since_ms) > self.grace_ms
    }

    /// Fails when an operation started at `started_ms` has used half its grace period:
    /// past that point another gateway may soon treat its intent as abandoned.
    fn still_in_time(&self, started_ms: u64) -> Result<()> {
        if now_ms().saturating_sub(started_ms) > self.grace_ms / 2 {
            return Err(Error::unavailable(
                "the operation took too long and was abandoned; retry",
            ));
        }
        Ok(())
    }

    async fn read<T: for<'de> serde::Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Option<(T, String)>> {
        match self.store.get(key).await {
            Ok(Some(Object { body, etag })) => Ok(Some((decode(key, &body)?, etag))),
            Ok(None) | Err(StoreError::NoSuchBucket(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    // ---------------------------------------------------------------- namespaces

    fn slot(&self, id: &[String]) -> Result<Slot> {
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

    /// Reads a namespace record; `None` when it does not exist. The root reads as an empty
    /// record that always exists.
    async fn read_namespace(&self, id: &[String]) -> Result<Option<(NamespaceRecord, String)>> {
        match self.slot(id)? {
            Slot::Root => Ok(Some((
                NamespaceRecord {
                    format_version: FORMAT_VERSION,
                    id: Vec::new(),
                    uid: String::new(),
                    created_at_ms: 0,
                    properties: Properties::new(),
                    dropping_since_ms: None,
                },
                String::new(),
            ))),
            Slot::Cell(key) => Ok(self
                .read::<CellRecord>(&key)
                .await?
                .and_then(|(cell, etag)| cell.namespace.map(|ns| (ns, etag)))),
            Slot::Plain(key) => self.read::<NamespaceRecord>(&key).await,
        }
    }

    /// Replaces a namespace record if it is still at `etag`; returns the new ETag.
    async fn write_namespace(
        &self,
        record: &NamespaceRecord,
        cond: Condition,
    ) -> Result<String, StoreError> {
        match self
            .slot(&record.id)
            .map_err(|e| StoreError::Other(e.message))?
        {
            Slot::Root => Err(StoreError::Other("the root namespace has no record".into())),
            Slot::Cell(key) => {
                let cell = CellRecord {
                    format_version: FORMAT_VERSION,
                    created_at_ms: record.created_at_ms,
                    namespace: Some(record.clone()),
                };
                self.store.put(&key, encode(&cell), cond).await
            }
            Slot::Plain(key) => self.store.put(&key, encode(record), cond).await,
        }
    }

    /// Checks that new children may be created under `id` right now.
    async fn ensure_open_namespace(&self, id: &[String]) -> Result<()> {
        match self.read_namespace(id).await? {
            None => Err(Error::namespace_not_found(&self.show(id))),
            Some((ns, _)) => match ns.dropping_since_ms {
                Some(since) if !self.stale(since) => Err(Error::conflict(format!(
                    "namespace '{}' is being dropped",
                    self.show(id)
                ))),
                _ => Ok(()),
            },
        }
    }

    pub async fn describe_namespace(&self, id: &[String]) -> Result<Properties> {
        match self.read_namespace(id).await? {
            Some((ns, _)) => Ok(ns.properties),
            None => Err(Error::namespace_not_found(&self.show(id))),
        }
    }

    pub async fn namespace_exists(&self, id: &[String]) -> Result<()> {
        self.describe_namespace(id).await.map(|_| ())
    }

    pub async fn create_namespace(
        &self,
        id: &[String],
        mode: CreateMode,
        properties: Properties,
    ) -> Result<Properties> {
        if id.is_empty() {
            return Err(Error::invalid(
                "the root namespace always exists and cannot be created",
            ));
        }
        let shown = self.show(id);
        if let Some((existing, etag)) = self.read_namespace(id).await? {
            return match mode {
                CreateMode::Create => Err(Error::namespace_exists(&shown)),
                CreateMode::ExistOk => Ok(existing.properties),
                CreateMode::Overwrite => self.overwrite_namespace(existing, etag, properties).await,
            };
        }
        let record = NamespaceRecord {
            format_version: FORMAT_VERSION,
            id: id.to_vec(),
            uid: new_uid(),
            created_at_ms: now_ms(),
            properties: properties.clone(),
            dropping_since_ms: None,
        };
        let created = if let Slot::Cell(_) = self.slot(id)? {
            // A level-1 namespace in endpoint mode is a bucket holding a catalog: its parent is
            // the endpoint itself, which always exists.
            self.store.ensure_bucket(&id[0]).await.map_err(|e| {
                Error::unavailable(format!("could not create bucket '{}'", id[0]))
                    .with_detail(e.to_string())
            })?;
            self.write_namespace(&record, Condition::IfAbsent).await
        } else {
            let (name, parent) = id.split_last().expect("non-empty");
            let placed = self.layout.place(parent)?;
            let pending_key = Layout::pending_namespace_key(&placed, name);
            let pending = PendingRecord {
                format_version: FORMAT_VERSION,
                op: "create_namespace".into(),
                uid: record.uid.clone(),
                started_at_ms: now_ms(),
                table: None,
                rename_from: None,
            };
            if self
                .begin_pending(&pending_key, encode(&pending))
                .await?
                .is_none()
            {
                return self.create_namespace_lost_race(id, mode).await;
            }
            let result = async {
                self.ensure_open_namespace(parent).await?;
                self.still_in_time(pending.started_at_ms)?;
                Ok::<_, Error>(self.write_namespace(&record, Condition::IfAbsent).await)
            }
            .await;
            self.end_pending(&pending_key).await;
            result?
        };
        match created {
            Ok(_) => Ok(properties),
            Err(StoreError::PreconditionFailed) => self.create_namespace_lost_race(id, mode).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Another request created (or is creating) the same namespace.
    async fn create_namespace_lost_race(
        &self,
        id: &[String],
        mode: CreateMode,
    ) -> Result<Properties> {
        if mode == CreateMode::Create {
            return Err(Error::namespace_exists(&self.show(id)));
        }
        for _ in 0..20 {
            if let Some((existing, _)) = self.read_namespace(id).await? {
                return Ok(existing.properties);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(Error::conflict(format!(
            "namespace '{}' is being created by another request",
            self.show(id)
        )))
    }

    /// Overwrite mode: replace the properties of an existing namespace, which must be empty
    /// (overwriting never drops tables).
    async fn overwrite_namespace(
        &self,
        existing: NamespaceRecord,
        etag: String,
        properties: Properties,
    ) -> Result<Properties> {
        if let Some(what) = self.first_child(&existing.id).await? {
            return Err(Error::namespace_not_empty(&self.show(&existing.id), &what));
        }
        let record = NamespaceRecord {
            properties: properties.clone(),
            created_at_ms: now_ms(),
            dropping_since_ms: None,
            ..existing
        };
        self.write_namespace(&record, Condition::IfMatch(etag))
            .await?;
        Ok(properties)
    }

    pub async fn list_namespaces(
        &self,
        id: &[String],
        token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Listing> {
        if id.is_empty() && self.layout.endpoint_mode() {
            return self.list_catalog_buckets(token, limit).await;
        }
        if self.read_namespace(id).await?.is_none() {
            return Err(Error::namespace_not_found(&self.show(id)));
        }
        let placed = self.layout.place(id)?;
        let prefix = Layout::namespaces_prefix(&placed);
        self.list_names(&prefix, ".json", token, limit, |_| async { Ok(true) })
            .await
    }

    /// Endpoint mode root: the buckets that hold a catalog, in name order.
    async fn list_catalog_buckets(
        &self,
        token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Listing> {
        let limit = limit.unwrap_or(usize::MAX);
        let buckets = self.store.list_buckets().await?;
        let mut out = Listing::default();
        for bucket in buckets
            .into_iter()
            .filter(|b| token.is_none_or(|t| b.as_str() > t))
        {
            if layout::validate_bucket(&bucket).is_err() {
                continue;
            }
            if self
                .read_namespace(std::slice::from_ref(&bucket))
                .await?
                .is_some()
            {
                if out.items.len() == limit {
                    out.next = out.items.last().cloned();
                    break;
                }
                out.items.push(bucket);
            }
        }
        Ok(out)
    }

    /// Lists the names of records directly under `prefix`, starting after the name `token`,
    /// keeping those `keep` accepts, until `limit` are found.
    async fn list_names<F, Fut>(
        &self,
        prefix: &str,
        suffix: &str,
        token: Option<&str>,
        limit: Option<usize>,
        keep: F,
    ) -> Result<Listing>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        let limit = limit.unwrap_or(usize::MAX);
        let mut after = token.map(|t| format!("{prefix}{}{suffix}", names::key_segment(t)));
        let mut out = Listing::default();
        loop {
            let want = (limit - out.items.len()).min(PAGE);
            let page = self
                .store
                .list(prefix, after.as_deref(), want, true)
                .await?;
            for key in &page.keys {
                let Some(name) = Layout::name_of(key, suffix) else {
                    continue;
                };
                if !key.ends_with(suffix) {
                    continue;
                }
                if keep(key.clone()).await? {
                    out.items.push(name);
                }
            }
            after = page.keys.last().cloned();
            if out.items.len() >= limit {
                if page.more || out.items.len() > limit {
                    out.items.truncate(limit);
                    out.next = out.items.last().cloned();
                }
                return Ok(out);
            }
            if !page.more {
                return Ok(out);
            }
        }
    }

    /// Describes the first thing that keeps namespace `id` from being dropped, if any.
    /// Pending creates older than the grace period are settled first, not counted.
    async fn first_child(&self, id: &[String]) -> Result<Option<String>> {
        if self.layout.endpoint_mode() && id.is_empty() {
            return Ok(None);
        }
        let placed = self.layout.place(id)?;
        // Pending entries first, records after: a create publishes its record *before* it
        // removes its pending entry, so whatever this listing misses of a create in flight
        // (its entry already gone) the record listings below still see. Listed the other way
        // round, a create finishing in between would be missed by both.
        let pending = self
            .store
            .list(&Layout::pending_prefix(&placed), None, PAGE, true)
            .await?;
        for key in pending.keys {
            if !self.settle_pending(&key).await? {
                return Ok(Some(
                    "a table or namespace is being created in it".to_string(),
                ));
            }
        }
        let tables = self
            .store
            .list(&Layout::tables_prefix(&placed), None, 1, true)
            .await?;
        if let Some(key) = tables.keys.first() {
            return Ok(Some(format!(
                "it holds table '{}'",
                Layout::name_of(key, ".json").unwrap_or_default()
            )));
        }
        let children = self
            .store
            .list(&Layout::namespaces_prefix(&placed), None, 1, true)
            .await?;
        if let Some(key) = children.keys.first() {
            return Ok(Some(format!(
                "it holds namespace '{}'",
                Layout::name_of(key, ".json").unwrap_or_default()
            )));
        }
        Ok(None)
    }

    pub async fn drop_namespace(
        &self,
        id: &[String],
        mode: DropMode,
        behavior: DropBehavior,
    ) -> Result<()> {
        if id.is_empty() {
            return Err(Error::invalid("the root namespace cannot be dropped"));
        }
        let shown = self.show(id);
        for _attempt in 0..5 {
            let Some((record, etag)) = self.read_namespace(id).await? else {
                return match mode {
                    DropMode::Skip => Ok(()),
                    DropMode::Fail => Err(Error::namespace_not_found(&shown)),
                };
            };
            if let Some(since) = record.dropping_since_ms
                && !self.stale(since)
            {
                return Err(Error::conflict(format!(
                    "namespace '{shown}' is already being dropped"
                )));
            }
            // 1. Mark: from here on no create under it can succeed.
            let marked = NamespaceRecord {
                dropping_since_ms: Some(now_ms()),
                ..record.clone()
            };
            let mark_etag = match self
                .write_namespace(&marked, Condition::IfMatch(etag))
                .await
            {
                Ok(e) => e,
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e.into()),
            };
            // 2. Check (or, with Cascade, empty) its contents.
            let emptied = match behavior {
                DropBehavior::Restrict => match self.first_child(id).await {
                    Ok(None) => Ok(()),
                    Ok(Some(what)) => Err(Error::namespace_not_empty(&shown, &what)),
                    Err(e) => Err(e),
                },
                DropBehavior::Cascade => Box::pin(self.drop_children(id)).await,
            };
            if let Err(e) = emptied {
                // Unmark, unless someone else has taken the record over meanwhile.
                let _ = self
                    .write_namespace(&record, Condition::IfMatch(mark_etag))
                    .await;
                return Err(e);
            }
            self.still_in_time(marked.dropping_since_ms.unwrap_or_default())?;
            // 3. Delete, only if the mark is still ours.
            let key = match self.slot(id)? {
                Slot::Cell(key) | Slot::Plain(key) => key,
                Slot::Root => unreachable!("root refused above"),
            };
            match self.store.delete(&key, Condition::IfMatch(mark_etag)).await {
                Ok(()) => {}
                Err(StoreError::PreconditionFailed) => {
                    return Err(Error::conflict(format!(
                        "namespace '{shown}' changed while it was being dropped"
                    )));
                }
                Err(e) => return Err(e.into()),
            }
            if let Slot::Cell(_) = self.slot(id)? {
                self.retire_bucket(&id[0]).await;
            }
            return Ok(());
        }
        Err(Error::conflict(format!(
            "namespace '{shown}' kept changing; retry the drop"
        )))
    }

    /// After the level-1 namespace of a bucket is dropped: settle its catalog folder and
    /// delete the bucket if nothing else is in it. A bucket that holds objects stays.
    async fn retire_bucket(&self, bucket: &str) {
        let cell = format!("{bucket}/");
        if let Err(e) = recovery::settle_cell(self, &cell, true).await {
            tracing::warn!(bucket, error = %e, "could not settle the catalog of a dropped bucket namespace");
            return;
        }
        match self.store.remove_bucket_if_empty(bucket).await {
            Ok(true) => tracing::info!(bucket, "deleted the empty bucket of a dropped namespace"),
            Ok(false) => tracing::info!(
                bucket,
                "kept the bucket of a dropped namespace: it still holds objects"
            ),
            Err(e) => {
                tracing::warn!(bucket, error = %e, "could not delete the bucket of a dropped namespace")
            }
        }
    }

    /// Cascade: drops every table (data included) and child namespace under `id`.
    async fn drop_children(&self, id: &[String]) -> Result<()> {
        let placed = self.layout.place(id)?;
        for _round in 0..20 {
            let tables = self
                .store
                .list(&Layout::tables_prefix(&placed), None, PAGE, true)
                .await?;
            for key in &tables.keys {
                if let Some(name) = Layout::name_of(key, ".json") {
                    let mut table = id.to_vec();
                    table.push(name);
                    match self.drop_table(&table, true).await {
                        Ok(_) => {}
                        Err(e) if e.code == Code::TableNotFound => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            let children = self
                .store
                .list(&Layout::namespaces_prefix(&placed), None, PAGE, true)
                .await?;
            for key in &children.keys {
                if let Some(name) = Layout::name_of(key, ".json") {
                    let mut child = id.to_vec();
                    child.push(name);
                    self.drop_namespace(&child, DropMode::Skip, DropBehavior::Cascade)
                        .await?;
                }
            }
            match self.first_child(id).await? {
                None => return Ok(()),
                Some(_) if tables.keys.is_empty() && children.keys.is_empty() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some(_) => {}
            }
        }
        Err(Error::conflict(format!(
            "namespace '{}' kept gaining children during a cascade drop",
            self.show(id)
        )))
    }

    // ---------------------------------------------------------------- intents

    /// Writes a pending entry and returns its ETag; `None` when another live operation holds
    /// the name. An abandoned entry is settled and the write retried.
    async fn begin_pending(&self, key: &str, body: Bytes) -> Result<Option<String>> {
        for _ in 0..2 {
            match self.store.put(key, body.clone(), Condition::IfAbsent).await {
                Ok(etag) => return Ok(Some(etag)),
                Err(StoreError::PreconditionFailed) => {
                    if !self.settle_pending(key).await? {
                        return Ok(None);
                    }
                }
                Err(StoreError::NoSuchBucket(b)) => {
                    return Err(Error::namespace_not_found(&b));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    async fn end_pending(&self, key: &str) {
        if let Err(e) = self.store.delete(key, Condition::None).await {
            // Harmless: recovery removes it once it is stale.
            tracing::warn!(key, error = %e, "could not remove a pending entry");
        }
    }

    /// Settles the pending entry at `key` if it is abandoned. `Ok(true)` when it is gone
    /// (settled now or already), `Ok(false)` when a live operation still holds it.
    async fn settle_pending(&self, key: &str) -> Result<bool> {
        recovery::settle_pending(self, key, false).await
    }

    // ---------------------------------------------------------------- tables

    fn split_table<'a>(&self, id: &'a [String]) -> Result<(&'a [String], &'a String)> {
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

    async fn read_table(&self, id: &[String]) -> Result<Option<(TableRecord, String)>> {
        let key = self.table_key(id)?;
        self.read::<TableRecord>(&key).await
    }

    /// The error for a table that is not there: NamespaceNotFound when its namespace is
    /// missing too, TableNotFound otherwise.
    async fn table_missing(&self, id: &[String]) -> Error {
        let parent = &id[..id.len() - 1];
        match self.read_namespace(parent).await {
            Ok(None) => Error::namespace_not_found(&self.show(parent)),
            _ => Error::table_not_found(&self.show(id)),
        }
    }

    pub async fn describe_table(&self, id: &[String]) -> Result<TableRecord> {
        match self.read_table(id).await? {
            Some((record, _)) => Ok(record),
            None => Err(self.table_missing(id).await),
        }
    }

    /// Whether the table's data folder holds a Lance dataset yet (a committed version).
    pub async fn has_data(&self, record: &TableRecord) -> Result<bool> {
        let page = self
            .store
            .list(&format!("{}/_versions/", record.data_key), None, 1, true)
            .await?;
        Ok(!page.keys.is_empty())
    }

    pub async fn dataset_details(&self, record: &TableRecord) -> Result<DatasetDetails> {
        self.datasets.describe(&record.location).await
    }

    pub async fn list_tables(
        &self,
        id: &[String],
        token: Option<&str>,
        limit: Option<usize>,
        include_declared: bool,
    ) -> Result<Listing> {
        if id.is_empty() && self.layout.endpoint_mode() {
            // The endpoint root holds buckets, never tables.
            return Ok(Listing::default());
        }
        if self.read_namespace(id).await?.is_none() {
            return Err(Error::namespace_not_found(&self.show(id)));
        }
        let placed = self.layout.place(id)?;
        let prefix = Layout::tables_prefix(&placed);
        self.list_names(&prefix, ".json", token, limit, |key| {
            self.keep_table(key, include_declared)
        })
        .await
    }

    async fn keep_table(&self, key: String, include_declared: bool) -> Result<bool> {
        if include_declared {
            return Ok(true);
        }
        match self.read::<TableRecord>(&key).await? {
            Some((record, _)) => self.has_data(&record).await,
            None => Ok(false),
        }
    }

    /// Every table in the warehouse, as full ids joined with `delimiter`, in key order.
    pub async fn list_all_tables(
        &self,
        delimiter: &str,
        token: Option<&str>,
        limit: Option<usize>,
        include_declared: bool,
    ) -> Result<Listing> {
        let limit = limit.unwrap_or(usize::MAX);
        let start: Option<Id> = match token {
            Some(t) => Some(names::split_id(t, delimiter)?),
            None => None,
        };
        let cells: Vec<String> = if self.layout.endpoint_mode() {
            let first = start.as_ref().and_then(|s| s.first().cloned());
            let buckets = self.list_catalog_buckets(None, None).await?.items;
            buckets
                .into_iter()
                .filter(|b| first.as_ref().is_none_or(|f| b >= f))
                .map(|b| format!("{b}/"))
                .collect()
        } else {
            vec![String::new()]
        };
        let mut out = Listing::default();
        for cell in cells {
            let prefix = Layout::all_tables_prefix(&cell);
            let mut after: Option<String> = start.as_ref().and_then(|s| {
                let rel = if cell.is_empty() {
                    &s[..]
                } else if s.first().map(|b| format!("{b}/")) == Some(cell.clone()) {
                    &s[1..]
                } else {
                    return None;
                };
                (!rel.is_empty()).then(|| Layout::table_key_of_rel(&cell, rel))
            });
            loop {
                let want = (limit - out.items.len()).min(PAGE);
                let page = self
                    .store
                    .list(&prefix, after.as_deref(), want, false)
                    .await?;
                for key in &page.keys {
                    let Some(rel) = Layout::table_rel_of(&cell, key) else {
                        continue;
                    };
                    if !self.keep_table(key.clone(), include_declared).await? {
                        continue;
                    }
                    let mut full: Id = cell
                        .trim_end_matches('/')
                        .split('/')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                    full.extend(rel);
                    out.items.push(full.join(delimiter));
                }
                after = page.keys.last().cloned();
                if out.items.len() >= limit {
                    out.items.truncate(limit);
                    out.next = out.items.last().cloned();
                    return Ok(out);
                }
                if !page.more {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// DeclareTable: reserve the name and a data folder; no data is written.
    pub async fn declare_table(
        &self,
        id: &[String],
        location: Option<&str>,
        properties: Properties,
    ) -> Result<TableRecord> {
        self.publish_table(id, location, properties, "declare")
            .await
    }

    /// RegisterTable: adopt an existing Lance dataset at `location`.
    pub async fn register_table(
        &self,
        id: &[String],
        location: &str,
        overwrite: bool,
        properties: Properties,
    ) -> Result<TableRecord> {
        let (parent, _) = self.split_table(id)?;
        let placed = self.layout.place(parent)?;
        let data_key = self.layout.data_key_of(location, &placed.cell)?;
        let probe = TableRecord {
            format_version: FORMAT_VERSION,
            id: id.to_vec(),
            uid: String::new(),
            location: self.layout.uri_of(&data_key),
            data_key,
            created_at_ms: 0,
            properties: Properties::new(),
            origin: String::new(),
        };
        if !self.has_data(&probe).await? {
            return Err(Error::invalid(format!(
                "location '{location}' holds no Lance dataset (no _versions/ manifest)"
            )));
        }
        if overwrite && let Some((existing, _)) = self.read_table(id).await? {
            if existing.data_key == probe.data_key {
                return self.replace_table_properties(id, properties).await;
            }
            self.forget_table(id, false).await?;
        }
        self.publish_table(id, Some(location), properties, "register")
            .await
    }

    async fn replace_table_properties(
        &self,
        id: &[String],
        properties: Properties,
    ) -> Result<TableRecord> {
        let Some((record, etag)) = self.read_table(id).await? else {
            return Err(Error::table_not_found(&self.show(id)));
        };
        let updated = TableRecord {
            properties,
            ..record
        };
        self.store
            .put(
                &self.table_key(id)?,
                encode(&updated),
                Condition::IfMatch(etag),
            )
            .await?;
        Ok(updated)
    }

    /// Creates table `id` (declare or register). The steps, each visible to racing requests
    /// and to recovery before the next one starts:
    /// 1. stage the record as the name's pending entry (a racing create of the same name, a
    ///    drop of the namespace and recovery all see it from here on);
    /// 2. check the namespace is open, and claim the data folder, side by side;
    /// 3. publish the staged record under its name (refused if the name is taken).
    async fn publish_table(
        &self,
        id: &[String],
        location: Option<&str>,
        properties: Properties,
        origin: &str,
    ) -> Result<TableRecord> {
        let (parent, name) = self.split_table(id)?;
        let placed = self.layout.place(parent)?;
        let final_key = Layout::table_key(&placed, name);
        let pending_key = Layout::pending_table_key(&placed, name);
        let shown = self.show(id);
        let uid = new_uid();
        let data_key = match location {
            Some(loc) => self.layout.data_key_of(loc, &placed.cell)?,
            None => Layout::default_data_key(&placed, name, ""),
        };
        let mut record = TableRecord {
            format_version: FORMAT_VERSION,
            id: id.to_vec(),
            uid: uid.clone(),
            location: self.layout.uri_of(&data_key),
            data_key,
            created_at_ms: now_ms(),
            properties,
            origin: origin.to_string(),
        };
        let Some(mut pending_etag) = self.begin_pending(&pending_key, encode(&record)).await?
        else {
            return Err(Error::table_exists(&shown));
        };
        let mut claimed = false;
        let result = async {
            let (open, claim) = tokio::join!(
                self.ensure_open_namespace(parent),
                self.claim_location(&placed.cell, &record.data_key, &uid, id)
            );
            let claim = claim?;
            claimed = claim == Claim::Claimed;
            open?;
            match claim {
                Claim::Claimed => {}
                // The claim may be refused because the name is taken, by its own folder.
                _ if self.read::<TableRecord>(&final_key).await?.is_some() => {
                    return Err(Error::table_exists(&shown));
                }
                Claim::Taken(_) if location.is_none() => {
                    // The server's plain choice is held, say by a renamed table that kept its
                    // folder: take a unique one, restaging the record first so recovery knows
                    // which claim to release.
                    record.data_key =
                        Layout::default_data_key(&placed, name, &format!("-{}", &uid[..8]));
                    record.location = self.layout.uri_of(&record.data_key);
                    pending_etag = self
                        .store
                        .put(
                            &pending_key,
                            encode(&record),
                            Condition::IfMatch(pending_etag.clone()),
                        )
                        .await?;
                    match self
                        .claim_location(&placed.cell, &record.data_key, &uid, id)
                        .await?
                    {
                        Claim::Claimed => claimed = true,
                        refused => return Err(self.claim_error(&record.data_key, refused)),
                    }
                }
                refused => return Err(self.claim_error(&record.data_key, refused)),
            }
            self.still_in_time(record.created_at_ms)?;
            Ok(())
        }
        .await;
        if let Err(e) = result {
            if claimed {
                self.release_location(&placed.cell, &record.data_key, &uid)
                    .await;
            }
            self.end_pending(&pending_key).await;
            return Err(e);
        }
        match self
            .store
            .publish(&pending_key, &pending_etag, &final_key, encode(&record))
            .await
        {
            Ok(_) => Ok(record),
            Err(StoreError::PreconditionFailed) => {
                self.release_location(&placed.cell, &record.data_key, &uid)
                    .await;
                self.end_pending(&pending_key).await;
                Err(Error::table_exists(&shown))
            }
            Err(e) => {
                // The record may have landed anyway (say, a timed-out S3 request that
                // succeeded): look before undoing anything. If even that fails, the staged
                // entry stays for recovery, which keeps or undoes the create.
                let failed = Error::unavailable("the table could not be published")
                    .with_detail(e.to_string());
                match self.read::<TableRecord>(&final_key).await {
                    Ok(Some((landed, _))) if landed.uid == uid => {
                        self.end_pending(&pending_key).await;
                        Ok(record)
                    }
                    Ok(_) => {
                        self.release_location(&placed.cell, &record.data_key, &uid)
                            .await;
                        self.end_pending(&pending_key).await;
                        Err(failed)
                    }
                    Err(_) => Err(failed),
                }
            }
        }
    }

    fn claim_error(&self, data_key: &str, refused: Claim) -> Error {
        let uri = self.layout.uri_of(data_key);
        match refused {
            Claim::Claimed => Error::internal("a granted claim reported as refused", uri),
            Claim::Taken(owner) => Error::invalid(format!(
                "location '{uri}' is already the data folder of table '{}'",
                self.show(&owner)
            )),
            Claim::Overlaps(owner) => Error::invalid(format!(
                "location '{uri}' overlaps the data folder of table '{}'",
                self.show(&owner)
            )),
        }
    }

    /// Claims `data_key` for table `uid`: refused when it, a folder above it or a folder
    /// below it is claimed. The claim is written first and the neighbours checked after, so
    /// of two racing overlapping claims at least one sees the other.
    async fn claim_location(
        &self,
        cell: &str,
        data_key: &str,
        uid: &str,
        id: &[String],
    ) -> Result<Claim> {
        let key = Layout::location_claim_key(cell, data_key);
        let claim = LocationClaim {
            format_version: FORMAT_VERSION,
            uid: uid.to_string(),
            table: id.to_vec(),
        };
        match self
            .store
            .put(&key, encode(&claim), Condition::IfAbsent)
            .await
        {
            Ok(_) => {}
            Err(StoreError::PreconditionFailed) => match self.read::<LocationClaim>(&key).await? {
                // Our own write, landed by an earlier attempt the client retried.
                Some((c, _)) if c.uid == uid => {}
                found => {
                    return Ok(Claim::Taken(
                        found.map(|(c, _)| c.table).unwrap_or_default(),
                    ));
                }
            },
            Err(e) => {
                // The write may have landed all the same: release it if it is ours.
                self.release_location(cell, data_key, uid).await;
                return Err(e.into());
            }
        }
        let overlap = async {
            let rel = &data_key[cell.len()..];
            let segments: Vec<&str> = rel.split('/').collect();
            let ancestors: Vec<String> = (1..segments.len())
                .map(|n| {
                    Layout::location_claim_key(cell, &format!("{cell}{}", segments[..n].join("/")))
                })
                .collect();
            // The folders above and the folders below are looked up side by side.
            let below_prefix = Layout::location_claims_below(cell, data_key);
            let (above, below) = tokio::join!(
                join_all(ancestors.iter().map(|k| self.read::<LocationClaim>(k))),
                self.store.list(&below_prefix, None, 1, false)
            );
            for found in above {
                if let Some((c, _)) = found? {
                    return Ok(Some(c));
                }
            }
            if let Some(k) = below?.keys.first() {
                return Ok(self.read::<LocationClaim>(k).await?.map(|(c, _)| c));
            }
            Ok::<_, Error>(None)
        }
        .await;
        match overlap {
            Ok(None) => Ok(Claim::Claimed),
            Ok(Some(other)) => {
                self.release_location(cell, data_key, uid).await;
                Ok(Claim::Overlaps(other.table))
            }
            Err(e) => {
                self.release_location(cell, data_key, uid).await;
                Err(e)
            }
        }
    }

    /// Removes the claim on `data_key` if table `uid` still holds it.
    pub(crate) async fn release_location(&self, cell: &str, data_key: &str, uid: &str) {
        let key = Layout::location_claim_key(cell, data_key);
        let result = async {
            if let Some((claim, etag)) = self.read::<LocationClaim>(&key).await?
                && claim.uid == uid
            {
                self.store.delete(&key, Condition::IfMatch(etag)).await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(key, error = %e, "could not release a location claim; recovery will retry");
        }
    }

    pub async fn table_exists(&self, id: &[String]) -> Result<()> {
        self.describe_table(id).await.map(|_| ())
    }

    /// DropTable: forget the table and delete its data.
    pub async fn drop_table(&self, id: &[String], delete_data: bool) -> Result<TableRecord> {
        self.forget_table(id, delete_data).await
    }

    /// Removes a table's record, then (for a drop) its data, then its location claim. A drop
    /// record written first lets recovery finish the job if this gateway dies half-way.
    async fn forget_table(&self, id: &[String], delete_data: bool) -> Result<TableRecord> {
        let Some((record, etag)) = self.read_table(id).await? else {
            return Err(self.table_missing(id).await);
        };
        let (parent, _) = self.split_table(id)?;
        let cell = self.layout.place(parent)?.cell;
        self.clear_arrival_entry(id, &record.uid).await?;
        let intent_key = Layout::drop_key(&cell, &record.uid);
        let intent = DropRecord {
            format_version: FORMAT_VERSION,
            op: if delete_data { "drop" } else { "deregister" }.into(),
            started_at_ms: now_ms(),
            table: record.clone(),
        };
        self.store
            .put(&intent_key, encode(&intent), Condition::None)
            .await?;
        match self
            .store
            .delete(&self.table_key(id)?, Condition::IfMatch(etag))
            .await
        {
            Ok(()) => {}
            Err(e) => {
                let _ = self.store.delete(&intent_key, Condition::None).await;
                return Err(match e {
                    StoreError::PreconditionFailed => Error::conflict(format!(
                        "table '{}' changed while it was being dropped",
                        self.show(id)
                    )),
                    other => other.into(),
                });
            }
        }
        // The table is gone from the catalog; what follows is cleanup that recovery repeats
        // if it fails here.
        if let Err(e) = recovery::finish_drop(self, &cell, &intent_key, &intent).await {
            tracing::warn!(table = %self.show(id), error = %e, "drop cleanup incomplete; recovery will finish it");
        }
        Ok(record)
    }

    /// RenameTable: move the entry to a new id; the data stays where it is.
    pub async fn rename_table(&self, id: &[String], new_id: &[String]) -> Result<()> {
        let (new_parent, new_name) = self.split_table(new_id)?;
        let (old_parent, _) = self.split_table(id)?;
        let old_placed = self.layout.place(old_parent)?;
        let new_placed = self.layout.place(new_parent)?;
        if old_placed.cell != new_placed.cell {
            return Err(Error::invalid(
                "a table cannot be renamed into another bucket",
            ));
        }
        if id == new_id {
            return Err(Error::invalid("the new id is the table's current id"));
        }
        let Some((record, etag)) = self.read_table(id).await? else {
            return Err(self.table_missing(id).await);
        };
        let shown_new = self.show(new_id);
        let final_key = Layout::table_key(&new_placed, new_name);
        if self.read::<TableRecord>(&final_key).await?.is_some() {
            return Err(Error::table_exists(&shown_new));
        }
        self.clear_arrival_entry(id, &record.uid).await?;
        let moved = TableRecord {
            id: new_id.to_vec(),
            ..record.clone()
        };
        let pending_key = Layout::pending_table_key(&new_placed, new_name);
        let pending = PendingRecord {
            format_version: FORMAT_VERSION,
            op: "rename".into(),
            uid: record.uid.clone(),
            started_at_ms: now_ms(),
            table: Some(moved.clone()),
            rename_from: Some(id.to_vec()),
        };
        if self
            .begin_pending(&pending_key, encode(&pending))
            .await?
            .is_none()
        {
            return Err(Error::table_exists(&shown_new));
        }
        let result = async {
            self.ensure_open_namespace(new_parent).await?;
            if self.read::<TableRecord>(&final_key).await?.is_some() {
                return Err(Error::table_exists(&shown_new));
            }
            self.still_in_time(pending.started_at_ms)?;
            // The old name goes first: that delete is the rename's point of no return, and
            // the pending entry carries everything needed to publish the new name after it.
            match self
                .store
                .delete(&self.table_key(id)?, Condition::IfMatch(etag))
                .await
            {
                Ok(()) => {}
                Err(StoreError::PreconditionFailed) => {
                    return Err(Error::conflict(format!(
                        "table '{}' changed during the rename",
                        self.show(id)
                    )));
                }
                Err(e) => return Err(e.into()),
            }
            match self
                .store
                .put(&final_key, encode(&moved), Condition::IfAbsent)
                .await
            {
                Ok(_) => Ok(()),
                Err(e) => {
                    // Leave the pending entry: recovery publishes the new name from it.
                    Err(
                        Error::unavailable("the rename will be completed by recovery")
                            .with_detail(e.to_string()),
                    )
                }
            }
        }
        .await;
        match &result {
            Err(e) if e.code == Code::ServiceUnavailable && e.message.contains("recovery") => {}
            _ => self.end_pending(&pending_key).await,
        }
        result
    }

    /// Removes the pending entry at `id`'s name if it belongs to table `uid` itself: the
    /// leftover of how the table got there (its create, or a rename into `id`), left beside
    /// the published record by a crash or a failed cleanup. It must go before the table leaves
    /// `id`: recovery, finding the name empty, would take it for an operation that never
    /// published and release the folder the table keeps (or publish a rename again).
    async fn clear_arrival_entry(&self, id: &[String], uid: &str) -> Result<()> {
        let (parent, name) = self.split_table(id)?;
        let key = Layout::pending_table_key(&self.layout.place(parent)?, name);
        if let Some((entry, etag)) = self.read::<PendingEntry>(&key).await?
            && entry.into_pending().uid == uid
        {
            match self.store.delete(&key, Condition::IfMatch(etag)).await {
                Ok(()) | Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    pub(crate) async fn read_any<T: for<'de> serde::Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Option<(T, String)>> {
        self.read(key).await
    }

    pub(crate) fn is_stale(&self, since_ms: u64) -> bool {
        self.stale(since_ms)
    }
}

/// The body a record is written with (exposed for recovery).
pub(crate) fn record_bytes<T: serde::Serialize>(record: &T) -> Bytes {
    encode(record)
}
