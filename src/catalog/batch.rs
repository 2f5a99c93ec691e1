//! Batch commits (BatchCreateTableVersions, BatchCommitTables): versions of several tables
//! made visible together or not at all, for readers that resolve versions through the
//! catalog (managed versioning). A batch's entry commits a version of its table, deletes
//! some of its versions (BatchCommitTables' `delete_table_versions`), or declares or
//! deregisters the table (`declare_table`, `deregister_table`).
//!
//! The protocol, over the commit log of each table (`log`) and, for declares and
//! deregisters, over the intents of the create and drop protocols (`intents`):
//! 1. **Check** every entry before anything is written: the caller's grant (write to
//!    commit or declare, admin to delete versions or deregister), the staged manifest (in
//!    that table's own versions folder, of that version, as large as said), the versions to
//!    delete (never the latest or a tagged one), the table to deregister (there), the
//!    declare's properties and location, one entry per table.
//! 2. **Record** the batch: a transaction record (`Running`, naming each table's version)
//!    written create-if-absent. Its id is the answer's `transaction_id`.
//! 3. **Lock** each table's head for its version (conditional on the head read, and only if
//!    the version follows the newest in the log and in storage); a deleting entry locks the
//!    next version and names, in its lock, the manifests it deletes (chosen again on the
//!    listing read beside the head). A declare stages its create intent at the name's
//!    pending key and a deregister its drop intent at the table's, with a mark on the
//!    record, both naming the batch, whose record decides them (`Intent::batch`). A table
//!    that cannot be locked or staged fails the batch: the record is written `Failed`,
//!    every lock is removed and every staged intent rolled back.
//! 4. **Commit**: the record goes from `Running` to `Succeeded`, conditional on the record as
//!    the batch wrote it. This one write is the commit point for every table at once: from
//!    it on, each lock stands for a committed version (`log`'s invariants), and each staged
//!    intent for a committed declare or deregister (describe and listings read the batch's
//!    record when they meet one).
//! 5. **Publish**: each table's head is settled, which deletes the manifests its lock names,
//!    copies its staged manifest to the final name and moves the head on; each intent is
//!    rolled forward (the table's record published, or deleted). Anyone who reads
//!    a locked head does the same (managed readers settle before they answer), so a
//!    batch whose gateway stopped after step 4 is finished by the next reader or writer of
//!    each of its tables (and by the recovery sweep before its record is removed); one that
//!    stopped before step 4 is failed by the first who finds its record abandoned.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::future::{join_all, try_join_all};

use super::Catalog;
use super::layout::Layout;
use super::log::{Lock, LogState};
use super::records::{Intent, Properties, TableRecord, now_ms};
use super::transactions::{BatchItem, Transaction, TxStatus, Written};
use super::versions::{
    CommittedVersion, NewVersion, Staging, check_ranges, version_of_file, versions_dir,
};
use crate::access::{Ctx, Level};
use crate::error::{Code, Error, Result};

/// The most entries one batch may hold.
pub const MAX_ENTRIES: usize = 100;

/// The most versions one entry of a batch may delete: its lock names each one, and every
/// reader of the table reads the lock until the batch is settled.
pub const MAX_DELETES: usize = 1000;

/// Refuses a deletion larger than `MAX_DELETES`.
fn check_deletes(doomed: &[String]) -> Result<()> {
    if doomed.len() > MAX_DELETES {
        return Err(Error::invalid(format!(
            "a batch entry deletes at most {MAX_DELETES} versions ({} asked for): delete older \
             ones with BatchDeleteTableVersions first",
            doomed.len()
        )));
    }
    Ok(())
}

/// How many times a table's lock is tried when rivals keep moving its head.
const LOCK_TRIES: usize = 5;

/// What one entry of a batch does to its table.
#[derive(Clone, Debug)]
pub enum Change {
    /// Commit a version (CreateTableVersion).
    Version(NewVersion),
    /// Delete the versions in `ranges` (`[start, end)`, `end` -1 for open) of `branch`
    /// (BatchDeleteTableVersions).
    DeleteVersions {
        branch: Option<String>,
        ranges: Vec<(i64, i64)>,
    },
    /// Declare the table (DeclareTable): it exists for readers from the batch's commit on.
    Declare {
        location: Option<String>,
        properties: Properties,
    },
    /// Deregister the table (DeregisterTable; its data stays): gone for readers from the
    /// batch's commit on.
    Deregister,
}

/// What a batch's entry did, in its answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Done {
    Version(CommittedVersion),
    /// How many versions were deleted.
    Deleted(u64),
    /// The table declared.
    Declared(TableRecord),
    /// The table deregistered, as it was.
    Deregistered(TableRecord),
}

/// One entry of a batch, checked.
struct Entry {
    record: TableRecord,
    branch: Option<String>,
    /// The table's versions folder on `branch`.
    dir: String,
    kind: Kind,
}

enum Kind {
    Version {
        staging: Staging,
        size: u64,
    },
    Delete {
        ranges: Vec<(i64, i64)>,
    },
    /// The entry's `record` is the table as the request places it (its id and data
    /// folder), before it is staged.
    Declare {
        location: Option<String>,
        properties: Properties,
    },
    Deregister,
}

/// What step 3 left of one entry.
enum Locked {
    /// Its table's head is locked; how many versions the lock deletes.
    Head(u64),
    /// Its intent (a declare or deregister) is staged at `key` (at `etag`), for the batch's
    /// record to decide; `record` is the table it declares, or the one it deregisters.
    Intent {
        key: String,
        etag: String,
        intent: Intent,
        record: TableRecord,
    },
}

impl Entry {
    fn staging(&self) -> Option<&Staging> {
        match &self.kind {
            Kind::Version { staging, .. } => Some(staging),
            _ => None,
        }
    }

    /// Whether it locks its table's head (it commits or deletes versions).
    fn locks_head(&self) -> bool {
        matches!(self.kind, Kind::Version { .. } | Kind::Delete { .. })
    }

    /// The batch's record of it.
    fn item(&self) -> BatchItem {
        let (version, deletes, change) = match &self.kind {
            Kind::Version { staging, .. } => (staging.version, None, None),
            Kind::Delete { ranges } => (0, Some(ranges.clone()), None),
            Kind::Declare { .. } => (0, None, Some("declare".to_string())),
            Kind::Deregister => (0, None, Some("deregister".to_string())),
        };
        BatchItem {
            table: self.record.id.clone(),
            branch: self.branch.clone(),
            version,
            deletes,
            change,
        }
    }
}

/// The step a batch stops at under fault injection (`LANCE_GATEWAY_FAULT_BATCH_PAUSE`: the
/// crash suite sets it so it can kill the gateway there); unset outside the suite.
fn fault_step() -> Option<&'static str> {
    static STEP: std::sync::LazyLock<Option<String>> =
        std::sync::LazyLock::new(|| std::env::var("LANCE_GATEWAY_FAULT_BATCH_PAUSE").ok());
    STEP.as_deref()
}

/// Under fault injection at `step`, waits once the batch reaches it: for the suite's kill,
/// or `LANCE_GATEWAY_FAULT_BATCH_PAUSE_MS` (for a rival to meet the batch there).
async fn fault(step: &str) {
    if fault_step() == Some(step) {
        let ms = std::env::var("LANCE_GATEWAY_FAULT_BATCH_PAUSE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(600_000);
        tracing::warn!(step, ms, "fault injection: pausing a batch commit");
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

fn conflict(message: String) -> Error {
    Error::new(Code::ConcurrentModification, message)
}

impl Catalog {
    /// Commits `entries` (a table id and the change to make to it, each) together, or none
    /// of them (see the module's protocol). Answers the batch's transaction id and what each
    /// entry did, in the order given.
    pub async fn commit_batch(
        self: &Arc<Self>,
        ctx: &Ctx,
        entries: Vec<(Vec<String>, Change)>,
    ) -> Result<(String, Vec<Done>)> {
        if entries.is_empty() {
            return Err(Error::invalid("a batch commit needs at least one entry"));
        }
        if entries.len() > MAX_ENTRIES {
            return Err(Error::invalid(format!(
                "a batch commit holds at most {MAX_ENTRIES} entries ({} given)",
                entries.len()
            )));
        }
        // 1. Check.
        let checked: Vec<Entry> = try_join_all(
            entries
                .iter()
                .map(|(id, req)| self.check_entry(ctx, id, req)),
        )
        .await?;
        // One change per table folder and branch; a declare or deregister is the only change
        // of its table (its branches included).
        let (mut tables, mut ids, mut whole) = (HashSet::new(), HashSet::new(), HashSet::new());
        for entry in &checked {
            let folder = (entry.record.data_key.clone(), entry.branch.clone());
            let id = entry.record.id.clone();
            let twice = if entry.locks_head() {
                whole.contains(&id)
            } else {
                ids.contains(&id) || !whole.insert(id.clone())
            };
            ids.insert(id);
            if !tables.insert(folder) || twice {
                return Err(Error::invalid(format!(
                    "table '{}' appears twice in the batch: one change per table (and branch)",
                    self.show(&entry.record.id)
                )));
            }
        }

        // 2. Record.
        let items: Vec<BatchItem> = checked.iter().map(Entry::item).collect();
        let summary = items
            .iter()
            .map(|i| match (&i.deletes, &i.change) {
                (_, Some(change)) => format!("{} {change}s", self.show(&i.table)),
                (None, None) => format!("{}@{}", self.show(&i.table), i.version),
                (Some(ranges), None) => {
                    let ranges: Vec<String> = ranges
                        .iter()
                        .map(|(start, end)| match end {
                            -1 => format!("{start}.."),
                            end => format!("{start}..{end}"),
                        })
                        .collect();
                    format!("{} deletes {}", self.show(&i.table), ranges.join(","))
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let results = BTreeMap::from([
            ("tables".to_string(), items.len().to_string()),
            ("versions".to_string(), summary),
        ]);
        let mut tx = self
            .begin_transaction_of(&checked[0].record.id, "batch_commit", "", results, items)
            .await?;
        let id = tx.record.id.clone();
        fault("recorded").await;

        // 3. Lock.
        let outcomes = join_all(checked.iter().map(|e| self.lock_entry(e, &id))).await;
        let mut locked = Vec::with_capacity(outcomes.len());
        let mut failed = None;
        for outcome in outcomes {
            match outcome {
                Ok(l) => locked.push(l),
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        if let Some(error) = failed {
            self.abandon_batch(&mut tx, &checked, &locked, &error).await;
            return Err(error);
        }

        fault("locked").await;

        // 4. Commit.
        if !self
            .decide_batch(&mut tx, TxStatus::Succeeded, None)
            .await?
        {
            let error = conflict(format!(
                "batch commit {id} was failed before it committed (it outlasted the grace \
                 period, or was canceled); nothing of it is visible"
            ));
            self.abandon_batch(&mut tx, &checked, &locked, &error).await;
            return Err(error);
        }

        fault("committed").await;

        // 5. Publish (the tables one by one under fault injection, to stop between them).
        let settled: Vec<Option<LogState>> = if fault_step().is_some() {
            let mut settled = Vec::with_capacity(checked.len());
            for (entry, locked) in checked.iter().zip(&locked) {
                settled.push(self.publish_entry(entry, locked).await?);
                fault("published_one").await;
            }
            settled
        } else {
            try_join_all(
                checked
                    .iter()
                    .zip(&locked)
                    .map(|(e, l)| self.publish_entry(e, l)),
            )
            .await?
        };
        let mut done = Vec::with_capacity(checked.len());
        for ((entry, log), locked) in checked.iter().zip(settled).zip(locked) {
            let (Kind::Version { staging, size }, Some(log)) = (&entry.kind, log) else {
                done.push(match (&entry.kind, locked) {
                    (Kind::Declare { .. }, Locked::Intent { record, .. }) => Done::Declared(record),
                    (_, Locked::Intent { record, .. }) => Done::Deregistered(record),
                    (_, Locked::Head(count)) => Done::Deleted(count),
                });
                continue;
            };
            let final_key = format!("{}{}", staging.dir, staging.manifest);
            let version = CommittedVersion {
                version: staging.version,
                manifest_path: self.layout.store_path_of(&final_key),
                size: *size,
                e_tag: log
                    .published_etag
                    .filter(|t| !t.is_empty() && self.layout.shares_etags()),
            };
            self.record_published(&entry.record, staging, &version)
                .await?;
            done.push(Done::Version(version));
        }
        let catalog = self.clone();
        let published: Vec<Staging> = checked
            .iter()
            .filter_map(|e| e.staging().cloned())
            .collect();
        self.after_answer(async move {
            for staging in published {
                catalog.forget_staged(&staging).await;
            }
        });
        Ok((id, done))
    }

    /// Step 5 for one entry: its table's head settled (which publishes a committed lock),
    /// or its intent settled by the batch's record (which publishes a declared table, or
    /// deletes a deregistered one). A settle that fails here is left to the next reader or
    /// writer of the table, or to recovery: the batch has committed all the same.
    async fn publish_entry(&self, entry: &Entry, locked: &Locked) -> Result<Option<LogState>> {
        match locked {
            Locked::Head(_) => Ok(Some(
                self.settle_log(&entry.record, entry.branch.as_deref())
                    .await?,
            )),
            Locked::Intent {
                key, etag, intent, ..
            } => {
                if let Err(e) = self
                    .settle(key, super::records::Entry::Intent(intent.clone()), etag)
                    .await
                {
                    tracing::warn!(table = %self.show(&entry.record.id), error = %e, "a committed batch's declare or deregister is left for the next reader or recovery to finish");
                }
                Ok(None)
            }
        }
    }

    /// Step 1 for one entry: what a CreateTableVersion, BatchDeleteTableVersions,
    /// DeclareTable or DeregisterTable of it would check.
    async fn check_entry(&self, ctx: &Ctx, id: &[String], change: &Change) -> Result<Entry> {
        match change {
            Change::Declare {
                location,
                properties,
            } => {
                self.may_create_table(ctx, id)?;
                super::policy::check(properties)?;
                let (parent, name) = self.split_table(id)?;
                let placed = self.layout.place(parent)?;
                let data_key = match location {
                    Some(loc) => self.layout.data_key_of(loc, &placed.cell)?,
                    None => Layout::default_data_key(&placed, name, ""),
                };
                let record = self.probe_table(id, data_key, properties.clone(), "declare");
                Ok(Entry {
                    record,
                    branch: None,
                    dir: String::new(),
                    kind: Kind::Declare {
                        location: location.clone(),
                        properties: properties.clone(),
                    },
                })
            }
            Change::Deregister => {
                self.may_remove_table(ctx, id)?;
                let record = self.describe_table(ctx, id).await?;
                Ok(Entry {
                    record,
                    branch: None,
                    dir: String::new(),
                    kind: Kind::Deregister,
                })
            }
            Change::Version(req) => {
                let record = self.describe_table(ctx, id).await?;
                self.may_change_table(ctx, id, Level::Write, "committing a version")?;
                let staging = self.staging_of(&record, req)?;
                let key = format!("{}{}", staging.dir, staging.staged);
                let staged = self.store.get(&key).await?.ok_or_else(|| {
                    Error::invalid(format!(
                        "the staged manifest '{}' does not exist",
                        req.manifest_path
                    ))
                })?;
                self.check_staged(req, &staged)?;
                Ok(Entry {
                    branch: staging.branch.clone(),
                    dir: staging.dir.clone(),
                    record,
                    kind: Kind::Version {
                        staging,
                        size: staged.body.len() as u64,
                    },
                })
            }
            Change::DeleteVersions { branch, ranges } => {
                let record = self.describe_table(ctx, id).await?;
                self.may_change_table(ctx, id, Level::Admin, "deleting versions")?;
                check_ranges(ranges)?;
                let branch = branch.clone().filter(|b| !b.is_empty() && b != "main");
                let dir = versions_dir(&record, branch.as_deref())?;
                // Refused now, before anything is written, when it would be at the lock.
                let doomed = self
                    .doomed_versions(&record, branch.as_deref(), ranges)
                    .await?;
                check_deletes(&doomed)?;
                Ok(Entry {
                    record,
                    branch,
                    dir,
                    kind: Kind::Delete {
                        ranges: ranges.clone(),
                    },
                })
            }
        }
    }

    /// Step 3 for one entry: its table's head locked by batch `id` for its version (or, for
    /// a deletion, the next version, with the manifests it deletes chosen on the listing
    /// read beside the head; the lock answers how many versions it deletes), or its declare
    /// or deregister staged as an intent batch `id` decides.
    async fn lock_entry(&self, entry: &Entry, id: &str) -> Result<Locked> {
        match &entry.kind {
            Kind::Declare {
                location,
                properties,
            } => {
                let staged = self
                    .stage_table(
                        &entry.record.id,
                        location.as_deref(),
                        properties.clone(),
                        "declare",
                        Some(id),
                    )
                    .await?;
                return Ok(Locked::Intent {
                    key: staged.pending_key,
                    etag: staged.etag,
                    intent: Self::batch_create_intent(&self.node, &staged.record, id),
                    record: staged.record,
                });
            }
            Kind::Deregister => {
                let (key, etag, intent, record) =
                    self.stage_deregister(&entry.record.id, id).await?;
                return Ok(Locked::Intent {
                    key,
                    etag,
                    intent,
                    record,
                });
            }
            Kind::Version { .. } | Kind::Delete { .. } => {}
        }
        self.lock_head(entry, id).await.map(Locked::Head)
    }

    /// `lock_entry` for an entry that commits or deletes versions.
    async fn lock_head(&self, entry: &Entry, id: &str) -> Result<u64> {
        let branch = entry.branch.as_deref();
        let key = self.head_key_of(&entry.record, branch)?;
        for _ in 0..LOCK_TRIES {
            let (log, stored) = self
                .log_and_storage(&entry.record, branch, &entry.dir)
                .await;
            let (log, stored) = (log?, stored?);
            let (version, manifest, staged, size, deletes) = match &entry.kind {
                Kind::Version { staging, size } => {
                    if !self.follows(staging, &log, stored)? {
                        return Err(conflict(format!(
                            "version {} of table '{}' already exists",
                            staging.version,
                            self.show(&entry.record.id)
                        )));
                    }
                    let (manifest, staged) = (staging.manifest.clone(), staging.staged.clone());
                    (staging.version, manifest, staged, *size, Vec::new())
                }
                Kind::Declare { .. } | Kind::Deregister => {
                    return Err(Error::internal(
                        "a batch tried to lock a head for a declare or deregister",
                        "those entries stage intents instead",
                    ));
                }
                Kind::Delete { ranges } => {
                    if let Some(lock) = log.live_lock() {
                        return Err(conflict(format!(
                            "table '{}' is held by batch commit {}, which is committing",
                            self.show(&entry.record.id),
                            lock.transaction_id
                        )));
                    }
                    let deletes = self.doomed_versions(&entry.record, branch, ranges).await?;
                    check_deletes(&deletes)?;
                    let latest = stored.max(log.head.as_ref().map(|h| h.version));
                    let next = latest.unwrap_or(0) + 1;
                    (next, String::new(), String::new(), 0, deletes)
                }
            };
            let mut head = log
                .head
                .clone()
                .unwrap_or_else(|| Self::new_head(&entry.record, 0));
            if let Some(stored) = stored.filter(|s| *s > head.version) {
                // Versions made around the log: the head starts again from storage's newest.
                head = Self::new_head(&entry.record, stored);
            }
            let count = deletes.len() as u64;
            head.lock = Some(Lock {
                transaction_id: id.to_string(),
                version,
                manifest,
                staged,
                size,
                locked_at_ms: now_ms(),
                deletes,
            });
            if self
                .put_head(&key, &head, log.etag.as_deref())
                .await?
                .is_some()
            {
                return Ok(count);
            }
        }
        Err(conflict(format!(
            "table '{}' kept changing while the batch tried to lock it; retry",
            self.show(&entry.record.id)
        )))
    }

    /// Refuses (409, code 14) to point a tag or a branch at `version` of the table's `branch`
    /// while a batch still deciding would delete it. The log is settled first, so a deletion
    /// already committed is finished and the version is gone for Lance to say so. A tag
    /// written after this check and before a batch's lock is caught by the batch, which reads
    /// the tags again when it locks.
    pub async fn refuse_if_being_deleted(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        version: u64,
    ) -> Result<()> {
        let branch = branch.filter(|b| !b.is_empty() && *b != "main");
        let log = self.settle_log(record, branch).await?;
        if let Some(lock) = log.live_lock()
            && lock
                .deletes
                .iter()
                .any(|name| version_of_file(name) == Some(version))
        {
            return Err(conflict(format!(
                "version {version} of table '{}' is being deleted by batch commit {}",
                self.show(&record.id),
                lock.transaction_id
            )));
        }
        Ok(())
    }

    /// Writes the batch's decision, conditional on the record as the batch last saw it:
    /// `false` when the record was decided otherwise first (by a gateway that found it
    /// abandoned, or by a cancel). A property set by AlterTransaction meanwhile is kept.
    async fn decide_batch(
        &self,
        tx: &mut Transaction,
        status: TxStatus,
        error: Option<String>,
    ) -> Result<bool> {
        loop {
            let mut record = tx.record.clone();
            if record.cancel_requested && status == TxStatus::Succeeded {
                return Ok(false);
            }
            record.status = status;
            record.error = error.clone();
            match self.write_transaction(tx, record).await? {
                Written::Done => return Ok(true),
                Written::Gone => return Ok(false),
                // Decided by someone else first: the decision stands.
                Written::Changed if tx.record.status != TxStatus::Running => {
                    return Ok(tx.record.status == status);
                }
                // Only altered (a property, a cancel asked for): decide again.
                Written::Changed => {}
            }
        }
    }

    /// A batch that will not commit: its record says `Failed`, its locks are removed
    /// (settling a head whose batch failed removes the lock) and its staged intents rolled
    /// back (a declare's folder claim released, a deregister's mark removed). Failures here
    /// are left to the next settler, which finds the record failed or, failing that,
    /// abandoned.
    async fn abandon_batch(
        &self,
        tx: &mut Transaction,
        entries: &[Entry],
        locked: &[Locked],
        error: &Error,
    ) {
        if let Err(e) = self
            .decide_batch(tx, TxStatus::Failed, Some(error.message.clone()))
            .await
        {
            tracing::warn!(transaction = %tx.record.id, error = %e, "could not fail a batch commit");
            return;
        }
        for entry in entries.iter().filter(|e| e.locks_head()) {
            if let Err(e) = self
                .settle_log(&entry.record, entry.branch.as_deref())
                .await
            {
                tracing::warn!(transaction = %tx.record.id, error = %e, "could not remove a failed batch's lock");
            }
        }
        for staged in locked {
            if let Locked::Intent {
                key, etag, intent, ..
            } = staged
                && let Err(e) = self
                    .settle(key, super::records::Entry::Intent(intent.clone()), etag)
                    .await
            {
                tracing::warn!(transaction = %tx.record.id, error = %e, "could not roll back a failed batch's declare or deregister");
            }
        }
    }
}
