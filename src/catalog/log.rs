//! The commit log of a table's versions: the catalog's own record of what is committed,
//! which managed readers are answered from and every commit through the catalog orders on.
//!
//! Each table (and branch) has one *head* beside its receipts
//! (`.lance-gateway/commits/<data folder>/<branch>/head.json`): the newest version committed
//! through the log, the final manifest it is published as, and, while a batch commit is
//! deciding, that batch's *lock* on the next version. Every change of the head is one
//! conditional write on it, and that write is the commit point of a CreateTableVersion. A
//! batch (`batch`) locks the head of each of its tables, then commits with one conditional
//! write on its transaction record, and each lock then stands for a committed version.
//!
//! Invariants:
//! - **A version is visible to managed readers exactly when its record is committed**: the
//!   head's version, or a lock whose batch record says `Succeeded`. Whoever reads a head
//!   (a reader, a writer, the recovery sweep) first *settles* it: it publishes a committed
//!   version whose manifest is not yet at its final name (copying the staged manifest,
//!   create-if-absent) and only then moves the head on, so no reader is ever sent to a
//!   final manifest that is missing or to a staging name.
//! - **One writer per version.** A commit checks that its version follows both the head
//!   and the newest manifest in storage, and commits with a write conditional on the head it
//!   read; a rival's commit in between fails that condition. A lock of a batch that is still
//!   deciding refuses every other writer of the table (409, code 14).
//! - **A batch lock is settled by its batch's record alone**: `Succeeded` rolls it forward,
//!   `Failed` or `Canceled` (or no record) removes it, `Running` leaves it, and a `Running`
//!   record past the grace period is first failed (a conditional write, which the batch's own
//!   commit write races and exactly one wins).
//! - **Storage stays the truth for versions made around the log** (unmanaged writers; the
//!   gateway's own data operations and maintenance commit through it, `own_commits`): the
//!   newest version is the newer of the head and the storage listing, so nothing committed
//!   to `_versions/` is hidden.

use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::Layout;
use super::records::{FORMAT_VERSION, TableRecord, decode, encode, now_ms};
use super::transactions::{TransactionRecord, TxStatus, locate};
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// A table's newest version as the log has it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Head {
    pub format_version: u32,
    /// The table (its record's uid): a head left by a table since deregistered and
    /// registered again is not this table's.
    pub table_uid: String,
    /// The newest version committed through the log (0 when the log starts with a lock).
    pub version: u64,
    /// Its final manifest's file name in the versions folder (empty for a version the log
    /// took from storage).
    #[serde(default)]
    pub manifest: String,
    /// The staging manifest it is published from. It stays after publishing (a settler
    /// that sees storage at or past `version` knows it is published; one that does not
    /// publishes again, harmlessly, and clears it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub committed_at_ms: u64,
    /// The batch commit it came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<Lock>,
}

impl Head {
    /// A head of the table with uid `table_uid` at `version`, committed now, naming nothing
    /// else.
    pub fn new(table_uid: &str, version: u64) -> Head {
        Head {
            format_version: FORMAT_VERSION,
            table_uid: table_uid.to_string(),
            version,
            manifest: String::new(),
            staged: None,
            size: 0,
            committed_at_ms: now_ms(),
            transaction_id: None,
            lock: None,
        }
    }
}

/// A batch commit's hold on a table's next version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lock {
    pub transaction_id: String,
    /// The version the batch commits, or, for a batch that only deletes versions of the
    /// table, the next version, which it holds while deciding.
    pub version: u64,
    /// The final manifest's file name, and the staged manifest it will be published from
    /// (both empty when the batch commits no version of the table).
    pub manifest: String,
    pub staged: String,
    pub size: u64,
    /// When the lock was taken (to tell a batch in flight from one left behind).
    #[serde(default)]
    pub locked_at_ms: u64,
    /// The final manifests (file names in the versions folder) the batch deletes, chosen
    /// when it locked the table: they go, by whoever settles the lock, once it commits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<String>,
}

impl Lock {
    /// Whether the batch commits a version of the table (rather than only deleting some).
    pub fn commits_version(&self) -> bool {
        !self.manifest.is_empty()
    }
}

/// A head as read: what it says (`None`: no head of this table), and the ETag to write
/// it back at (`None`: nothing at its key).
#[derive(Clone, Debug, Default)]
pub struct LogState {
    pub head: Option<Head>,
    pub etag: Option<String>,
    /// Whether settling it published or changed anything (a reader that read the dataset
    /// beside it reads again).
    pub worked: bool,
    /// The ETag of the final manifest this settle published last, where it published one.
    pub published_etag: Option<String>,
}

impl LogState {
    /// The newest version the log holds committed.
    pub fn version(&self) -> u64 {
        self.head.as_ref().map_or(0, |h| h.version)
    }

    /// The lock of a batch still deciding, if one holds the table.
    pub fn live_lock(&self) -> Option<&Lock> {
        self.head.as_ref().and_then(|h| h.lock.as_ref())
    }
}

/// What became of a staged manifest's publication.
pub enum Published {
    /// At its final name (by this call or an earlier one), with this ETag.
    At(String),
    /// The final name holds another manifest: a writer around the log took the version.
    Taken,
}

/// How far apart the clocks of gateways serving one warehouse may be, for telling whether a
/// batch's settle may have finished while a read beside the head ran (`batch_settled_since`).
const CLOCK_SLACK_MS: u64 = 5_000;

/// Whether the settled head `log` was last moved by a batch's settle that may have finished
/// after `since` (by the clock of whichever gateway settled it, give or take
/// `CLOCK_SLACK_MS`). Only heads a batch moved, and only for moments after, so the second
/// read it asks for is rare.
fn batch_settled_since(log: &LogState, since: u64) -> bool {
    log.head.as_ref().is_some_and(|h| {
        h.transaction_id.is_some() && h.committed_at_ms.saturating_add(CLOCK_SLACK_MS) >= since
    })
}

/// How a batch's record decides its locks (and the intents it decides).
pub(crate) enum Decision {
    Committed,
    Aborted,
    Deciding,
    /// `Running`, but its gateway stopped refreshing it.
    Abandoned(String, String, TransactionRecord),
}

impl Layout {
    /// The head of the log of a table's data folder `data_key` (a store key) on `branch`.
    pub fn head_key(cell: &str, data_key: &str, branch: Option<&str>) -> String {
        format!(
            "{}{}/head.json",
            Self::commits_prefix(cell, data_key),
            super::commits::branch_segment(branch)
        )
    }
}

impl Catalog {
    pub(crate) fn head_key_of(&self, record: &TableRecord, branch: Option<&str>) -> Result<String> {
        let cell = self.cell_of(&record.id)?;
        Ok(Layout::head_key(&cell, &record.data_key, branch))
    }

    /// Reads a head; one of another table (an earlier incarnation) reads as none, but keeps
    /// its ETag so the first write replaces it.
    async fn read_head(&self, key: &str, record: &TableRecord) -> Result<LogState> {
        let Some(obj) = self.store.get(key).await? else {
            return Ok(LogState::default());
        };
        let head: Head = decode(key, &obj.body)?;
        Ok(LogState {
            head: Some(head).filter(|h| h.table_uid == record.uid),
            etag: Some(obj.etag),
            ..Default::default()
        })
    }

    /// Writes `head` over the one read at `etag` (create-if-absent when nothing was there);
    /// answers its new ETag, or `None` when someone wrote in between.
    pub(crate) async fn put_head(
        &self,
        key: &str,
        head: &Head,
        etag: Option<&str>,
    ) -> Result<Option<String>> {
        let cond = match etag {
            Some(etag) => Condition::IfMatch(etag.to_string()),
            None => Condition::IfAbsent,
        };
        match self.store.put(key, encode(head), cond).await {
            Ok(etag) => Ok(Some(etag)),
            Err(StoreError::PreconditionFailed) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A fresh head for `record`, at `version` (from storage, or 0).
    pub(crate) fn new_head(record: &TableRecord, version: u64) -> Head {
        Head::new(&record.uid, version)
    }

    /// Publishes the staged manifest `dir/staged` as `dir/manifest` (create-if-absent): the
    /// step that makes a committed version visible to readers that list storage. Repeating
    /// it is harmless. A staged manifest already gone was published by whoever removed it.
    pub(crate) async fn publish_staged(
        &self,
        dir: &str,
        manifest: &str,
        staged: &str,
        version: u64,
    ) -> Result<Published> {
        let final_key = format!("{dir}{manifest}");
        let staging_key = format!("{dir}{staged}");
        let Some(body) = self.store.get(&staging_key).await? else {
            return match self.store.get(&final_key).await? {
                Some(existing) => Ok(Published::At(existing.etag)),
                None => Err(Error::internal(
                    "a committed version's manifest is neither staged nor published",
                    format!("version {version}: {staging_key}"),
                )),
            };
        };
        self.publish_body(dir, manifest, body.body).await
    }

    /// Publishes `body` as `dir/manifest` (create-if-absent); the same bytes already there
    /// were published before.
    pub(crate) async fn publish_body(
        &self,
        dir: &str,
        manifest: &str,
        body: bytes::Bytes,
    ) -> Result<Published> {
        let final_key = format!("{dir}{manifest}");
        match self
            .store
            .put(&final_key, body.clone(), Condition::IfAbsent)
            .await
        {
            Ok(etag) => Ok(Published::At(etag)),
            Err(StoreError::PreconditionFailed) => match self.store.get(&final_key).await? {
                Some(existing) if existing.body == body => Ok(Published::At(existing.etag)),
                Some(_) => Ok(Published::Taken),
                // Removed in between (a cleanup of an old version): published once.
                None => Ok(Published::At(String::new())),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the final manifests `names` of the versions folder `dir` (a committed batch's
    /// deletions; repeating it is harmless).
    async fn delete_manifests(&self, dir: &str, names: &[String]) -> Result<()> {
        for chunk in names.chunks(16) {
            futures::future::try_join_all(chunk.iter().map(|name| {
                let key = format!("{dir}{name}");
                async move { self.store.delete(&key, Condition::None).await }
            }))
            .await?;
        }
        Ok(())
    }

    /// How the record of batch `id` decides its locks.
    pub(crate) async fn decision(&self, id: &str) -> Result<Decision> {
        let Ok((_, key)) = locate(&self.layout, id) else {
            return Ok(Decision::Aborted);
        };
        let Some(obj) = self.store.get(&key).await? else {
            // A record is kept a day after it ends, and the sweep settles a committed
            // batch's tables before it removes the record: none means none committed.
            return Ok(Decision::Aborted);
        };
        let record: TransactionRecord = decode(&key, &obj.body)?;
        Ok(match record.status {
            TxStatus::Succeeded => Decision::Committed,
            TxStatus::Failed | TxStatus::Canceled => Decision::Aborted,
            TxStatus::Queued | TxStatus::Running if self.abandoned(&record) => {
                Decision::Abandoned(key, obj.etag, record)
            }
            TxStatus::Queued | TxStatus::Running => Decision::Deciding,
        })
    }

    /// Decides a batch whose gateway stopped before its commit write: `Failed`, conditional
    /// on the record as read (its commit, if it comes after all, then fails instead).
    pub(crate) async fn abort_abandoned(
        &self,
        key: &str,
        etag: String,
        mut record: TransactionRecord,
    ) -> Result<()> {
        record.status = TxStatus::Failed;
        record.error = Some("its gateway stopped before the batch committed".into());
        record.updated_at_ms = now_ms();
        match self
            .store
            .put(key, encode(&record), Condition::IfMatch(etag))
            .await
        {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the head of the table's log on `branch` and settles it (see the module's
    /// invariants): afterwards its version is published and a lock left on it belongs to a
    /// batch still deciding.
    pub async fn settle_log(&self, record: &TableRecord, branch: Option<&str>) -> Result<LogState> {
        let key = self.head_key_of(record, branch)?;
        let first = self.read_head(&key, record).await?;
        self.settle_read(record, branch, first, None).await
    }

    /// `settle_log` with `other` read beside the head: `seen` tells from its result the
    /// newest version storage held when it was read (a listing, or a dataset opened at its
    /// latest version). A head whose version storage already holds needs no publishing, so
    /// the common case costs one read of the head beside `other` and no write.
    ///
    /// The answer says `worked` (read `other` again) also when a batch's settle, by anyone,
    /// finished while `other` was read: `other` may then predate the batch's publish or its
    /// deletions while the head already shows them settled, and a reader answering from it
    /// could see this table old after another reader saw the batch's other tables new.
    pub async fn settle_beside<T>(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        other: impl std::future::Future<Output = T>,
        seen: impl FnOnce(&T) -> Option<u64>,
    ) -> (Result<LogState>, T) {
        let key = match self.head_key_of(record, branch) {
            Ok(key) => key,
            Err(e) => return (Err(e), other.await),
        };
        let since = now_ms();
        let (first, other) = tokio::join!(self.read_head(&key, record), other);
        let published = seen(&other);
        let log = match first {
            Ok(first) => self
                .settle_read(record, branch, first, published)
                .await
                .map(|mut log| {
                    log.worked |= batch_settled_since(&log, since);
                    log
                }),
            Err(e) => Err(e),
        };
        (log, other)
    }

    /// Settles the head read as `first`; `published`: the newest version storage was seen
    /// to hold (a staged note at or below it was published already).
    async fn settle_read(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        first: LogState,
        published: Option<u64>,
    ) -> Result<LogState> {
        let key = self.head_key_of(record, branch)?;
        let dir = super::versions::versions_dir(record, branch)?;
        let mut worked = false;
        let mut published_etag = None;
        let mut next_read = Some(first);
        // Each round either returns or makes one conditional write that moves the head on.
        loop {
            let state = match next_read.take() {
                Some(state) => state,
                None => self.read_head(&key, record).await?,
            };
            let Some(head) = state.head.clone() else {
                return Ok(LogState {
                    worked,
                    published_etag,
                    ..state
                });
            };
            let mut next = head.clone();
            // A staged note is kept after publishing (clearing it would cost every commit a
            // write): storage holding the version shows it published.
            let unpublished = head
                .staged
                .as_ref()
                .filter(|_| published.is_none_or(|p| p < head.version));
            if let Some(staged) = unpublished {
                match self
                    .publish_staged(&dir, &head.manifest, staged, head.version)
                    .await?
                {
                    Published::At(etag) => published_etag = Some(etag),
                    Published::Taken => tracing::warn!(
                        table = %self.show(&record.id),
                        version = head.version,
                        "a version committed through the catalog was taken in storage by a \
                         writer that bypassed it; storage's manifest stands"
                    ),
                }
                next.staged = None;
            } else if let Some(lock) = &head.lock {
                match self.decision(&lock.transaction_id).await? {
                    Decision::Deciding => {
                        return Ok(LogState {
                            worked,
                            published_etag,
                            ..state
                        });
                    }
                    Decision::Abandoned(tx_key, tx_etag, tx) => {
                        self.abort_abandoned(&tx_key, tx_etag, tx).await?;
                        continue;
                    }
                    Decision::Aborted => next.lock = None,
                    Decision::Committed if !lock.commits_version() => {
                        self.delete_manifests(&dir, &lock.deletes).await?;
                        next = Head {
                            committed_at_ms: now_ms(),
                            transaction_id: Some(lock.transaction_id.clone()),
                            lock: None,
                            ..head.clone()
                        };
                    }
                    Decision::Committed => {
                        self.delete_manifests(&dir, &lock.deletes).await?;
                        match self
                            .publish_staged(&dir, &lock.manifest, &lock.staged, lock.version)
                            .await?
                        {
                            Published::At(etag) => published_etag = Some(etag),
                            Published::Taken => tracing::warn!(
                                table = %self.show(&record.id),
                                version = lock.version,
                                "a batch's version was taken in storage by a writer that \
                                 bypassed the catalog; storage's manifest stands"
                            ),
                        }
                        next = Head {
                            version: lock.version,
                            manifest: lock.manifest.clone(),
                            staged: None,
                            size: lock.size,
                            committed_at_ms: now_ms(),
                            transaction_id: Some(lock.transaction_id.clone()),
                            lock: None,
                            ..head.clone()
                        };
                    }
                }
            } else {
                return Ok(LogState {
                    worked,
                    published_etag,
                    ..state
                });
            }
            worked = true;
            // Lost to a rival's write: read again (the rival settled it, or moved it on).
            self.put_head(&key, &next, state.etag.as_deref()).await?;
        }
    }

    /// What settling the table's main log would do, without doing it, when it is work a
    /// stopped gateway left (older than the grace period): `None` when there is none.
    pub async fn unsettled(&self, record: &TableRecord) -> Result<Option<String>> {
        let key = self.head_key_of(record, None)?;
        let Some(head) = self.read_head(&key, record).await?.head else {
            return Ok(None);
        };
        let dir = super::versions::versions_dir(record, None)?;
        if let Some(staged) = &head.staged
            && self.stale(head.committed_at_ms)
            && self
                .store
                .get(&format!("{dir}{}", head.manifest))
                .await?
                .is_none()
        {
            return Ok(Some(format!(
                "version {} is committed but its manifest is not published (staged as {staged})",
                head.version
            )));
        }
        let Some(lock) = head.lock.filter(|l| self.stale(l.locked_at_ms)) else {
            return Ok(None);
        };
        Ok(match self.decision(&lock.transaction_id).await? {
            Decision::Deciding => None,
            Decision::Committed if !lock.commits_version() => Some(format!(
                "batch commit {} committed the deletion of {} version(s) but did not finish it",
                lock.transaction_id,
                lock.deletes.len()
            )),
            Decision::Committed => Some(format!(
                "batch commit {} committed version {} but did not publish it",
                lock.transaction_id, lock.version
            )),
            Decision::Aborted | Decision::Abandoned(..) => Some(format!(
                "batch commit {} did not commit and left its lock on version {}",
                lock.transaction_id, lock.version
            )),
        })
    }

    /// Whether batch `id` has committed (its record says `Succeeded`). Reads only: a batch
    /// still deciding, or abandoned and not yet failed, has not.
    pub(crate) async fn batch_committed(&self, id: &str) -> Result<bool> {
        Ok(matches!(self.decision(id).await?, Decision::Committed))
    }

    /// Settles the tables of committed batch `id` (the recovery sweep, before the batch's
    /// record is removed): the heads it locked, and the declares and deregisters it decides.
    /// Tables gone since are skipped.
    pub(crate) async fn settle_batch_items(
        &self,
        id: &str,
        items: &[super::transactions::BatchItem],
    ) -> Result<()> {
        for item in items {
            if item.change.is_some() {
                self.settle_batch_entry(&item.table, Some(id)).await?;
                continue;
            }
            if let Some((record, _)) = self.read_table(&item.table).await? {
                self.settle_log(&record, item.branch.as_deref()).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_sit_beside_the_receipts_of_their_branch() {
        assert_eq!(
            Layout::head_key("", "ml/docs.lance", None),
            ".lance-gateway/commits/ml/docs%2Elance/main/head.json"
        );
        let dev = Layout::head_key("b/", "b/t.lance", Some("feature/x"));
        assert!(dev.starts_with("b/.lance-gateway/commits/"), "{dev}");
        assert!(dev.ends_with("/@feature%2Fx/head.json"), "{dev}");
    }

    #[test]
    fn a_read_beside_a_head_a_batch_just_settled_is_read_again() {
        let now = now_ms();
        let state = |transaction: Option<&str>, committed_at_ms: u64| LogState {
            head: Some(Head {
                transaction_id: transaction.map(str::to_string),
                committed_at_ms,
                ..Head::new("u", 3)
            }),
            ..Default::default()
        };
        // Settled by a batch while the read ran, or a moment before by a clock running late.
        assert!(batch_settled_since(&state(Some("tx"), now), now));
        assert!(batch_settled_since(&state(Some("tx"), now - 4_000), now));
        // Long before the read, or moved by a single commit: the read stands.
        assert!(!batch_settled_since(&state(Some("tx"), now - 60_000), now));
        assert!(!batch_settled_since(&state(None, now), now));
        assert!(!batch_settled_since(&LogState::default(), now));
    }

    #[test]
    fn a_head_without_a_lock_reads_back_as_written() {
        let head = Head {
            format_version: FORMAT_VERSION,
            table_uid: "u".into(),
            version: 3,
            manifest: "18446744073709551612.manifest".into(),
            staged: Some("18446744073709551612.manifest-x".into()),
            size: 10,
            committed_at_ms: 1,
            transaction_id: None,
            lock: None,
        };
        let back: Head = decode("k", &encode(&head)).unwrap();
        assert_eq!(back, head);
        assert!(!String::from_utf8_lossy(&encode(&head)).contains("lock"));
    }
}
