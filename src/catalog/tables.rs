//! Tables: declare and register (creates), describe and exists, drop and deregister
//! (removals), and rename.
//!
//! - A create reserves the name with its staged record at the name's pending key, checks
//!   the namespace, claims the data folder and checks the name is free (side by side), then
//!   commits (`commit_create`).
//! - A removal writes its intent under `drops/`, marks the record, commits the intent, then
//!   deletes the record (its linearization point) and, once committed, the data (for a
//!   drop) and the folder claim.
//! - A rename reserves the new name with its intent, marks the source and checks the target
//!   namespace and name (side by side), commits the intent, deletes the source (its
//!   linearization point) and publishes the record under its new name.

use super::claims::Claim;
pub use super::dropped::Removal;
use super::intents::{MarkState, Rival};
use super::layout::Layout;
use super::namespaces::Commit;
use super::records::*;
use super::{Catalog, DatasetDetails};
use crate::access::Ctx;
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// A create staged and checked, not committed (`Catalog::stage_table`).
pub(crate) struct Staged {
    pub pending_key: String,
    pub final_key: String,
    /// The staged entry's.
    pub etag: String,
    pub record: TableRecord,
}

/// What is left of a committed drop once its table is gone: deleting the data, then the
/// folder claim and the intent.
pub struct DataCleanup {
    intent_key: String,
    intent: Intent,
    etag: String,
}

impl Catalog {
    pub(crate) async fn read_table(&self, id: &[String]) -> Result<Option<(TableRecord, String)>> {
        let key = self.table_key(id)?;
        self.read::<TableRecord>(&key).await
    }

    /// Table `id`'s record as readers see it: unmarked, and none when a batch that
    /// deregisters it has committed (`departed`).
    async fn visible_table(&self, id: &[String]) -> Result<Option<TableRecord>> {
        match self.read_table(id).await? {
            Some((table, _)) if self.departed(&table).await? => Ok(None),
            Some((table, _)) => Ok(Some(TableRecord {
                mark: None,
                ..table
            })),
            None => Ok(None),
        }
    }

    /// The error for a table that is not there: NamespaceNotFound when its namespace is
    /// missing too, TableNotFound when it is there, and the store's own error when the
    /// namespace could not be read (a 404 then would claim what no read showed).
    async fn table_missing(&self, id: &[String]) -> Error {
        let parent = &id[..id.len() - 1];
        match self.find_namespace(parent).await {
            Ok(None) => Error::namespace_not_found(&self.show(parent)),
            Ok(Some(_)) => Error::table_not_found(&self.show(id)),
            Err(e) => e,
        }
    }

    /// One store read when the table is there; when it is not, its pending entry and its
    /// namespace are read side by side.
    pub async fn describe_table(&self, ctx: &Ctx, id: &[String]) -> Result<TableRecord> {
        self.may_read_table(ctx, id)?;
        if let Some(table) = self.visible_table(id).await? {
            return Ok(table);
        }
        let (parent, _) = self.split_table(id)?;
        let (arriving, namespace) =
            tokio::join!(self.arriving_table(id), self.find_namespace(parent));
        if let Some(table) = arriving? {
            return Ok(table);
        }
        // A create or rename may have published and removed its entry between the reads.
        if let Some(table) = self.visible_table(id).await? {
            return Ok(table);
        }
        match namespace? {
            None => Err(Error::namespace_not_found(&self.show(parent))),
            Some(_) => Err(Error::table_not_found(&self.show(id))),
        }
    }

    pub async fn table_exists(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        self.describe_table(ctx, id).await.map(|_| ())
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

    /// DeclareTable: reserve the name and a data folder; no data is written.
    pub async fn declare_table(
        &self,
        ctx: &Ctx,
        id: &[String],
        location: Option<&str>,
        properties: Properties,
    ) -> Result<TableRecord> {
        self.may_create_table(ctx, id)?;
        self.create_table(id, location, properties, "declare").await
    }

    /// RegisterTable: adopt an existing Lance dataset at `location`. With `overwrite`, an
    /// existing table of that name is deregistered first (two steps, each atomic). The
    /// dataset is looked for once the folder is claimed (see `create_table`), so a name that
    /// is taken is reported as such whatever the folder holds.
    pub async fn register_table(
        &self,
        ctx: &Ctx,
        id: &[String],
        location: &str,
        overwrite: bool,
        properties: Properties,
    ) -> Result<TableRecord> {
        self.may_create_table(ctx, id)?;
        if overwrite {
            self.may_remove_table(ctx, id)?;
        }
        let (parent, _) = self.split_table(id)?;
        let placed = self.layout.place(parent)?;
        let data_key = self.layout.data_key_of(location, &placed.cell)?;
        let probe = self.probe_table(id, data_key, Properties::new(), "");
        if overwrite && let Some((existing, etag)) = self.read_for_update(id).await? {
            if existing.data_key == probe.data_key {
                if !self.has_data(&probe).await? {
                    return Err(Error::invalid(format!(
                        "location '{location}' holds no Lance dataset (no _versions/ manifest)"
                    )));
                }
                let updated = TableRecord {
                    properties,
                    mark: None,
                    ..existing
                }
                .revised();
                self.write(
                    &self.table_key(id)?,
                    encode(&updated),
                    Condition::IfMatch(etag),
                )
                .await?;
                return Ok(updated);
            }
            self.remove_table(id, Removal::Deregister).await?;
        }
        self.create_table(id, Some(location), properties, "register")
            .await
    }

    /// Table `id` as a create would place it in folder `data_key`, before it is staged (no
    /// uid, no times): what is checked before a create writes anything.
    pub(crate) fn probe_table(
        &self,
        id: &[String],
        data_key: String,
        properties: Properties,
        origin: &str,
    ) -> TableRecord {
        TableRecord {
            format_version: FORMAT_VERSION,
            id: id.to_vec(),
            uid: String::new(),
            location: self.layout.uri_of(&data_key),
            data_key,
            created_at_ms: 0,
            properties,
            origin: origin.to_string(),
            created_by: None,
            mark: None,
            rev: String::new(),
        }
    }

    /// Table `id`'s record ready to be removed (by a drop, a deregister, or a batch's
    /// deregister): unmarked, at the ETag read, with whatever entry brought it to its name
    /// cleared first (see `clear_arrival`).
    async fn removable(&self, id: &[String]) -> Result<(TableRecord, String)> {
        let Some((record, etag)) = self.read_for_update(id).await? else {
            return Err(self.table_missing(id).await);
        };
        let record = TableRecord {
            mark: None,
            ..record
        };
        self.clear_arrival(id, &record.uid).await?;
        Ok((record, etag))
    }

    /// Creates table `id` (declare or register).
    async fn create_table(
        &self,
        id: &[String],
        location: Option<&str>,
        properties: Properties,
        origin: &str,
    ) -> Result<TableRecord> {
        let Staged {
            pending_key,
            final_key,
            etag,
            record,
        } = self
            .stage_table(id, location, properties, origin, None)
            .await?;
        // 3. Commit.
        let kind = IntentKind::CreateTable {
            record: record.clone(),
        };
        match self
            .commit_create(
                &pending_key,
                &etag,
                &final_key,
                &record.uid,
                record.created_at_ms,
                kind,
            )
            .await
        {
            Ok(Commit::Done) => Ok(record),
            Ok(Commit::Taken) => {
                self.abandon_staged(&pending_key, &etag, Some(record)).await;
                Err(Error::table_exists(&self.show(id)))
            }
            // Settled by someone who took it for abandoned (and released its claim): it
            // did not happen.
            Ok(Commit::Lost) => Err(self.busy("table", id)),
            Err(e) => {
                // Unknown: if the staged record is still ours it did not commit, and is
                // aborted here (if the commit did land, the abort finds it changed).
                self.abandon_staged(&pending_key, &etag, Some(record)).await;
                Err(e)
            }
        }
    }

    /// The intent a declare inside batch `batch` stages for `record`: prepared, decided by
    /// the batch's record, with the record's uid for its id (as a staged record has).
    pub(crate) fn batch_create_intent(node: &str, record: &TableRecord, batch: &str) -> Intent {
        let mut intent = Intent::new(
            record.uid.clone(),
            node.to_string(),
            IntentKind::CreateTable {
                record: record.clone(),
            },
        );
        intent.started_at_ms = record.created_at_ms;
        intent.batch = Some(batch.to_string());
        intent
    }

    /// A create's first two steps: the name reserved by the staged record at its pending
    /// key, the namespace open, the data folder claimed and the name free. With `batch`, the
    /// staged entry is an intent that batch's record decides (a declare inside
    /// BatchCommitTables), which the batch commits with its other entries.
    pub(crate) async fn stage_table(
        &self,
        id: &[String],
        location: Option<&str>,
        properties: Properties,
        origin: &str,
        batch: Option<&str>,
    ) -> Result<Staged> {
        let staged_body = |record: &TableRecord| match batch {
            None => encode(record),
            Some(batch) => encode(&Self::batch_create_intent(&self.node, record, batch)),
        };
        let (parent, name) = self.split_table(id)?;
        super::policy::check(&properties)?;
        let placed = self.layout.place(parent)?;
        let final_key = Layout::table_key(&placed, name);
        let pending_key = Layout::pending_table_key(&placed, name);
        let cell = placed.cell.clone();
        let chosen = match location {
            Some(loc) => Some(self.layout.data_key_of(loc, &cell)?),
            None => None,
        };
        let mut patience = self.patience();
        for _attempt in 0..64 {
            let uid = new_uid();
            let data_key = chosen
                .clone()
                .unwrap_or_else(|| Layout::default_data_key(&placed, name, ""));
            let mut record = TableRecord {
                format_version: FORMAT_VERSION,
                id: id.to_vec(),
                uid: uid.clone(),
                location: self.layout.uri_of(&data_key),
                data_key,
                created_at_ms: now_ms(),
                properties: properties.clone(),
                origin: origin.to_string(),
                created_by: Some(self.node.clone()),
                mark: None,
                rev: new_uid(),
            };
            // 1. Reserve the name: racing creates, namespace drops and recovery see it now.
            let mut etag = match self
                .write(&pending_key, staged_body(&record), Condition::IfAbsent)
                .await
            {
                Ok(etag) => etag,
                Err(StoreError::PreconditionFailed) => {
                    match self.await_rival(&pending_key, &final_key).await? {
                        Rival::Gone => continue,
                        Rival::Committed => return Err(Error::table_exists(&self.show(id))),
                        Rival::Busy => return Err(self.busy("table", id)),
                    }
                }
                Err(StoreError::NoSuchBucket(_)) => {
                    return Err(Error::namespace_not_found(&self.show(parent)));
                }
                Err(e) => return Err(e.into()),
            };
            // 2. The namespace is open, the folder is ours, the name is free: side by side.
            let (open, claim, taken) = tokio::join!(
                self.ensure_open_namespace(parent),
                self.claim_location(&cell, &record.data_key, &uid, id),
                self.store.get(&final_key)
            );
            // A claim whose write failed may have landed all the same (an answer lost in
            // transit, and the read-back failed too): it is given up like a granted one
            // (the release is conditional on the claim naming this create's uid).
            let mut claimed = !matches!(claim, Ok(Claim::Taken(..) | Claim::Overlaps(..)));
            let mut holder_in_flight = false;
            let checked = async {
                open?;
                if taken?.is_some() {
                    return Err(Error::table_exists(&self.show(id)));
                }
                let refused = match claim? {
                    Claim::Claimed => None,
                    Claim::Taken(..) if location.is_none() => {
                        // The server's plain choice is held, say by a renamed table that kept
                        // its folder: take a unique one, restaging the record first so a
                        // settler knows which claim to release.
                        record.data_key =
                            Layout::default_data_key(&placed, name, &format!("-{}", &uid[..8]));
                        record.location = self.layout.uri_of(&record.data_key);
                        record.rev = new_uid();
                        etag = self
                            .write(
                                &pending_key,
                                staged_body(&record),
                                Condition::IfMatch(etag.clone()),
                            )
                            .await?;
                        match self
                            .claim_location(&cell, &record.data_key, &uid, id)
                            .await?
                        {
                            Claim::Claimed => {
                                claimed = true;
                                None
                            }
                            refused => Some(refused),
                        }
                    }
                    refused => Some(refused),
                };
                if let Some(refused) = refused {
                    // Refused by a create still in flight: it may yet fail, so the folder is
                    // not known to be taken. Wait and try again rather than say it is.
                    holder_in_flight = self.claim_in_flight(&refused).await?;
                    return Err(self.claim_error(&record.data_key, refused));
                }
                // Once the folder is claimed no drop can delete its data, so a dataset seen
                // now stays there.
                if origin == "register" && !self.has_data(&record).await? {
                    return Err(Error::invalid(format!(
                        "location '{}' holds no Lance dataset (no _versions/ manifest)",
                        record.location
                    )));
                }
                Ok(())
            }
            .await;
            if let Err(e) = checked {
                self.abandon_staged(&pending_key, &etag, claimed.then(|| record.clone()))
                    .await;
                if holder_in_flight {
                    if patience.wait().await {
                        continue;
                    }
                    return Err(self.busy("table", id));
                }
                return Err(e);
            }
            return Ok(Staged {
                pending_key,
                final_key,
                etag,
                record,
            });
        }
        Err(self.busy("table", id))
    }

    /// The record of table `id` ready to be changed: unmarked, or marked by an operation
    /// that is gone. Waits a little for a live operation on it; takes the deciding step of
    /// a committed one (after which the table is gone). `None` when there is no such table.
    pub(crate) async fn read_for_update(
        &self,
        id: &[String],
    ) -> Result<Option<(TableRecord, String)>> {
        let key = self.table_key(id)?;
        let mut patience = self.patience();
        loop {
            let Some((table, etag)) = self.read::<TableRecord>(&key).await? else {
                if self.arriving_table(id).await?.is_some() {
                    // Declared by a committed batch: publish it now rather than wait.
                    if self.settle_batch_entry(id, None).await? {
                        continue;
                    }
                    // Committed, about to be published: it exists, so wait for it.
                    if !patience.wait().await {
                        return Err(self.busy("table", id));
                    }
                    continue;
                }
                // Published (and its entry removed) between the two reads?
                if self.store.get(&key).await?.is_some() {
                    continue;
                }
                return Ok(None);
            };
            let Some(mark) = &table.mark else {
                return Ok(Some((table, etag)));
            };
            match self.resolve_mark(&key, &etag, mark).await? {
                MarkState::Void => return Ok(Some((table, etag))),
                MarkState::Moved => {}
                MarkState::Live => {
                    if !patience.wait().await {
                        return Err(self.busy("table", id));
                    }
                }
            }
        }
    }

    /// Removes the entry at `id`'s pending key if it is how table `uid` got there (its
    /// create's staged record left beside it, or its committed create or rename done but not
    /// yet removed). It must go before the table leaves `id`: an entry that committed is
    /// rolled forward by whoever finds it, which would publish the table again.
    async fn clear_arrival(&self, id: &[String], uid: &str) -> Result<()> {
        let key = self.table_pending_key(id)?;
        let mut patience = self.patience();
        loop {
            let Some((entry, etag)) = self.read_entry(&key).await? else {
                return Ok(());
            };
            let ours = match &entry {
                Entry::StagedTable(t) => t.uid == uid,
                Entry::Intent(intent) => {
                    let record = entry.committed_table();
                    if record.is_some_and(|r| r.uid == uid)
                        && let Some(s) = &intent.settler
                        && !self.settleable(
                            Some(&s.node),
                            s.since_ms,
                            s.since_ms.max(intent.alive_at_ms()),
                        )
                    {
                        // Another gateway is finishing it: let it.
                        if !patience.wait().await {
                            return Err(self.busy("table", id));
                        }
                        continue;
                    }
                    record.is_some_and(|r| r.uid == uid)
                }
                Entry::LegacyPending(p) => p.uid == uid,
                Entry::StagedNamespace(_) | Entry::LegacyDrop(_) => false,
            };
            if !ours || self.remove(&key, &etag).await? {
                return Ok(());
            }
        }
    }

    /// Takes back a table this gateway just created whose data could not be written (a
    /// failed CreateTable): removed with its folder, but only if the record is still the
    /// one created (a rival may have replaced it since).
    pub(crate) async fn abandon_table(&self, created: &TableRecord) -> Result<()> {
        // Its record may still be on its way (published after the create answered).
        match self.read_for_update(&created.id).await? {
            Some((current, _)) if current.uid == created.uid => self
                .remove_table_deferring(&created.id, Removal::Purge, false)
                .await
                .map(|_| ()),
            _ => Ok(()),
        }
    }

    /// DropTable (`delete_data`: kept for undrop as the table's policy says, `dropped`) and
    /// DeregisterTable, each finished before it returns.
    pub async fn drop_table(
        &self,
        ctx: &Ctx,
        id: &[String],
        delete_data: bool,
    ) -> Result<TableRecord> {
        self.may_remove_table(ctx, id)?;
        let how = if delete_data {
            Removal::Drop {
                by: Some(ctx.principal.name.clone()),
            }
        } else {
            Removal::Deregister
        };
        self.remove_table_deferring(id, how, false)
            .await
            .map(|(record, _)| record)
    }

    /// DropTable for a server: the table is gone when this returns (its record is deleted,
    /// nothing can reach it), and deleting its data, which may take long on a large table,
    /// is handed back as a `DataCleanup` to run after the answer (`finish_cleanup`). A cleanup
    /// that never runs (the gateway dies) is finished by recovery, as any committed drop.
    /// With `purge`, the data is deleted at once whatever the retention.
    pub async fn drop_table_later(
        &self,
        ctx: &Ctx,
        id: &[String],
        purge: bool,
    ) -> Result<(TableRecord, Option<DataCleanup>)> {
        self.may_remove_table(ctx, id)?;
        let how = if purge {
            Removal::Purge
        } else {
            Removal::Drop {
                by: Some(ctx.principal.name.clone()),
            }
        };
        self.remove_table_deferring(id, how, true).await
    }

    /// Deletes a dropped table's data, then its folder claim and its intent.
    pub async fn finish_cleanup(&self, cleanup: DataCleanup) {
        let DataCleanup {
            intent_key,
            mut intent,
            etag,
        } = cleanup;
        if !self.owner_in_time(intent.started_at_ms) {
            return; // past its time: a settler finishes it
        }
        if let Err(e) = self.roll_forward(&intent_key, &mut intent, etag).await {
            tracing::warn!(intent = %intent_key, error = %e, "drop cleanup incomplete; recovery will finish it");
        }
    }

    pub(crate) async fn remove_table(&self, id: &[String], how: Removal) -> Result<TableRecord> {
        self.remove_table_deferring(id, how, false)
            .await
            .map(|(record, _)| record)
    }

    async fn remove_table_deferring(
        &self,
        id: &[String],
        how: Removal,
        defer: bool,
    ) -> Result<(TableRecord, Option<DataCleanup>)> {
        let key = self.table_key(id)?;
        let cell = self.cell_of(id)?;
        let delete_data = how != Removal::Deregister;
        // A drop keeps the table for its retention, where the warehouse's format has the
        // records for it (`upgrade`): its namespaces' policy is read beside the record.
        let (first, retention) = tokio::join!(self.removable(id), async {
            match &how {
                Removal::Drop { .. } => self.drop_retention_above(&cell, id).await,
                _ => Ok(None),
            }
        });
        let retention = retention?;
        let mut first = Some(first?);
        for _attempt in 0..8 {
            let (record, etag) = match first.take() {
                Some(found) => found,
                None => self.removable(id).await?,
            };
            let keep_until_ms = match &retention {
                Some(above) => self.drop_kept_until(above, &record)?,
                None => None,
            };
            // 1. The intent, so the mark can always be traced.
            let op_id = new_uid();
            let intent_key = Layout::drop_key(&cell, &op_id);
            let mut intent = Intent::new(
                op_id.clone(),
                self.node.clone(),
                IntentKind::DropTable {
                    record: record.clone(),
                    delete_data,
                    keep_until_ms,
                    dropped: None,
                    dropped_by: match (&how, keep_until_ms) {
                        (Removal::Drop { by }, Some(_)) => by.clone(),
                        _ => None,
                    },
                },
            );
            if keep_until_ms.is_some() {
                intent.format_version = FORMAT_SOFT_DROP;
            }
            let intent_etag = self
                .write(&intent_key, encode(&intent), Condition::IfAbsent)
                .await?;
            // 2. The mark: no other change to the table proceeds from here on.
            let marked = TableRecord {
                mark: Some(Mark {
                    op_id,
                    intent: intent_key.clone(),
                    batch: None,
                }),
                ..record.clone()
            }
            .revised();
            let mark_etag = match self
                .write(&key, encode(&marked), Condition::IfMatch(etag))
                .await
            {
                Ok(e) => e,
                Err(e) => {
                    let _ = self.remove(&intent_key, &intent_etag).await;
                    match e {
                        StoreError::PreconditionFailed => continue,
                        other => return Err(other.into()),
                    }
                }
            };
            // 3. Commit.
            let committed_etag = match self
                .commit_intent(&intent_key, &mut intent, &intent_etag)
                .await
            {
                Ok(e) => e,
                Err(e) => {
                    if let Ok(true) = self.remove(&intent_key, &intent_etag).await {
                        let _ = self.unmark_table(id, &intent.op_id).await;
                    }
                    return Err(match e {
                        StoreError::PreconditionFailed => self.busy("table", id),
                        other => other.into(),
                    });
                }
            };
            // 4. The linearization point: the record goes (unless a helper took this step).
            // A kept table's dropped record is written beside it, so it is listed (and can be
            // undropped) once the drop answers; a failed write is the settler's to repeat.
            match &intent.kind {
                IntentKind::DropTable {
                    keep_until_ms: Some(purge_after_ms),
                    dropped_by,
                    ..
                } => {
                    let (removed, kept) = tokio::join!(
                        self.remove(&key, &mark_etag),
                        self.keep_dropped(
                            &intent.op_id,
                            &record,
                            intent.started_at_ms,
                            *purge_after_ms,
                            dropped_by.clone(),
                        )
                    );
                    removed?;
                    if let Err(e) = kept {
                        tracing::warn!(table = %self.show(id), error = %e, "dropped record not written yet; the drop's cleanup writes it");
                    }
                }
                _ => {
                    self.remove(&key, &mark_etag).await?;
                }
            }
            if delete_data {
                crate::telemetry::dropped(keep_until_ms.is_some());
            }
            // 5. The rest: data (or upkeep record), claim, intent (now, or by the caller
            // after its answer).
            if defer && delete_data {
                let cleanup = DataCleanup {
                    intent_key,
                    intent,
                    etag: committed_etag,
                };
                return Ok((record, Some(cleanup)));
            }
            if self.owner_in_time(intent.started_at_ms)
                && let Err(e) = self
                    .roll_forward(&intent_key, &mut intent, committed_etag)
                    .await
            {
                tracing::warn!(table = %self.show(id), error = %e, "drop cleanup incomplete; recovery will finish it");
            }
            return Ok((record, None));
        }
        Err(self.busy("table", id))
    }

    /// A deregister inside BatchCommitTables, up to its decision: its intent, which batch
    /// `batch` decides, at the table's pending key (where listings look, so a committed
    /// batch's deregister hides the table from them before its record goes), and the mark
    /// on the record that names it. Answers the intent's key, its ETag, the intent and the
    /// table as it was.
    pub(crate) async fn stage_deregister(
        &self,
        id: &[String],
        batch: &str,
    ) -> Result<(String, String, Intent, TableRecord)> {
        let key = self.table_key(id)?;
        let pending_key = self.table_pending_key(id)?;
        let mut patience = self.patience();
        for _attempt in 0..64 {
            let (record, etag) = self.removable(id).await?;
            let op_id = new_uid();
            let mut intent = Intent::new(
                op_id.clone(),
                self.node.clone(),
                IntentKind::DropTable {
                    record: record.clone(),
                    delete_data: false,
                    keep_until_ms: None,
                    dropped: None,
                    dropped_by: None,
                },
            );
            intent.batch = Some(batch.to_string());
            let intent_etag = match self
                .write(&pending_key, encode(&intent), Condition::IfAbsent)
                .await
            {
                Ok(e) => e,
                Err(StoreError::PreconditionFailed) => {
                    // Another operation on the name: settle it if that is due (a leftover,
                    // a decided batch's), else wait a little for it.
                    if let Some((entry, etag)) = self.read_entry(&pending_key).await?
                        && (self.settleable_entry(&entry) || entry.is_aborted())
                        && self.settle(&pending_key, entry, &etag).await?
                    {
                        continue;
                    }
                    if !patience.wait().await {
                        return Err(self.busy("table", id));
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let marked = TableRecord {
                mark: Some(Mark {
                    op_id,
                    intent: pending_key.clone(),
                    batch: Some(batch.to_string()),
                }),
                ..record.clone()
            }
            .revised();
            match self
                .write(&key, encode(&marked), Condition::IfMatch(etag))
                .await
            {
                Ok(_) => return Ok((pending_key, intent_etag, intent, record)),
                Err(e) => {
                    let _ = self.remove(&pending_key, &intent_etag).await;
                    match e {
                        StoreError::PreconditionFailed => continue,
                        other => return Err(other.into()),
                    }
                }
            }
        }
        Err(self.busy("table", id))
    }

    /// RenameTable: move the entry to a new id; the data stays where it is.
    pub async fn rename_table(&self, ctx: &Ctx, id: &[String], new_id: &[String]) -> Result<()> {
        self.may_remove_table(ctx, id)?;
        self.may_create_table(ctx, new_id)?;
        let (new_parent, _) = self.split_table(new_id)?;
        if self.cell_of(id)? != self.cell_of(new_id)? {
            return Err(Error::invalid(
                "a table cannot be renamed into another bucket",
            ));
        }
        if id == new_id {
            return Err(Error::invalid("the new id is the table's current id"));
        }
        let key = self.table_key(id)?;
        let final_key = self.table_key(new_id)?;
        let pending_key = self.table_pending_key(new_id)?;
        let shown_new = self.show(new_id);
        for _attempt in 0..8 {
            let Some((record, etag)) = self.read_for_update(id).await? else {
                return Err(self.table_missing(id).await);
            };
            self.clear_arrival(id, &record.uid).await?;
            let op_id = new_uid();
            let moved = TableRecord {
                id: new_id.to_vec(),
                mark: None,
                ..record.clone()
            }
            .revised();
            let mut intent = Intent::new(
                op_id.clone(),
                self.node.clone(),
                IntentKind::RenameTable {
                    from: id.to_vec(),
                    record: moved,
                },
            );
            // 1. Reserve the new name with the intent.
            let intent_etag = match self
                .write(&pending_key, encode(&intent), Condition::IfAbsent)
                .await
            {
                Ok(e) => e,
                Err(StoreError::PreconditionFailed) => {
                    match self.await_rival(&pending_key, &final_key).await? {
                        Rival::Gone => continue,
                        Rival::Committed => {
                            // "The new name is taken" is only the answer while the table is
                            // still there (a rival may have just renamed it away): look again.
                            match self.store.get(&key).await? {
                                Some(obj) if obj.etag == etag => {
                                    return Err(Error::table_exists(&shown_new));
                                }
                                _ => continue,
                            }
                        }
                        Rival::Busy => return Err(self.busy("table", new_id)),
                    }
                }
                Err(StoreError::NoSuchBucket(_)) => {
                    return Err(Error::namespace_not_found(&self.show(new_parent)));
                }
                Err(e) => return Err(e.into()),
            };
            // 2. Mark the source; check the target namespace and name; side by side.
            let marked = TableRecord {
                mark: Some(Mark {
                    op_id: op_id.clone(),
                    intent: pending_key.clone(),
                    batch: None,
                }),
                ..record.clone()
            }
            .revised();
            let (mark, open, taken) = tokio::join!(
                self.write(&key, encode(&marked), Condition::IfMatch(etag)),
                self.ensure_open_namespace(new_parent),
                self.store.get(&final_key)
            );
            let checked = match (&mark, open, taken) {
                (Err(StoreError::PreconditionFailed), _, _) => Err(None),
                (Err(e), _, _) => Err(Some(
                    Error::unavailable("the warehouse store failed").with_detail(e.to_string()),
                )),
                (_, Err(e), _) => Err(Some(e)),
                (_, _, Err(e)) => Err(Some(e.into())),
                (_, _, Ok(Some(_))) => Err(Some(Error::table_exists(&shown_new))),
                (Ok(_), Ok(()), Ok(None)) => Ok(()),
            };
            if let Err(failure) = checked {
                let _ = self.remove(&pending_key, &intent_etag).await;
                if let Ok(mark_etag) = &mark {
                    let _ = self
                        .write(
                            &key,
                            encode(&record.clone().revised()),
                            Condition::IfMatch(mark_etag.clone()),
                        )
                        .await;
                }
                match failure {
                    None => continue,
                    Some(e) => return Err(e),
                }
            }
            let mark_etag = mark.map_err(Error::from)?;
            // 3. Commit.
            let committed_etag = match self
                .commit_intent(&pending_key, &mut intent, &intent_etag)
                .await
            {
                Ok(e) => e,
                Err(e) => {
                    if let Ok(true) = self.remove(&pending_key, &intent_etag).await {
                        let _ = self.unmark_table(id, &op_id).await;
                    }
                    return Err(match e {
                        StoreError::PreconditionFailed => self.busy("table", id),
                        other => other.into(),
                    });
                }
            };
            // 4. The linearization point: the source goes (unless a helper took this step).
            self.remove(&key, &mark_etag).await?;
            // 5. Publish under the new name.
            if self.owner_in_time(intent.started_at_ms)
                && let Err(e) = self
                    .roll_forward(&pending_key, &mut intent, committed_etag)
                    .await
            {
                tracing::warn!(table = %shown_new, error = %e, "a committed rename could not be published yet; recovery will");
            }
            return Ok(());
        }
        Err(self.busy("table", id))
    }
}
