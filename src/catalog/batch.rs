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
use std::time::{Duration, Instant};

use futures::future::{join_all, try_join_all};
use serde::{Deserialize, Serialize};

use super::idempotency::{Claimed, Key, refusal};
use super::layout::Layout;
use super::log::{Head, Lock, LogState};
use super::records::{Intent, Properties, TableRecord, decode, now_ms};
use super::transactions::{BatchItem, Transaction, TransactionRecord, TxStatus, Written, locate};
use super::versions::{
    CommittedVersion, NewVersion, Staging, check_ranges, version_of_file, versions_dir,
};
use super::{Catalog, Patience};
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

/// The operation a batch's idempotency key is claimed for (BatchCreateTableVersions and
/// BatchCommitTables alike: the fingerprint tells their requests apart).
pub const BATCH_OP: &str = "batch_commit";

/// How long after its key was claimed a batch's record must exist: the gateway writes it
/// right after the claim, so a claim this old without a record belongs to a gateway that
/// stopped in between, and nothing of its batch was applied.
const UNSTARTED_MS: u64 = 10_000;

/// What a batch's entry did, in its answer. Kept in the batch's record with its commit, so
/// a retry by key is answered the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Its table's head is locked (at `key`, as `head`, written at `etag`); `count`: how
    /// many versions the lock deletes.
    Head {
        count: u64,
        key: String,
        etag: String,
        head: Head,
    },
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

/// How long a batch taking its tables in order waits for the batches ahead of it: each one
/// holding a table it needs for up to `each`, all of them until `until`.
#[derive(Clone, Copy)]
struct Line {
    until: Instant,
    each: Duration,
}

impl Line {
    /// The patience for one holder: `each`, within what is left of the line's wait.
    fn patience(&self) -> Patience {
        Patience::new(
            self.each
                .min(self.until.saturating_duration_since(Instant::now())),
        )
    }
}

/// What trying to lock one entry came to.
enum Taken {
    Locked(Locked),
    /// Another batch, still deciding, holds the table (its transaction id).
    Held(String),
}

/// What a retry by key finds of the batch its key names.
enum Replay {
    /// The first attempt's outcome.
    Answer(Result<(String, Vec<Done>)>),
    /// Its gateway stopped before it wrote the batch's record: nothing of it was applied,
    /// and the retry runs it under this id.
    Unstarted(String),
}

/// Fault injection for the suites (`LANCE_GATEWAY_FAULT_COMMIT`): a batch's deciding write
/// fails as a store that loses its answer would, after it `landed` or `lost` it, and the
/// store then fails the batch's record for `LANCE_GATEWAY_FAULT_COMMIT_MS` (10 s unless
/// set), so the gateway cannot learn the outcome. Unset outside the suites.
struct CommitFault {
    /// Whether the write lands, and until when the record cannot be read or written.
    fault: Option<(bool, Instant)>,
}

impl CommitFault {
    fn new() -> CommitFault {
        static FAULT: std::sync::LazyLock<Option<(bool, Duration)>> =
            std::sync::LazyLock::new(|| {
                let landed = match std::env::var("LANCE_GATEWAY_FAULT_COMMIT").ok()?.as_str() {
                    "landed" => true,
                    "lost" => false,
                    _ => return None,
                };
                let ms = std::env::var("LANCE_GATEWAY_FAULT_COMMIT_MS")
                    .ok()
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(10_000);
                Some((landed, Duration::from_millis(ms)))
            });
        CommitFault {
            fault: FAULT.map(|(landed, down)| (landed, Instant::now() + down)),
        }
    }

    /// The first try of the deciding write.
    async fn first(
        &self,
        catalog: &Catalog,
        tx: &mut Transaction,
        planned: &[Done],
    ) -> Result<bool> {
        let Some((landed, _)) = self.fault else {
            return catalog
                .decide_batch(tx, TxStatus::Succeeded, None, planned)
                .await;
        };
        tracing::warn!(transaction = %tx.record.id, landed, "fault injection: a batch's commit write loses its answer");
        if landed {
            let mut sent = Transaction {
                key: tx.key.clone(),
                etag: tx.etag.clone(),
                record: tx.record.clone(),
            };
            catalog
                .decide_batch(&mut sent, TxStatus::Succeeded, None, planned)
                .await?;
        }
        Err(Error::unavailable("the warehouse store failed")
            .with_detail("fault injection: the connection was reset after the request was sent"))
    }

    /// Whether the store still fails the batch's record.
    fn still(&self) -> bool {
        self.fault.is_some_and(|(_, until)| Instant::now() < until)
    }
}

/// Removes a published version's staging manifest after the answer.
fn forget_later(catalog: &Arc<Catalog>, staging: Staging) {
    let forgetting = catalog.clone();
    catalog.after_answer(async move { forgetting.forget_staged(&staging).await });
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

/// A failure of batch `id` that its record holds (a retry by key is answered the same):
/// answered with the batch's transaction id, which tells a client that the failure is
/// settled.
fn of_batch(mut error: Error, id: &str) -> Error {
    error.transaction_id = Some(id.to_string());
    error
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
        self.commit_batch_keyed(ctx, entries, None).await
    }

    /// `commit_batch` under an idempotency key (`idempotency`): a request whose key was
    /// used before is answered with the first attempt's outcome, waiting for it if that
    /// batch is still deciding, and applies nothing again.
    pub async fn commit_batch_keyed(
        self: &Arc<Self>,
        ctx: &Ctx,
        entries: Vec<(Vec<String>, Change)>,
        key: Option<Key>,
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
        // A key used before answers the first attempt's outcome, before anything is checked
        // (a committed batch's staged manifests are gone, and would fail the check).
        let cell = self.layout.place(&entries[0].0)?.cell;
        let mut rerun = None;
        if let Some(key) = &key
            && let Some(claim) = self.find_key(ctx, &cell, key, BATCH_OP).await?
        {
            match self.batch_outcome(&claim).await? {
                Replay::Answer(answer) => return answer,
                Replay::Unstarted(id) => rerun = Some(id),
            }
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

        // 2. Record (its key claimed first, naming it).
        let items: Vec<BatchItem> = checked.iter().map(Entry::item).collect();
        let results = BTreeMap::from([
            ("tables".to_string(), items.len().to_string()),
            ("versions".to_string(), self.summary(&items)),
        ]);
        let rerunning = rerun.is_some();
        let id = match rerun {
            Some(id) => id,
            None => self.new_transaction_id(&checked[0].record.id)?,
        };
        if let Some(key) = &key
            && !rerunning
            && let Some(claim) = self.claim_key(ctx, &cell, key, BATCH_OP, Some(&id)).await?
        {
            // The same request, sent again while the first was in flight: its outcome.
            return match self.batch_outcome(&claim).await? {
                Replay::Answer(answer) => answer,
                Replay::Unstarted(id) => Err(conflict(format!(
                    "batch commit {id}, claimed by the same idempotency key, has not started; \
                     retry"
                ))),
            };
        }
        let begun = self
            .begin_transaction_of(
                &id,
                &checked[0].record.id,
                "batch_commit",
                "",
                results,
                items,
            )
            .await?;
        let Some(mut tx) = begun else {
            // A rerun under a claimed key whose first attempt wrote its record after all.
            return match self.batch_outcome_of(&id, None).await? {
                Replay::Answer(answer) => answer,
                Replay::Unstarted(_) => Err(Error::internal(
                    "a batch record was there and then was not",
                    &id,
                )),
            };
        };
        fault("recorded").await;

        // 3. Lock.
        let (locked, failed) = self.lock_entries(&checked, &id).await;
        if let Some(error) = failed {
            self.abandon_batch(&mut tx, &checked, locked.iter().flatten(), &error)
                .await;
            return Err(of_batch(error, &id));
        }
        let locked: Vec<Locked> = locked.into_iter().flatten().collect();

        fault("locked").await;

        // 4. Commit, with what each entry does written into the deciding write: a retry by
        // key is answered from it.
        let planned: Vec<Done> = checked
            .iter()
            .zip(&locked)
            .map(|(entry, locked)| self.planned(entry, locked))
            .collect();
        let down = CommitFault::new();
        let decided = match self.decide_commit(&mut tx, &planned, &down).await {
            Ok(decided) => decided,
            Err(unknown) => {
                // The store would not say; the gateway keeps asking after the answer, and
                // finishes the batch whichever way it went.
                let catalog = self.clone();
                self.after_answer(async move {
                    catalog
                        .finish_undecided(tx, checked, locked, planned, down)
                        .await;
                });
                return Err(unknown);
            }
        };
        if !decided {
            let error = conflict(format!(
                "batch commit {id} was failed before it committed (it outlasted the grace \
                 period, or was canceled); nothing of it is visible"
            ));
            self.abandon_batch(&mut tx, &checked, &locked, &error).await;
            return Err(of_batch(error, &id));
        }

        fault("committed").await;

        // 5. Publish. The batch has committed: from here on nothing turns the answer into a
        // failure; what cannot be published now is left to the next reader or writer of
        // each table and to this gateway after the answer.
        let done = self
            .publish_batch(&id, &tx.record.batch, &checked, &locked, planned)
            .await;
        Ok((id, done))
    }

    /// The record's summary of a batch's entries.
    fn summary(&self, items: &[BatchItem]) -> String {
        items
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
            .join(" ")
    }

    /// What an entry does once its batch commits, as far as it is known before publishing
    /// (a version's ETag is learned from its publish).
    fn planned(&self, entry: &Entry, locked: &Locked) -> Done {
        match (&entry.kind, locked) {
            (Kind::Version { staging, size }, _) => Done::Version(CommittedVersion {
                version: staging.version,
                manifest_path: self
                    .layout
                    .store_path_of(&format!("{}{}", staging.dir, staging.manifest)),
                size: *size,
                e_tag: None,
            }),
            (Kind::Declare { .. }, Locked::Intent { record, .. }) => Done::Declared(record.clone()),
            (_, Locked::Intent { record, .. }) => Done::Deregistered(record.clone()),
            (_, Locked::Head { count, .. }) => Done::Deleted(*count),
        }
    }

    /// Step 5: every entry published, as far as the store allows; answers what each did.
    /// Entries the store refused now are settled again after the answer (and by whoever
    /// meets them meanwhile).
    async fn publish_batch(
        self: &Arc<Self>,
        id: &str,
        items: &[BatchItem],
        checked: &[Entry],
        locked: &[Locked],
        planned: Vec<Done>,
    ) -> Vec<Done> {
        // The tables one by one under fault injection, to stop between them.
        let settled: Vec<Result<Option<LogState>>> = if fault_step().is_some() {
            let mut settled = Vec::with_capacity(checked.len());
            for (entry, locked) in checked.iter().zip(locked) {
                settled.push(self.publish_entry(entry, locked).await);
                fault("published_one").await;
            }
            settled
        } else {
            join_all(
                checked
                    .iter()
                    .zip(locked)
                    .map(|(e, l)| self.publish_entry(e, l)),
            )
            .await
        };
        let mut unsettled = false;
        let mut done = Vec::with_capacity(planned.len());
        for ((entry, log), planned) in checked.iter().zip(settled).zip(planned) {
            let log = match log {
                Ok(log) => log,
                Err(e) => {
                    tracing::warn!(transaction = %id, table = %self.show(&entry.record.id), error = %e, "a committed batch's table is left for its next reader, or for this gateway after the answer, to publish");
                    unsettled = true;
                    None
                }
            };
            let (staging, mut version) = match (&entry.kind, planned) {
                (Kind::Version { staging, .. }, Done::Version(version)) => (staging, version),
                (_, other) => {
                    done.push(other);
                    continue;
                }
            };
            if let Some(log) = log {
                version.e_tag = log
                    .published_etag
                    .filter(|t| !t.is_empty() && self.layout.shares_etags());
                if let Err(e) = self
                    .record_published(&entry.record, staging, &version)
                    .await
                {
                    // No receipt: the staging manifest is kept, and answers a retry instead.
                    tracing::warn!(transaction = %id, table = %self.show(&entry.record.id), error = %e, "could not write a committed batch's receipt; its staging manifest is kept");
                    done.push(Done::Version(version));
                    continue;
                }
                forget_later(self, staging.clone());
            }
            done.push(Done::Version(version));
        }
        if unsettled {
            let (catalog, id, items) = (self.clone(), id.to_string(), items.to_vec());
            self.after_answer(async move {
                if let Err(e) = catalog.settle_batch_items(&id, &items).await {
                    tracing::warn!(transaction = %id, error = %e, "a committed batch is left for its tables' next readers and the recovery sweep to publish");
                }
            });
        }
        done
    }

    /// Step 3: every entry's intent staged and every head locked. The common case takes
    /// them all at once. When another batch holds one of the heads, the heads taken are let
    /// go and taken again one by one in one global order (their keys'), each waited for
    /// while a live batch holds it: two batches then never each hold a table the other
    /// waits for, so of overlapping batches one always gets through. The wait is for a line
    /// that moves (`Line`): each batch holding a table is waited for up to `commit_wait`,
    /// and the line in all up to twice that, so a batch behind several others that each
    /// commit in turn is not refused as held while the ones ahead of it keep committing.
    /// Answers what was taken, by entry, and the error that stops the batch, if any.
    async fn lock_entries(
        &self,
        checked: &[Entry],
        id: &str,
    ) -> (Vec<Option<Locked>>, Option<Error>) {
        let outcomes = join_all(checked.iter().map(|e| self.lock_entry(e, id, None))).await;
        let mut locked: Vec<Option<Locked>> = Vec::with_capacity(checked.len());
        let (mut held, mut failed) = (false, None);
        for outcome in outcomes {
            match outcome {
                Ok(Taken::Locked(l)) => locked.push(Some(l)),
                Ok(Taken::Held(_)) => {
                    held = true;
                    locked.push(None);
                }
                Err(error) => {
                    failed.get_or_insert(error);
                    locked.push(None);
                }
            }
        }
        if failed.is_some() || !held {
            return (locked, failed);
        }
        let mut order = Vec::new();
        for (i, entry) in checked.iter().enumerate().filter(|(_, e)| e.locks_head()) {
            if let Some(Locked::Head {
                key, etag, head, ..
            }) = locked[i].take()
            {
                self.unlock_head(&key, &etag, head).await;
            }
            match self.head_key_of(&entry.record, entry.branch.as_deref()) {
                Ok(key) => order.push((key, i)),
                Err(e) => return (locked, Some(e)),
            }
        }
        order.sort();
        let line = Line {
            until: Instant::now() + 2 * self.commit_wait,
            each: self.commit_wait,
        };
        for (_, i) in order {
            match self.lock_entry(&checked[i], id, Some(line)).await {
                Ok(Taken::Locked(l)) => locked[i] = Some(l),
                Ok(Taken::Held(by)) => {
                    let error = conflict(format!(
                        "table '{}' is held by batch commit {by}, which is committing (waited up \
                         to {} ms for it, {} ms for the batches ahead of this one in all)",
                        self.show(&checked[i].record.id),
                        line.each.as_millis(),
                        2 * line.each.as_millis()
                    ));
                    return (locked, Some(error));
                }
                Err(e) => return (locked, Some(e)),
            }
        }
        (locked, None)
    }

    /// Lets go of a head this batch locked, before the batch is decided (to take it again in
    /// order): the head as it was, without the lock, conditional on the lock's write. One
    /// that fails is found again as this batch's own lock, and kept.
    async fn unlock_head(&self, key: &str, etag: &str, mut head: Head) {
        head.lock = None;
        if let Err(e) = self.put_head(key, &head, Some(etag)).await {
            tracing::debug!(key, error = %e, "could not let go of a batch's lock to take it again in order");
        }
    }

    /// Step 4: the deciding write. When the store fails it (a timeout, a reset connection, a
    /// 5xx after the request was sent) the write may have landed or not: the record is read
    /// and the decision tried again, conditional on the record as the batch wrote it, until
    /// the store answers or `commit_wait` has passed. A write that landed shows as the
    /// record decided (`decide_batch`); one that did not is made again. Answers whether the
    /// batch committed, or the unknown-outcome error.
    async fn decide_commit(
        &self,
        tx: &mut Transaction,
        planned: &[Done],
        down: &CommitFault,
    ) -> Result<bool> {
        let first = match down.first(self, tx, planned).await {
            Ok(decided) => return Ok(decided),
            Err(e) => e,
        };
        let mut patience = Patience::new(self.commit_wait);
        while patience.wait().await {
            if down.still() {
                continue;
            }
            match self
                .decide_batch(tx, TxStatus::Succeeded, None, planned)
                .await
            {
                Ok(decided) => return Ok(decided),
                Err(e) => {
                    tracing::debug!(transaction = %tx.record.id, error = %e, "the store still fails a batch's commit write")
                }
            }
        }
        Err(Error::commit_state_unknown(
            Some(tx.record.id.clone()),
            first,
        ))
    }

    /// A batch whose answer said its outcome is unknown, finished in the owner's time: the
    /// decision is tried until the store answers (for up to the grace period; past it,
    /// whoever meets the record fails it as abandoned, which this write then loses to), then
    /// the batch is published or its locks removed.
    async fn finish_undecided(
        self: Arc<Self>,
        mut tx: Transaction,
        checked: Vec<Entry>,
        locked: Vec<Locked>,
        planned: Vec<Done>,
        down: CommitFault,
    ) {
        let id = tx.record.id.clone();
        let deadline = Instant::now() + Duration::from_millis(self.grace_ms);
        let mut pause = Duration::from_millis(50);
        let decided = loop {
            if Instant::now() >= deadline {
                tracing::warn!(transaction = %id, "a batch's outcome could not be learned from the store; whoever meets its record settles it once it is abandoned");
                return;
            }
            tokio::time::sleep(pause).await;
            // Soon after the store is back: the record is failed as abandoned once the
            // grace period has passed since the batch began.
            pause = (pause * 2).min(Duration::from_millis(250));
            if down.still() {
                continue;
            }
            match self
                .decide_batch(&mut tx, TxStatus::Succeeded, None, &planned)
                .await
            {
                Ok(decided) => break decided,
                Err(e) => {
                    tracing::debug!(transaction = %id, error = %e, "the store still fails a batch's commit write")
                }
            }
        };
        if decided {
            tracing::info!(transaction = %id, "a batch whose outcome was unknown committed");
            let items = tx.record.batch.clone();
            self.publish_batch(&id, &items, &checked, &locked, planned)
                .await;
        } else {
            let error = conflict(format!("batch commit {id} was failed before it committed"));
            self.abandon_batch(&mut tx, &checked, &locked, &error).await;
        }
    }

    /// The outcome of the batch a claimed key names (`idempotency`).
    async fn batch_outcome(&self, claim: &Claimed) -> Result<Replay> {
        let Some(id) = claim.record.transaction_id.as_deref() else {
            return Err(Error::internal(
                "a batch's idempotency key names no batch",
                &claim.store_key,
            ));
        };
        self.batch_outcome_of(id, Some(claim.record.claimed_at_ms))
            .await
    }

    /// The outcome of batch `id`, once decided: waited for (`commit_wait`) while a live
    /// gateway decides it; failed first when its gateway stopped before deciding it. A
    /// record that does not exist (its key claimed at `claimed_at_ms`, a while ago) is a
    /// batch whose gateway stopped before it started: `Unstarted`, to be run again.
    async fn batch_outcome_of(&self, id: &str, claimed_at_ms: Option<u64>) -> Result<Replay> {
        let (_, key) = locate(&self.layout, id)?;
        let mut patience = Patience::new(self.commit_wait);
        let mut last = None;
        loop {
            match self.store.get(&key).await {
                Ok(None) => {
                    // The claim is written just before the record: a moment after it, a
                    // missing record was never written.
                    if claimed_at_ms.is_some_and(|at| now_ms().saturating_sub(at) >= UNSTARTED_MS) {
                        return Ok(Replay::Unstarted(id.to_string()));
                    }
                }
                Ok(Some(obj)) => {
                    let record: TransactionRecord = decode(&key, &obj.body)?;
                    match record.status {
                        TxStatus::Succeeded => {
                            return Ok(Replay::Answer(Ok((
                                id.to_string(),
                                self.answers_of(&record).await,
                            ))));
                        }
                        TxStatus::Failed | TxStatus::Canceled => {
                            let code = record
                                .error_code
                                .unwrap_or(Code::ConcurrentModification as i32);
                            let message = record
                                .error
                                .unwrap_or_else(|| format!("batch commit {id} did not commit"));
                            return Ok(Replay::Answer(Err(of_batch(refusal(code, message), id))));
                        }
                        _ if self.abandoned(&record) => {
                            self.abort_abandoned(&key, obj.etag, record).await?;
                            continue;
                        }
                        _ => {}
                    }
                }
                Err(e) => last = Some(e),
            }
            if !patience.wait().await {
                let cause =
                    last.map_or("the batch is still deciding".to_string(), |e| e.to_string());
                return Ok(Replay::Answer(Err(Error::commit_state_unknown(
                    Some(id.to_string()),
                    cause,
                ))));
            }
        }
    }

    /// A committed batch's answer, from its record: the versions' ETags read from their
    /// published manifests where the client's store shares them (once its tables are
    /// settled, best effort: a reader would settle them anyway).
    async fn answers_of(&self, record: &TransactionRecord) -> Vec<Done> {
        if let Err(e) = self.settle_batch_items(&record.id, &record.batch).await {
            tracing::debug!(transaction = %record.id, error = %e, "could not settle a committed batch before answering its retry");
        }
        let mut answers = record.answers.clone();
        if self.layout.shares_etags() {
            for (done, item) in answers.iter_mut().zip(&record.batch) {
                if let Done::Version(v) = done
                    && let Ok(Some((table, _))) = self.read_table(&item.table).await
                    && let Ok(Some(receipt)) = self
                        .read_receipt(&table, item.branch.as_deref(), v.version)
                        .await
                {
                    v.e_tag = receipt.e_tag;
                }
            }
        }
        answers
    }

    /// Step 5 for one entry: its table's head settled (which publishes a committed lock),
    /// or its intent settled by the batch's record (which publishes a declared table, or
    /// deletes a deregistered one). A settle that fails here is left to the next reader or
    /// writer of the table, or to recovery: the batch has committed all the same.
    async fn publish_entry(&self, entry: &Entry, locked: &Locked) -> Result<Option<LogState>> {
        match locked {
            Locked::Head { .. } => Ok(Some(
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
    /// With `wait`, a head another batch holds is waited for until then; without, it is
    /// answered `Held` at once.
    async fn lock_entry(&self, entry: &Entry, id: &str, wait: Option<Line>) -> Result<Taken> {
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
                return Ok(Taken::Locked(Locked::Intent {
                    key: staged.pending_key,
                    etag: staged.etag,
                    intent: Self::batch_create_intent(&self.node, &staged.record, id),
                    record: staged.record,
                }));
            }
            Kind::Deregister => {
                let (key, etag, intent, record) =
                    self.stage_deregister(&entry.record.id, id).await?;
                return Ok(Taken::Locked(Locked::Intent {
                    key,
                    etag,
                    intent,
                    record,
                }));
            }
            Kind::Version { .. } | Kind::Delete { .. } => {}
        }
        self.lock_head(entry, id, wait).await
    }

    /// `lock_entry` for an entry that commits or deletes versions.
    async fn lock_head(&self, entry: &Entry, id: &str, wait: Option<Line>) -> Result<Taken> {
        let branch = entry.branch.as_deref();
        let key = self.head_key_of(&entry.record, branch)?;
        // The batch waited for, and the patience left for it.
        let mut waiting: Option<(String, Patience)> = None;
        let mut tries = 0;
        while tries < LOCK_TRIES {
            let (log, stored) = self
                .log_and_storage(&entry.record, branch, &entry.dir)
                .await;
            let (log, stored) = (log?, stored?);
            if let Some(lock) = log.live_lock() {
                if lock.transaction_id == id {
                    // This batch's own, which it could not let go of (`unlock_head`).
                    return Ok(Taken::Locked(Locked::Head {
                        count: lock.deletes.len() as u64,
                        key,
                        etag: log.etag.clone().unwrap_or_default(),
                        head: log
                            .head
                            .clone()
                            .unwrap_or_else(|| Self::new_head(&entry.record, 0)),
                    }));
                }
                let Some(line) = wait else {
                    return Ok(Taken::Held(lock.transaction_id.clone()));
                };
                let holder = &lock.transaction_id;
                if waiting.as_ref().is_none_or(|(by, _)| by != holder) {
                    // The line moved (or the wait begins): this holder gets its own patience.
                    waiting = Some((holder.clone(), line.patience()));
                }
                let (_, patience) = waiting.as_mut().expect("set just above");
                if patience.wait().await {
                    continue;
                }
                return Ok(Taken::Held(lock.transaction_id.clone()));
            }
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
            if let Some(etag) = self.put_head(&key, &head, log.etag.as_deref()).await? {
                return Ok(Taken::Locked(Locked::Head {
                    count,
                    key,
                    etag,
                    head,
                }));
            }
            tries += 1;
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
    /// A commit writes what each entry did (`planned`) with it; a failure, its error.
    async fn decide_batch(
        &self,
        tx: &mut Transaction,
        status: TxStatus,
        error: Option<&Error>,
        planned: &[Done],
    ) -> Result<bool> {
        loop {
            let mut record = tx.record.clone();
            if record.cancel_requested && status == TxStatus::Succeeded {
                return Ok(false);
            }
            record.status = status;
            record.error = error.map(|e| e.message.clone());
            record.error_code = error.map(|e| e.code as i32);
            if status == TxStatus::Succeeded {
                record.answers = planned.to_vec();
            }
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
    async fn abandon_batch<'a>(
        &self,
        tx: &mut Transaction,
        entries: &[Entry],
        locked: impl IntoIterator<Item = &'a Locked>,
        error: &Error,
    ) {
        if let Err(e) = self
            .decide_batch(tx, TxStatus::Failed, Some(error), &[])
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
