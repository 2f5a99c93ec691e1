//! Transactions (spec §2.8): the record of work that may outlive the request that started
//! it. An index build that takes longer than its request may wait answers with a
//! `transaction_id` and goes on; DescribeTransaction reports its status and
//! AlterTransaction asks it to stop or labels it with properties.
//!
//! Each transaction is one object, `transactions/<id>.json` in the catalog folder of the
//! table's cell, so any gateway serving the warehouse answers for it. Its owner writes
//! `Running`, then refreshes `updated_at_ms` every quarter of the grace period and writes
//! the outcome; every write is conditional on the ETag it read, so an alter and the owner
//! never lose each other's changes. A `Running` record not refreshed for the grace period
//! belongs to a gateway that stopped: readers report it as settled (`Failed`, unless the
//! caller finds the work committed). The id starts with the creation time, so the sweep
//! removes records older than `KEEP` by listing alone.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::{Layout, validate_bucket};
use super::records::{FORMAT_VERSION, decode, encode, new_uid, now_ms};
use crate::access::{Ctx, Level};
use crate::error::{Code, Error, Result};
use crate::store::{Condition, StoreError};

/// How long a finished transaction stays describable.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

impl TxStatus {
    pub fn name(self) -> &'static str {
        match self {
            TxStatus::Queued => "Queued",
            TxStatus::Running => "Running",
            TxStatus::Succeeded => "Succeeded",
            TxStatus::Failed => "Failed",
            TxStatus::Canceled => "Canceled",
        }
    }

    pub fn finished(self) -> bool {
        matches!(
            self,
            TxStatus::Succeeded | TxStatus::Failed | TxStatus::Canceled
        )
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TransactionRecord {
    pub format_version: u32,
    pub id: String,
    /// What runs: `create_index`.
    pub op: String,
    /// The table it runs on.
    pub table: Vec<String>,
    /// What it makes (the index name).
    #[serde(default)]
    pub target: String,
    pub status: TxStatus,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The gateway running it.
    pub node: String,
    pub started_at_ms: u64,
    pub updated_at_ms: u64,
    /// Set by AlterTransaction; the owner stops the work and writes `Canceled`.
    #[serde(default)]
    pub cancel_requested: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the work reports of itself: figures before it ran and after (fragments,
    /// unindexed rows, bytes reclaimed, versions made), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub results: BTreeMap<String, String>,
    /// A batch commit's versions, one per table (`batch`): what a settler rolls forward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<BatchItem>,
    /// A failed batch's error code (the spec's number): a retry by key answers it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i32>,
    /// What each entry of a committed batch did, written by its commit write itself: a
    /// retry by key (`idempotency`) is answered from it, whoever finished the batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<super::batch::Done>,
}

/// One table's change in a batch commit: a version it commits, or versions it deletes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BatchItem {
    pub table: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The version committed (0 for an entry that only deletes versions).
    pub version: u64,
    /// The ranges of versions deleted (`[start, end)`, `end` -1 for open), for a deleting
    /// entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes: Option<Vec<(i64, i64)>>,
    /// `declare` or `deregister` for an entry that creates or removes its table (version
    /// 0); none for one that commits or deletes versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

/// A transaction as its owner holds it: the record and the ETag it was written at.
pub struct Transaction {
    pub(crate) key: String,
    pub(crate) etag: String,
    pub record: TransactionRecord,
}

/// What became of a conditional write of a transaction record.
pub(crate) enum Written {
    Done,
    /// Someone wrote in between; the owner's copy is now theirs.
    Changed,
    /// The record is gone.
    Gone,
}

/// One change of an AlterTransaction, as the spec's actions name them.
#[derive(Clone, Debug)]
pub enum TxAction {
    SetStatus(String),
    SetProperty {
        key: String,
        value: String,
        mode: String,
    },
    UnsetProperty {
        key: String,
        mode: String,
    },
}

/// Whether `record` is work on table `id`: its own table, or one of a batch's.
fn names_table(record: &TransactionRecord, id: &[String]) -> bool {
    record.table == id || record.batch.iter().any(|item| item.table == id)
}

/// `(cell, key)` of a transaction id: `<ms>-<uid>`, or `<ms>-<uid>@<bucket>` in endpoint
/// mode. Anything else names no transaction.
pub(crate) fn locate(layout: &Layout, id: &str) -> Result<(String, String)> {
    let missing = || {
        Error::new(
            Code::TransactionNotFound,
            format!("transaction '{id}' not found"),
        )
    };
    let (stem, cell) = match id.split_once('@') {
        Some((stem, bucket)) if layout.endpoint_mode() => {
            validate_bucket(bucket).map_err(|_| missing())?;
            (stem, format!("{bucket}/"))
        }
        None if !layout.endpoint_mode() => (id, String::new()),
        _ => return Err(missing()),
    };
    let well_formed = stem.split_once('-').is_some_and(|(ms, uid)| {
        ms.len() == 13
            && ms.bytes().all(|b| b.is_ascii_digit())
            && uid.len() == 32
            && uid.bytes().all(|b| b.is_ascii_hexdigit())
    });
    if !well_formed {
        return Err(missing());
    }
    Ok((cell.clone(), Layout::transaction_key(&cell, stem)))
}

impl Catalog {
    /// Whether a `Running` record was left by a gateway that stopped.
    pub fn abandoned(&self, record: &TransactionRecord) -> bool {
        !record.status.finished() && self.stale(record.updated_at_ms)
    }

    /// How often an owner refreshes its transaction.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis((self.grace_ms / 4).max(500))
    }

    /// Starts a transaction for `op` on table `table`, owned by this gateway, with what the
    /// work knows of itself before it runs (`results`).
    pub async fn begin_transaction(
        &self,
        table: &[String],
        op: &str,
        target: &str,
        results: BTreeMap<String, String>,
    ) -> Result<Transaction> {
        let id = self.new_transaction_id(table)?;
        self.begin_transaction_of(&id, table, op, target, results, Vec::new())
            .await?
            .ok_or_else(|| Error::internal("a new transaction id was taken", &id))
    }

    /// A fresh transaction id for work on `table` (`<ms>-<uid>`, `@<bucket>` in endpoint
    /// mode): the record it names is in the table's cell.
    pub(crate) fn new_transaction_id(&self, table: &[String]) -> Result<String> {
        let cell = self.layout.place(table)?.cell;
        let stem = format!("{:013}-{}", now_ms(), new_uid());
        Ok(match cell.strip_suffix('/') {
            Some(bucket) => format!("{stem}@{bucket}"),
            None => stem,
        })
    }

    /// `begin_transaction` under id `id` (from `new_transaction_id`), for a batch commit of
    /// `batch`: `None` when a record with that id exists already (a retry by key running
    /// the batch of a claim whose record its first gateway had not written yet).
    pub(crate) async fn begin_transaction_of(
        &self,
        id: &str,
        table: &[String],
        op: &str,
        target: &str,
        results: BTreeMap<String, String>,
        batch: Vec<BatchItem>,
    ) -> Result<Option<Transaction>> {
        let (_, key) = locate(&self.layout, id)?;
        let now = now_ms();
        let id = id.to_string();
        let record = TransactionRecord {
            format_version: FORMAT_VERSION,
            id,
            op: op.to_string(),
            table: table.to_vec(),
            target: target.to_string(),
            status: TxStatus::Running,
            properties: BTreeMap::new(),
            node: self.node.clone(),
            started_at_ms: now,
            updated_at_ms: now,
            cancel_requested: false,
            error: None,
            results,
            batch,
            error_code: None,
            answers: Vec::new(),
        };
        // The record, and beside it a marker in each named table's folder: what the
        // console's list of a table's transactions reads.
        let markers = self.transaction_markers(&record)?;
        let put_markers = futures::future::try_join_all(
            markers
                .iter()
                .map(|m| self.store.put(m, Bytes::new(), Condition::None)),
        );
        let put_record = self.store.put(&key, encode(&record), Condition::IfAbsent);
        let (written, marked) = futures::future::join(put_record, put_markers).await;
        if let Err(e) = marked {
            // The work goes on; only the console's list of its tables misses it.
            tracing::warn!(transaction = %record.id, error = %e, "could not mark a transaction in its tables' folders");
        }
        match written {
            Ok(etag) => Ok(Some(Transaction { key, etag, record })),
            Err(StoreError::PreconditionFailed) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `record` over the transaction as its owner last read it (`tx`), conditional on
    /// that; `tx` then holds what is there now.
    pub(crate) async fn write_transaction(
        &self,
        tx: &mut Transaction,
        mut record: TransactionRecord,
    ) -> Result<Written> {
        record.updated_at_ms = now_ms();
        match self
            .store
            .put(
                &tx.key,
                encode(&record),
                Condition::IfMatch(tx.etag.clone()),
            )
            .await
        {
            Ok(etag) => {
                tx.etag = etag;
                tx.record = record;
                Ok(Written::Done)
            }
            Err(StoreError::PreconditionFailed) => match self.store.get(&tx.key).await? {
                Some(obj) => {
                    tx.record = decode(&tx.key, &obj.body)?;
                    tx.etag = obj.etag;
                    Ok(Written::Changed)
                }
                None => Ok(Written::Gone),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Applies `change` to the owner's record and writes it, re-reading and re-applying when
    /// someone else (an alter) wrote in between.
    async fn rewrite(
        &self,
        tx: &mut Transaction,
        change: impl Fn(&mut TransactionRecord),
    ) -> Result<()> {
        loop {
            let mut record = tx.record.clone();
            change(&mut record);
            match self.write_transaction(tx, record).await? {
                Written::Done => return Ok(()),
                Written::Changed => {}
                Written::Gone => {
                    return Err(Error::internal("a transaction record vanished", &tx.key));
                }
            }
        }
    }

    /// The owner's refresh; answers whether a cancel was asked for.
    pub async fn refresh_transaction(&self, tx: &mut Transaction) -> Result<bool> {
        self.rewrite(tx, |_| {}).await?;
        Ok(tx.record.cancel_requested)
    }

    /// Takes over transaction `id` whose work goes on elsewhere (a Ray job) from a gateway
    /// that stopped, or from this node's earlier run: this gateway owns and refreshes it
    /// from now on. `None` when it has ended, or its owner is another gateway still alive,
    /// or another gateway took it first.
    pub async fn adopt_transaction(&self, id: &str) -> Result<Option<Transaction>> {
        let (record, key, etag) = self
            .read_transaction(&Ctx::internal(), id, Level::Read)
            .await?;
        if record.status.finished() || (record.node != self.node() && !self.abandoned(&record)) {
            return Ok(None);
        }
        let mut adopted = record.clone();
        adopted.node = self.node().to_string();
        let mut tx = Transaction { key, etag, record };
        match self.write_transaction(&mut tx, adopted).await? {
            Written::Done => Ok(Some(tx)),
            Written::Changed | Written::Gone => Ok(None),
        }
    }

    /// The owner's last write: the outcome, and what the work reported of itself.
    pub async fn finish_transaction(
        &self,
        tx: &mut Transaction,
        status: TxStatus,
        error: Option<String>,
        results: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.rewrite(tx, |r| {
            r.status = status;
            r.error = error.clone();
            r.results
                .extend(results.iter().map(|(k, v)| (k.clone(), v.clone())));
        })
        .await
    }

    /// Reads a transaction the caller may see: one on a table it may read (any other is
    /// reported missing, as a table it may not see would be).
    pub async fn describe_transaction(&self, ctx: &Ctx, id: &str) -> Result<TransactionRecord> {
        Ok(self.read_transaction(ctx, id, Level::Read).await?.0)
    }

    async fn read_transaction(
        &self,
        ctx: &Ctx,
        id: &str,
        needed: Level,
    ) -> Result<(TransactionRecord, String, String)> {
        let (_, key) = locate(&self.layout, id)?;
        let missing = || {
            Error::new(
                Code::TransactionNotFound,
                format!("transaction '{id}' not found"),
            )
        };
        let obj = self.store.get(&key).await?.ok_or_else(missing)?;
        let record: TransactionRecord = decode(&key, &obj.body)?;
        let level = self.access(ctx, &record.table);
        if level < Level::Read {
            return Err(missing());
        }
        if level < needed {
            return Err(Error::permission_denied(format!(
                "altering transaction '{id}' needs {} access to table '{}'",
                needed.name(),
                self.show(&record.table)
            )));
        }
        Ok((record, key, obj.etag))
    }

    /// Settles a record whose owner stopped, with the outcome the caller found.
    pub async fn settle_transaction(
        &self,
        ctx: &Ctx,
        id: &str,
        status: TxStatus,
        error: Option<String>,
    ) -> Result<TransactionRecord> {
        let (record, key, etag) = self.read_transaction(ctx, id, Level::Read).await?;
        if !self.abandoned(&record) {
            return Ok(record);
        }
        let mut tx = Transaction { key, etag, record };
        self.rewrite(&mut tx, |r| {
            if !r.status.finished() && self.stale(r.updated_at_ms) {
                r.status = status;
                r.error = error.clone();
            }
        })
        .await?;
        Ok(tx.record)
    }

    /// AlterTransaction: all actions or none. Setting the status may only ask a running
    /// transaction to stop (`Canceled`): its owner stops the work and writes `Canceled`, so
    /// the status reported stays the truth (work that committed before it saw the request
    /// is `Succeeded`). Needs the access the work itself needed (write).
    pub async fn alter_transaction(
        &self,
        ctx: &Ctx,
        id: &str,
        actions: &[TxAction],
    ) -> Result<TransactionRecord> {
        if actions.is_empty() {
            return Err(Error::invalid("actions must hold at least one action"));
        }
        loop {
            let (mut record, key, etag) = self.read_transaction(ctx, id, Level::Write).await?;
            for action in actions {
                apply(&mut record, action)?;
            }
            match self
                .store
                .put(&key, encode(&record), Condition::IfMatch(etag))
                .await
            {
                Ok(_) => return Ok(record),
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The transactions of table `id` still on record (a day after they end), newest first,
    /// at most `limit`: for the console's view of a table. Read through the table's own
    /// markers (`transactions-of/`), so the cost is the table's transactions (a listing per
    /// thousand of them, and a read per one answered), not the cell's; the caller must be
    /// able to read the table. Transactions begun by a release before markers existed are
    /// not listed (they are still described by id, and gone within a day).
    pub async fn table_transactions(
        &self,
        ctx: &Ctx,
        id: &[String],
        limit: usize,
    ) -> Result<Vec<TransactionRecord>> {
        if self.access(ctx, id) < Level::Read {
            return Err(Error::new(
                Code::TableNotFound,
                format!("table '{}' not found", self.show(id)),
            ));
        }
        let placed = self.layout.place(id)?;
        let prefix = Layout::table_transactions_prefix(&placed.cell, placed.rel);
        let markers = self.all_keys(&prefix, true).await?;
        let mut found = Vec::new();
        // Markers sort by start time: the newest are last. Read a few at a time; a marker
        // whose record is gone (swept, or never written: its gateway stopped between the
        // two writes) is passed over.
        for chunk in markers.rchunks(16) {
            let keys: Vec<String> = chunk
                .iter()
                .rev()
                .filter_map(|m| locate(&self.layout, &m[prefix.len()..]).ok())
                .map(|(_, key)| key)
                .collect();
            let reads = keys.iter().map(|key| self.store.get(key));
            for (key, obj) in keys.iter().zip(futures::future::join_all(reads).await) {
                let Some(obj) = obj? else { continue };
                let record: TransactionRecord = decode(key, &obj.body)?;
                if names_table(&record, id) {
                    found.push(record);
                    if found.len() >= limit {
                        return Ok(found);
                    }
                }
            }
        }
        Ok(found)
    }

    /// The marker keys of `record`: one in the folder of each table it names (its table,
    /// and a batch's every table), named by the transaction's id.
    fn transaction_markers(&self, record: &TransactionRecord) -> Result<Vec<String>> {
        let mut tables: Vec<&[String]> = vec![&record.table];
        for item in &record.batch {
            if !tables.contains(&item.table.as_slice()) {
                tables.push(&item.table);
            }
        }
        tables
            .into_iter()
            .filter(|t| !t.is_empty())
            .map(|t| {
                let placed = self.layout.place(t)?;
                Ok(format!(
                    "{}{}",
                    Layout::table_transactions_prefix(&placed.cell, placed.rel),
                    record.id
                ))
            })
            .collect()
    }

    /// Removes the records of transactions in `cell` that finished (or were abandoned)
    /// more than `KEEP` ago; answers how many.
    pub(crate) async fn sweep_transactions(&self, cell: &str) -> Result<u64> {
        let prefix = Layout::transactions_prefix(cell);
        let horizon = now_ms().saturating_sub(KEEP.as_millis() as u64);
        let mut removed = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .list(&prefix, after.as_deref(), 1000, true)
                .await?;
            for key in &page.keys {
                let started: u64 = key[prefix.len()..]
                    .get(..13)
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(0);
                if started > horizon {
                    // Keys sort by creation time: the rest are younger.
                    return Ok(removed);
                }
                let Some(obj) = self.store.get(key).await? else {
                    continue;
                };
                let record: TransactionRecord = decode(key, &obj.body)?;
                let done = record.status.finished() || self.abandoned(&record);
                if done && record.updated_at_ms <= horizon {
                    // A committed batch's versions outlive its record: any its gateway did
                    // not publish (it stopped) are published before the record goes.
                    if record.status == TxStatus::Succeeded {
                        self.settle_batch_items(&record.id, &record.batch).await?;
                    }
                    let gone = self.remove_unchanged(key, obj.etag).await?;
                    if gone == 1 {
                        for marker in self.transaction_markers(&record)? {
                            self.store.delete(&marker, Condition::None).await?;
                        }
                    }
                    removed += gone;
                }
            }
            if !page.more {
                return Ok(removed);
            }
            after = page.keys.last().cloned();
        }
    }

    /// Removes the object at `key` if it is still as read (`etag`); answers 1 if it did.
    pub(crate) async fn remove_unchanged(&self, key: &str, etag: String) -> Result<u64> {
        match self.store.delete(key, Condition::IfMatch(etag)).await {
            Ok(()) => Ok(1),
            Err(StoreError::PreconditionFailed) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

fn apply(record: &mut TransactionRecord, action: &TxAction) -> Result<()> {
    match action {
        TxAction::SetStatus(status) => {
            if !status.eq_ignore_ascii_case("canceled") && !status.eq_ignore_ascii_case("cancelled")
            {
                return Err(Error::invalid(format!(
                    "status '{status}' cannot be set: a transaction may only be asked to stop (Canceled)"
                )));
            }
            if record.status.finished() {
                return Err(Error::new(
                    Code::ConcurrentModification,
                    format!(
                        "transaction '{}' already finished ({})",
                        record.id,
                        record.status.name()
                    ),
                ));
            }
            record.cancel_requested = true;
        }
        TxAction::SetProperty { key, value, mode } => {
            let exists = record.properties.contains_key(key);
            match mode.to_ascii_lowercase().as_str() {
                "" | "overwrite" => {
                    record.properties.insert(key.clone(), value.clone());
                }
                "skip" => {
                    if !exists {
                        record.properties.insert(key.clone(), value.clone());
                    }
                }
                "fail" => {
                    if exists {
                        return Err(Error::new(
                            Code::ConcurrentModification,
                            format!("property '{key}' is already set"),
                        ));
                    }
                    record.properties.insert(key.clone(), value.clone());
                }
                other => {
                    return Err(Error::invalid(format!(
                        "unknown mode '{other}' for setPropertyAction: use Overwrite, Fail or Skip"
                    )));
                }
            }
        }
        TxAction::UnsetProperty { key, mode } => {
            let existed = record.properties.remove(key).is_some();
            match mode.to_ascii_lowercase().as_str() {
                "" | "skip" => {}
                "fail" if !existed => {
                    return Err(Error::new(
                        Code::ConcurrentModification,
                        format!("property '{key}' is not set"),
                    ));
                }
                "fail" => {}
                other => {
                    return Err(Error::invalid(format!(
                        "unknown mode '{other}' for unsetPropertyAction: use Skip or Fail"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TransactionRecord {
        TransactionRecord {
            format_version: FORMAT_VERSION,
            id: "t".into(),
            op: "create_index".into(),
            table: vec!["a".into()],
            target: "i".into(),
            status: TxStatus::Running,
            properties: BTreeMap::new(),
            node: "n".into(),
            started_at_ms: 0,
            updated_at_ms: 0,
            cancel_requested: false,
            error: None,
            results: BTreeMap::new(),
            batch: Vec::new(),
            error_code: None,
            answers: Vec::new(),
        }
    }

    fn set(key: &str, value: &str, mode: &str) -> TxAction {
        TxAction::SetProperty {
            key: key.into(),
            value: value.into(),
            mode: mode.into(),
        }
    }

    #[test]
    fn property_modes_do_what_they_say() {
        let mut r = record();
        apply(&mut r, &set("k", "1", "Overwrite")).unwrap();
        apply(&mut r, &set("k", "2", "Skip")).unwrap();
        assert_eq!(r.properties["k"], "1");
        assert_eq!(
            apply(&mut r, &set("k", "3", "Fail")).unwrap_err().code,
            Code::ConcurrentModification
        );
        apply(&mut r, &set("k", "4", "")).unwrap();
        assert_eq!(r.properties["k"], "4");
        let unset = |mode: &str| TxAction::UnsetProperty {
            key: "k".into(),
            mode: mode.into(),
        };
        apply(&mut r, &unset("Fail")).unwrap();
        apply(&mut r, &unset("Skip")).unwrap();
        assert!(apply(&mut r, &unset("Fail")).is_err());
        assert_eq!(
            apply(&mut r, &set("k", "1", "Sometimes")).unwrap_err().code,
            Code::InvalidInput
        );
    }

    #[test]
    fn only_a_stop_may_be_asked_and_only_of_running_work() {
        let mut r = record();
        assert_eq!(
            apply(&mut r, &TxAction::SetStatus("Succeeded".into()))
                .unwrap_err()
                .code,
            Code::InvalidInput
        );
        apply(&mut r, &TxAction::SetStatus("Canceled".into())).unwrap();
        assert!(r.cancel_requested && r.status == TxStatus::Running);
        r.status = TxStatus::Succeeded;
        assert_eq!(
            apply(&mut r, &TxAction::SetStatus("Canceled".into()))
                .unwrap_err()
                .code,
            Code::ConcurrentModification
        );
    }

    #[test]
    fn ids_name_their_cell_and_nothing_else() {
        let plain = Layout::new(super::super::layout::Warehouse::Local("/w".into()));
        let id = format!("{:013}-{}", 1, "a".repeat(32));
        let (cell, key) = locate(&plain, &id).unwrap();
        assert_eq!(cell, "");
        assert!(key.ends_with(&format!("transactions/{id}.json")));
        for bad in [
            "",
            "x",
            "../x",
            &format!("{id}@b"),
            &format!("{:013}-{}", 1, "g".repeat(32)),
        ] {
            assert_eq!(
                locate(&plain, bad).unwrap_err().code,
                Code::TransactionNotFound,
                "{bad}"
            );
        }
        let endpoint = Layout::new(super::super::layout::Warehouse::S3Endpoint);
        let (cell, _) = locate(&endpoint, &format!("{id}@bucket-1")).unwrap();
        assert_eq!(cell, "bucket-1/");
        assert!(locate(&endpoint, &id).is_err());
    }
}
