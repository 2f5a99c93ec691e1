//! The life of an operation in flight: what a mark on a record means, how an entry is
//! settled (rolled back while prepared, rolled forward once committed), and what a rival
//! of an operation on the same name does. Every decision here is a conditional write on
//! the entry that decides the operation, so any number of gateways may run this for the
//! same entry at once.

use super::layout::Layout;
use super::log::Decision;
use super::records::*;
use super::{Catalog, Slot};
use crate::error::{Error, Result};
use crate::store::{Condition, Store, StoreError};

/// What a mark on a record means right now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MarkState {
    /// Its operation is gone without having committed: the record is as if unmarked.
    Void,
    /// Its operation is live and undecided.
    Live,
    /// Something moved while looking (an entry settled, a committed removal finished its
    /// deciding step): read the record again.
    Moved,
}

/// What a request found at a pending key it wanted for itself.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rival {
    /// Nothing is there (any more), and the name is free: try again.
    Gone,
    /// A committed create or rename, or a record published: the name is taken.
    Committed,
    /// A live operation that did not finish within the wait.
    Busy,
}

impl Catalog {
    /// Whether an entry may be settled by whoever finds it: nobody has driven it for the
    /// grace period, or this node wrote it in an earlier run.
    /// An intent a batch decides may be settled by anyone at any time: settling reads the
    /// batch's record, and leaves the intent alone while the batch is deciding.
    pub(crate) fn settleable_entry(&self, entry: &Entry) -> bool {
        if let Entry::Intent(intent) = entry
            && intent.deciding_batch().is_some()
        {
            return true;
        }
        self.settleable(entry.owner(), entry.started_at_ms(), entry.alive_at_ms())
    }

    /// An operation's deciding write: `intent` committed over its prepared copy at `etag`
    /// (at `key`). Answers the committed intent's ETag; `PreconditionFailed` when a settler
    /// changed it first (the caller gives the operation up).
    pub(crate) async fn commit_intent(
        &self,
        key: &str,
        intent: &mut Intent,
        etag: &str,
    ) -> crate::store::StoreResult<String> {
        intent.state = IntentState::Committed;
        self.write(key, encode(intent), Condition::IfMatch(etag.to_string()))
            .await
    }

    /// Reads the intent a mark names and says what the mark means. `key` and `etag` are the
    /// marked record's.
    pub(crate) async fn resolve_mark(
        &self,
        key: &str,
        etag: &str,
        mark: &Mark,
    ) -> Result<MarkState> {
        match self.read_entry(&mark.intent).await? {
            Some((entry, entry_etag)) if entry.op_id() == mark.op_id => {
                if self.settleable_entry(&entry) {
                    // Settled now, or being settled by another gateway: either way, wait
                    // for the record to change rather than spin.
                    return Ok(if self.settle(&mark.intent, entry, &entry_etag).await? {
                        MarkState::Moved
                    } else {
                        MarkState::Live
                    });
                }
                match &entry {
                    Entry::Intent(Intent {
                        state: IntentState::Committed,
                        kind:
                            IntentKind::RenameTable { .. }
                            | IntentKind::DropTable { .. }
                            | IntentKind::UndropTable { .. },
                        ..
                    }) => {
                        // The removal has committed: its deciding step (the record's delete)
                        // is safe for anyone to take, so take it rather than wait.
                        self.remove(key, etag).await?;
                        Ok(MarkState::Moved)
                    }
                    _ => Ok(MarkState::Live),
                }
            }
            // An intent goes only after its marked record: deleted (a committed operation's
            // deciding step) or given up (a rollback, which unmarks after removing the
            // intent). So a mark whose intent is gone, on a record that has not changed since,
            // is the leftover of a rollback.
            _ => match self.store.get(key).await? {
                Some(obj) if obj.etag == etag => Ok(MarkState::Void),
                _ => Ok(MarkState::Moved),
            },
        }
    }

    /// Settles an entry: rolls a prepared one back, or rolls a committed one forward after
    /// taking it over. Callers decide whether it is theirs to settle (`settleable_entry`).
    /// `Ok(true)` when it is settled; `Ok(false)` when it changed meanwhile or another
    /// settler is on it.
    pub(crate) async fn settle(&self, key: &str, entry: Entry, etag: &str) -> Result<bool> {
        tracing::info!(key, op = entry.name(), op_id = entry.op_id(), owner = ?entry.owner(), "settling an operation left unfinished");
        match entry {
            Entry::StagedTable(record) => {
                let published = self
                    .read::<TableRecord>(&self.table_key(&record.id)?)
                    .await?
                    .is_some_and(|(t, _)| t.uid == record.uid);
                if published {
                    // Published by a move whose removal of the staged name failed.
                    return Ok(self.remove(key, etag).await?);
                }
                self.abort_create(key, etag, record).await
            }
            Entry::StagedNamespace(_) => Ok(self.remove(key, etag).await?),
            Entry::Intent(intent) if intent.deciding_batch().is_some() => {
                self.settle_by_batch(key, intent, etag).await
            }
            Entry::Intent(intent) if intent.state == IntentState::Aborted => {
                self.finish_abort(key, &intent, etag).await?;
                Ok(true)
            }
            Entry::Intent(intent) if intent.state == IntentState::Prepared => {
                // The rollback's deciding step is the intent's conditional removal (it races
                // the owner's commit or renewal); the mark goes after.
                if !self.remove(key, etag).await? {
                    return Ok(false);
                }
                match &intent.kind {
                    IntentKind::RenameTable { from, .. } => {
                        self.unmark_table(from, &intent.op_id).await?
                    }
                    IntentKind::DropTable {
                        dropped: Some(dropped),
                        ..
                    }
                    | IntentKind::UndropTable { dropped, .. } => {
                        self.unmark_dropped(dropped, &intent.op_id).await?
                    }
                    IntentKind::DropTable { record, .. } => {
                        self.unmark_table(&record.id, &intent.op_id).await?
                    }
                    IntentKind::DropNamespace { id } | IntentKind::ReplaceNamespace { id } => {
                        self.unmark_namespace(id, &intent.op_id).await?
                    }
                    IntentKind::CreateTable { .. } | IntentKind::CreateNamespace { .. } => {}
                }
                Ok(true)
            }
            Entry::Intent(intent) => self.take_over(key, intent, etag).await,
            Entry::LegacyPending(pending) => {
                self.settle_legacy_pending(key, &pending, etag).await?;
                Ok(true)
            }
            Entry::LegacyDrop(drop) => {
                let alive = self
                    .read::<TableRecord>(&self.table_key(&drop.table.id)?)
                    .await?
                    .is_some_and(|(t, _)| t.uid == drop.table.uid);
                if !alive {
                    // A version-1 drop cannot tell its own delete from a later one (a rename
                    // keeps the uid), so its data is never deleted on a guess.
                    tracing::warn!(key, location = %drop.table.location, "an older gateway's drop was left unfinished; its data folder and claim are kept for an operator to check");
                }
                self.remove(key, etag).await?;
                Ok(true)
            }
        }
    }

    /// Finishes a committed intent after taking it over (a conditional write naming this
    /// gateway its settler, so two settlers never roll one forward at once). `Ok(false)` when
    /// it changed meanwhile or another settler is on it.
    async fn take_over(&self, key: &str, mut intent: Intent, etag: &str) -> Result<bool> {
        if let Some(s) = &intent.settler
            && !self.settleable(
                Some(&s.node),
                s.since_ms,
                s.since_ms.max(intent.alive_at_ms()),
            )
        {
            // Another settler (of this gateway too) is finishing it.
            return Ok(false);
        }
        intent.settler = Some(Settler {
            node: self.node.clone(),
            since_ms: now_ms(),
        });
        intent.renewed_at_ms = Some(now_ms());
        let etag = match self
            .write(key, encode(&intent), Condition::IfMatch(etag.to_string()))
            .await
        {
            Ok(e) => e,
            Err(StoreError::PreconditionFailed) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        self.roll_forward(key, &mut intent, etag).await?;
        Ok(true)
    }

    /// Settles an intent a batch decides (a declare or deregister inside BatchCommitTables)
    /// by the batch's record: committed, it is written committed as it is taken over and
    /// rolled forward like any committed intent; failed, canceled or gone, it is rolled back
    /// (a declare's folder claim released, a deregister's mark removed); still deciding, it
    /// is left (`Ok(false)`). A batch abandoned before its commit write is failed first.
    async fn settle_by_batch(&self, key: &str, mut intent: Intent, etag: &str) -> Result<bool> {
        let batch = intent.batch.clone().unwrap_or_default();
        for _ in 0..2 {
            match self.decision(&batch).await? {
                Decision::Deciding => return Ok(false),
                Decision::Abandoned(tx_key, tx_etag, record) => {
                    self.abort_abandoned(&tx_key, tx_etag, record).await?;
                }
                Decision::Committed => {
                    intent.state = IntentState::Committed;
                    return self.take_over(key, intent, etag).await;
                }
                Decision::Aborted => {
                    return match &intent.kind {
                        IntentKind::CreateTable { record } => {
                            // The claim first: an entry left behind is settled again.
                            let cell = self.cell_of(&record.id)?;
                            self.release_location(&cell, &record.data_key, &record.uid)
                                .await?;
                            Ok(self.remove(key, etag).await?)
                        }
                        IntentKind::DropTable { record, .. } => {
                            // As any rollback: the intent first, then its mark.
                            if !self.remove(key, etag).await? {
                                return Ok(false);
                            }
                            self.unmark_table(&record.id, &intent.op_id).await?;
                            Ok(true)
                        }
                        _ => Ok(self.remove(key, etag).await?),
                    };
                }
            }
        }
        Ok(false)
    }

    /// Settles the entry at table `id`'s pending key if batch `batch` (with `None`, any
    /// batch) decided it (still deciding, or taken over since): the recovery sweep of a
    /// committed batch, and a writer that finds the table arriving by a batch. `Ok(true)`
    /// when it settled.
    pub(crate) async fn settle_batch_entry(
        &self,
        id: &[String],
        batch: Option<&str>,
    ) -> Result<bool> {
        let key = self.table_pending_key(id)?;
        match self.read_entry(&key).await? {
            Some((Entry::Intent(intent), etag))
                if intent
                    .batch
                    .as_deref()
                    .is_some_and(|b| batch.is_none_or(|want| want == b)) =>
            {
                self.settle(&key, Entry::Intent(intent), &etag).await
            }
            _ => Ok(false),
        }
    }

    /// Whether a table record is gone for readers: deregistered by a batch that has
    /// committed, and not yet deleted by whoever rolls that batch forward. Reads the batch's
    /// record only for a record a batch marks.
    pub(crate) async fn departed(&self, table: &TableRecord) -> Result<bool> {
        let Some(mark) = table.mark.as_ref().filter(|m| m.batch.is_some()) else {
            return Ok(false);
        };
        if self
            .batch_committed(mark.batch.as_deref().unwrap_or_default())
            .await?
        {
            return Ok(true);
        }
        // Taken over already (written committed), its roll forward cut short: its batch's
        // record may be gone since.
        Ok(matches!(
            self.read_entry(&mark.intent).await?,
            Some((Entry::Intent(intent), _))
                if intent.op_id == mark.op_id && intent.state == IntentState::Committed
        ))
    }

    /// Gives up a create that has not committed, whoever finds it: a conditional rewrite
    /// of the staged record as `aborted` (the same object the create commits on, so only
    /// one of the two happens) keeps the decision written while the folder claim is
    /// released; then the entry goes. `Ok(false)` when the staged record changed first.
    pub(crate) async fn abort_create(
        &self,
        key: &str,
        etag: &str,
        record: TableRecord,
    ) -> Result<bool> {
        let aborted = Intent {
            format_version: FORMAT_VERSION,
            op_id: record.uid.clone(),
            owner: record.created_by.clone().unwrap_or_default(),
            started_at_ms: record.created_at_ms,
            state: IntentState::Aborted,
            settler: None,
            renewed_at_ms: None,
            batch: None,
            kind: IntentKind::CreateTable { record },
        };
        match self
            .write(key, encode(&aborted), Condition::IfMatch(etag.to_string()))
            .await
        {
            Ok(etag) => {
                self.finish_abort(key, &aborted, &etag).await?;
                Ok(true)
            }
            Err(StoreError::PreconditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Releases what an aborted create reserved, then removes its entry.
    async fn finish_abort(&self, key: &str, intent: &Intent, etag: &str) -> Result<()> {
        if let IntentKind::CreateTable { record } = &intent.kind {
            let cell = self.cell_of(&record.id)?;
            self.release_location(&cell, &record.data_key, &record.uid)
                .await?;
        }
        self.remove(key, etag).await?;
        Ok(())
    }

    /// Shows that whoever drives the intent at `key` is alive; `Ok(false)` when someone
    /// else has taken it over or rolled it back meanwhile (the driver must then stop).
    pub(crate) async fn renew(
        &self,
        key: &str,
        intent: &mut Intent,
        etag: &mut String,
    ) -> Result<bool> {
        intent.renewed_at_ms = Some(now_ms());
        match self
            .write(key, encode(&*intent), Condition::IfMatch(etag.clone()))
            .await
        {
            Ok(e) => {
                *etag = e;
                Ok(true)
            }
            Err(StoreError::PreconditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the driver of an intent last renewed at `renewed_ms` should renew it now.
    pub(crate) fn due_for_renewal(&self, renewed_ms: u64) -> bool {
        now_ms().saturating_sub(renewed_ms) > self.grace_ms / 4
    }

    async fn settle_legacy_pending(
        &self,
        key: &str,
        pending: &LegacyPending,
        etag: &str,
    ) -> Result<()> {
        match (&pending.table, pending.op.as_str()) {
            (Some(table), "declare" | "register") => {
                let published = self
                    .read::<TableRecord>(&self.table_key(&table.id)?)
                    .await?
                    .is_some_and(|(t, _)| t.uid == pending.uid);
                if !published {
                    let cell = self.cell_of(&table.id)?;
                    self.release_location(&cell, &table.data_key, &pending.uid)
                        .await?;
                }
                self.remove(key, etag).await?;
            }
            (Some(table), "rename") => {
                let published = self
                    .read::<TableRecord>(&self.table_key(&table.id)?)
                    .await?
                    .is_some_and(|(t, _)| t.uid == pending.uid);
                if !published {
                    // Version 1 could not tell whether its rename or a later request removed
                    // the source; it is never rolled forward on that guess.
                    tracing::warn!(
                        key,
                        "an older gateway's rename was left unfinished; it is rolled back"
                    );
                }
                self.remove(key, etag).await?;
            }
            _ => {
                self.remove(key, etag).await?;
            }
        }
        Ok(())
    }

    /// Finishes a committed operation from its intent (at `key`, now at `etag`). Run by the
    /// owner in time, or by the one settler that took the intent over; every step may have
    /// been done already. Deleting a dropped table's data renews the intent between batches
    /// and stops if someone else took it over, so two parties never delete in one folder.
    pub(crate) async fn roll_forward(
        &self,
        key: &str,
        intent: &mut Intent,
        mut etag: String,
    ) -> Result<()> {
        match intent.kind.clone() {
            IntentKind::CreateTable { record } => {
                self.publish_table(&record).await?;
            }
            IntentKind::CreateNamespace { record } => {
                if let Slot::Plain(ns_key) = self.slot(&record.id)? {
                    put_published(&*self.store, &ns_key, encode(&record), &record.uid).await?;
                }
            }
            IntentKind::RenameTable { from, record } => {
                self.delete_marked_table(&from, &intent.op_id).await?;
                self.publish_table(&record).await?;
            }
            IntentKind::UndropTable { dropped, record } => {
                self.publish_table(&record).await?;
                self.delete_marked_dropped(&dropped, &intent.op_id).await?;
            }
            IntentKind::DropTable {
                record,
                keep_until_ms: Some(purge_after_ms),
                dropped_by,
                ..
            } => {
                // A soft drop: the record goes, the table is kept under `dropped/`.
                self.delete_marked_table(&record.id, &intent.op_id).await?;
                self.keep_dropped(
                    &intent.op_id,
                    &record,
                    intent.started_at_ms,
                    purge_after_ms,
                    dropped_by,
                )
                .await?;
                if let Err(e) = self.forget_upkeep(&record).await {
                    tracing::debug!(table = ?record.id, error = %e, "kept a dropped table's maintenance record");
                }
            }
            IntentKind::DropTable {
                record,
                delete_data,
                dropped,
                ..
            } => {
                // A purge of a dropped table marks its dropped record, not a table record
                // (the name may hold a new table by now).
                if dropped.is_none() {
                    self.delete_marked_table(&record.id, &intent.op_id).await?;
                }
                if delete_data {
                    let prefix = format!("{}/", record.data_key);
                    let mut removed = 0;
                    loop {
                        let (n, more) = self.store.delete_batch(&prefix, 1000).await?;
                        removed += n;
                        if !more {
                            break;
                        }
                        if !self.renew(key, intent, &mut etag).await? {
                            return Err(Error::conflict(
                                "another gateway took over deleting this table's data",
                            ));
                        }
                    }
                    tracing::info!(location = %record.location, objects = removed, "deleted the data of a dropped table");
                }
                let cell = self.cell_of(&record.id)?;
                if delete_data {
                    // The receipts of its versions (`commits`) go with the data.
                    self.store
                        .delete_prefix(&Layout::commits_prefix(&cell, &record.data_key))
                        .await?;
                }
                // Its maintenance record goes with it, beside the claim (one held by a run
                // still going is left: that run finds the table gone).
                let (released, forgotten) = tokio::join!(
                    self.release_location(&cell, &record.data_key, &record.uid),
                    self.forget_upkeep(&record)
                );
                released?;
                if let Err(e) = forgotten {
                    tracing::debug!(table = ?record.id, error = %e, "kept a dropped table's maintenance record");
                }
                if let Some(dropped) = dropped {
                    self.delete_marked_dropped(&dropped, &intent.op_id).await?;
                }
            }
            IntentKind::DropNamespace { .. } | IntentKind::ReplaceNamespace { .. } => {}
        }
        self.remove(key, &etag).await?;
        Ok(())
    }

    /// The owner's end of a committed table create, after the answer: the record is
    /// published, then the committed entry at `key` (at `etag`) removed. The client need not
    /// wait for either: from the commit on, readers find the table through its committed
    /// entry (describe, exists, listings) and whatever changes the table waits for the
    /// record (`read_for_update`). The publish is tried once, and only while the owner is in
    /// time: a second try could land after the table was dropped again and bring it back.
    /// One that fails is left to recovery, which rolls the entry forward.
    pub(crate) fn publish_created_table(
        &self,
        key: &str,
        record: &TableRecord,
        etag: String,
        started_at_ms: u64,
    ) -> Result<()> {
        let table_key = self.table_key(&record.id)?;
        let (store, key, body, uid) = (
            self.store.clone(),
            key.to_string(),
            encode(record),
            record.uid.clone(),
        );
        let in_time_until_ms = started_at_ms.saturating_add(self.grace_ms / 2);
        self.after_answer(async move {
            // Past the owner's half of the grace period a settler may be publishing it.
            if now_ms() > in_time_until_ms {
                tracing::warn!(key, "a committed create was not published in time; recovery will");
                return;
            }
            if let Err(e) = put_published(&*store, &table_key, body, &uid).await {
                // Committed all the same: readers see it through the entry.
                tracing::warn!(key, error = %e, "a committed create could not be published yet; recovery will");
                return;
            }
            match store.delete(&key, Condition::IfMatch(etag)).await {
                // Gone already (cleared by a drop or rename, or by recovery): fine.
                Ok(()) | Err(StoreError::PreconditionFailed) => {}
                Err(e) => {
                    tracing::warn!(key, error = %e, "could not remove a published create's entry; recovery will")
                }
            }
        });
        Ok(())
    }

    /// Publishes table `record` under its name from a committed intent, unless it already is.
    async fn publish_table(&self, record: &TableRecord) -> Result<()> {
        put_published(
            &*self.store,
            &self.table_key(&record.id)?,
            encode(record),
            &record.uid,
        )
        .await
    }

    /// Deletes table `id`'s record if operation `op_id` still marks it: a committed
    /// removal's deciding step.
    pub(crate) async fn delete_marked_table(&self, id: &[String], op_id: &str) -> Result<()> {
        let key = self.table_key(id)?;
        if let Some((table, etag)) = self.read::<TableRecord>(&key).await?
            && table.mark.as_ref().is_some_and(|m| m.op_id == op_id)
        {
            self.remove(&key, &etag).await?;
        }
        Ok(())
    }

    /// Removes operation `op_id`'s mark from table `id`, if it is still there.
    pub(crate) async fn unmark_table(&self, id: &[String], op_id: &str) -> Result<()> {
        let key = self.table_key(id)?;
        if let Some((mut table, etag)) = self.read::<TableRecord>(&key).await?
            && table.mark.as_ref().is_some_and(|m| m.op_id == op_id)
        {
            table.mark = None;
            match self
                .write(&key, encode(&table), Condition::IfMatch(etag))
                .await
            {
                Ok(_) | Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Removes namespace drop `op_id`'s mark from namespace `id`, if it is still there.
    pub(crate) async fn unmark_namespace(&self, id: &[String], op_id: &str) -> Result<()> {
        if let Some((ns, etag)) = self.read_namespace(id).await?
            && ns.mark.as_ref().is_some_and(|m| m.op_id == op_id)
        {
            let ns = NamespaceRecord { mark: None, ..ns }.revised();
            match self.write_namespace(&ns, Condition::IfMatch(etag)).await {
                Ok(_) | Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Table `id` as its committed arrival shows it, when its record is not published yet:
    /// a committed create, or a committed rename whose source is gone (the rename's
    /// linearization point is that delete). Reads only.
    pub(crate) async fn arriving_table(&self, id: &[String]) -> Result<Option<TableRecord>> {
        let Some((entry, _)) = self.read_entry(&self.table_pending_key(id)?).await? else {
            return Ok(None);
        };
        if let Entry::Intent(intent) = &entry
            && let Some(batch) = intent.deciding_batch()
        {
            return Ok(match &intent.kind {
                IntentKind::CreateTable { record } if self.batch_committed(batch).await? => {
                    Some(record.clone())
                }
                _ => None,
            });
        }
        let Some(record) = entry.committed_table() else {
            return Ok(None);
        };
        if let Entry::Intent(Intent {
            kind: IntentKind::RenameTable { from, .. },
            op_id,
            ..
        }) = &entry
            && self.source_still_marked(from, op_id).await?
        {
            return Ok(None);
        }
        Ok(Some(record.clone()))
    }

    /// Whether table `from` is still there under rename `op_id`'s mark.
    pub(crate) async fn source_still_marked(&self, from: &[String], op_id: &str) -> Result<bool> {
        Ok(self
            .read::<TableRecord>(&self.table_key(from)?)
            .await?
            .is_some_and(|(t, _)| t.mark.is_some_and(|m| m.op_id == op_id)))
    }

    /// Namespace `id` as its committed create shows it, when its record is not published yet.
    pub(crate) async fn arriving_namespace(
        &self,
        id: &[String],
    ) -> Result<Option<NamespaceRecord>> {
        let Some((name, parent)) = id.split_last() else {
            return Ok(None);
        };
        if self.layout.endpoint_mode() && parent.is_empty() {
            return Ok(None);
        }
        let key = Layout::pending_namespace_key(&self.layout.place(parent)?, name);
        Ok(match self.read_entry(&key).await? {
            Some((
                Entry::Intent(Intent {
                    state: IntentState::Committed,
                    kind: IntentKind::CreateNamespace { record },
                    ..
                }),
                _,
            )) => Some(record),
            _ => None,
        })
    }

    /// A request wants the pending key `key` (reserving the record key `record_key`) and
    /// found it taken: settle what is abandoned, let a committed operation take its deciding
    /// step, and wait a little for a live one. When the entry goes, the record tells whether
    /// it went by publishing.
    pub(crate) async fn await_rival(&self, key: &str, record_key: &str) -> Result<Rival> {
        let mut patience = self.patience();
        loop {
            let Some((entry, etag)) = self.read_entry(key).await? else {
                return Ok(match self.store.get(record_key).await? {
                    Some(_) => Rival::Committed,
                    None => Rival::Gone,
                });
            };
            if (self.settleable_entry(&entry) || entry.is_aborted())
                && self.settle(key, entry.clone(), &etag).await?
            {
                continue;
            }
            match &entry {
                Entry::Intent(Intent {
                    state: IntentState::Committed,
                    kind,
                    op_id,
                    ..
                }) => {
                    match kind {
                        IntentKind::RenameTable { from, .. } => {
                            // The name is the rename's once its source is gone: help that
                            // along rather than claim the name is taken while readers cannot
                            // see it.
                            self.delete_marked_table(from, op_id).await?;
                        }
                        IntentKind::DropTable { record, .. } => {
                            // A batch's deregister, being finished: the name is leaving, so
                            // take its deciding step and wait for the entry to go.
                            self.delete_marked_table(&record.id, op_id).await?;
                            if !patience.wait().await {
                                return Ok(Rival::Busy);
                            }
                            continue;
                        }
                        _ => {}
                    }
                    return Ok(Rival::Committed);
                }
                _ => {
                    if !patience.wait().await {
                        return Ok(Rival::Busy);
                    }
                }
            }
        }
    }

    /// The cell of table or namespace `id`'s parent.
    pub(crate) fn cell_of(&self, id: &[String]) -> Result<String> {
        let parent = &id[..id.len().saturating_sub(1)];
        Ok(self.layout.place(parent)?.cell)
    }

    pub(crate) fn busy(&self, what: &str, id: &[String]) -> Error {
        Error::conflict(format!(
            "{what} '{}' is being changed by another request; retry",
            self.show(id)
        ))
    }
}

/// Publishes a record from a committed intent, unless it already is. It takes the store
/// rather than the catalog so work left after an answer can run it.
async fn put_published(store: &dyn Store, key: &str, body: bytes::Bytes, uid: &str) -> Result<()> {
    match write_known(store, key, body, Condition::IfAbsent).await {
        Ok(_) => Ok(()),
        Err(StoreError::PreconditionFailed) => {
            let holder = match store.get(key).await? {
                Some(object) => serde_json::from_slice::<serde_json::Value>(&object.body)
                    .ok()
                    .and_then(|v| v.get("uid").and_then(|u| u.as_str()).map(str::to_string)),
                None => None,
            };
            if holder.as_deref() != Some(uid) {
                // The name was reserved by the intent from before it committed, so this
                // can only be a damaged warehouse; say so rather than overwrite.
                tracing::error!(
                    key,
                    uid,
                    ?holder,
                    "a committed operation found its name taken"
                );
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// A conditional write whose outcome is known even when the store's answer is lost: on
/// an error (a timeout, or a refusal of a retry whose first attempt landed) the object
/// is read back, and the write counts as done if it holds exactly these bytes. Every
/// body the catalog writes names its operation, so no one else writes the same bytes.
pub(crate) async fn write_known(
    store: &dyn Store,
    key: &str,
    body: bytes::Bytes,
    cond: Condition,
) -> std::result::Result<String, StoreError> {
    match store.put(key, body.clone(), cond).await {
        Ok(etag) => Ok(etag),
        Err(StoreError::NoSuchBucket(b)) => Err(StoreError::NoSuchBucket(b)),
        Err(e) => match store.get(key).await {
            Ok(Some(obj)) if obj.body == body => Ok(obj.etag),
            _ => Err(e),
        },
    }
}
