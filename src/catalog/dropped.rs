//! Soft drops: a dropped table is gone for every client at once (its record goes, its name
//! is free) but its data, versions, tags, indices and record are kept for its retention
//! (`maintenance.drop_retention`, `--drop-retention`), so it can be undropped, under its
//! name or another. Then the recovery sweep purges it.
//!
//! - A drop is the usual drop intent (`IntentKind::DropTable`) with `keep_until_ms`: once
//!   committed, the table record goes (the linearization point, as for any drop) and a
//!   `DroppedTable` is written at `dropped/<table id>/<drop_id>.json` (the id's parts as
//!   a table record's key has them), so the drops of one name are one short listing and
//!   the drops of one namespace one prefix. The folder claim stays with the
//!   table's uid, so a new table of the same name gets a folder of its own.
//! - An undrop is a rename out of the dropped tables (`IntentKind::UndropTable`): its intent
//!   reserves the target name, the dropped record is marked, and the commit of the intent
//!   makes the table visible; the record is published and the dropped record deleted after.
//! - A purge is a drop of the dropped record (`IntentKind::DropTable` with `dropped`): it
//!   marks the dropped record, commits, then deletes the data, the receipts and the claim,
//!   and last the dropped record.
//!
//! Undrop and purge both mark the dropped record with a conditional write first, so of two
//! of them on one drop only one proceeds, and a purge never deletes the data of a table an
//! undrop brought back. All of it is format 3 (`upgrade`): a warehouse still at format 2
//! deletes a dropped table's data at once, as the previous release does.

use serde::Serialize;

use super::Catalog;
use super::intents::{MarkState, Rival};
use super::layout::Layout;
use super::records::*;
use crate::access::{Ctx, Level};
use crate::error::{Code, Error, Result};
use crate::store::{Condition, StoreError};

/// How a table leaves the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// DeregisterTable: the record goes, the data stays (it was never the catalog's).
    Deregister,
    /// DropTable: kept for undrop for the table's retention where the warehouse's format
    /// allows it, else deleted at once. `by`: the principal, kept with the drop.
    Drop { by: Option<String> },
    /// A drop whose data is deleted at once (`purge=true`; a failed create's leftovers).
    Purge,
}

/// A dropped table as listings show it.
#[derive(Clone, Debug, Serialize)]
pub struct DroppedInfo {
    pub drop_id: String,
    /// The table's id when it was dropped.
    pub id: Vec<String>,
    pub location: String,
    pub dropped_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_by: Option<String>,
    pub purge_after_ms: u64,
    /// Objects and bytes under its data folder (absent when the store cannot say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// An undrop or purge of it is in flight.
    pub busy: bool,
}

/// What a purge sweep found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PurgeSweep {
    pub kept: usize,
    pub kept_bytes: u64,
    pub purged: usize,
}

impl Layout {
    pub fn dropped_prefix(cell: &str) -> String {
        format!("{}dropped/", Self::catalog_dir(cell))
    }

    /// The folder of the drops kept for the table (or, for a namespace, of its tables and
    /// those below it) whose id below `cell` is `rel`.
    pub fn dropped_of(cell: &str, rel: &[String]) -> String {
        let segs: String = rel
            .iter()
            .map(|p| format!("{}/", super::names::key_segment(p)))
            .collect();
        format!("{}{segs}", Self::dropped_prefix(cell))
    }

    pub fn dropped_key(cell: &str, rel: &[String], drop_id: &str) -> String {
        format!("{}{drop_id}.json", Self::dropped_of(cell, rel))
    }
}

/// A drop id is what this gateway makes them: hex, so it is safe in a key.
fn check_drop_id(drop_id: &str) -> Result<()> {
    if drop_id.is_empty()
        || drop_id.len() > 64
        || !drop_id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(Error::invalid(format!(
            "'{drop_id}' is not a drop id (the `drop_id` a listing of dropped tables gives)"
        )));
    }
    Ok(())
}

impl Catalog {
    /// The policy a drop of table `id` in `cell` starts from (the defaults and its
    /// namespaces' properties), if the drop may keep it at all: not on a warehouse below
    /// format 3.
    pub(crate) async fn drop_retention_above(
        &self,
        cell: &str,
        id: &[String],
    ) -> Result<Option<super::policy::Policy>> {
        if self.write_format(cell).await? < FORMAT_SOFT_DROP {
            return Ok(None);
        }
        Ok(Some(self.namespaces_policy(id).await?))
    }

    /// When a drop of `record` may be purged under the namespaces' policy `above` and its own
    /// properties; `None` (deleted at once) for a retention of zero.
    pub(crate) fn drop_kept_until(
        &self,
        above: &super::policy::Policy,
        record: &TableRecord,
    ) -> Result<Option<u64>> {
        let retention = above.resolve([&record.properties])?.drop_retention;
        if retention.is_zero() {
            return Ok(None);
        }
        Ok(Some(now_ms().saturating_add(retention.as_millis() as u64)))
    }

    /// A committed soft drop's last step but one: its dropped record, written unless it is
    /// there already (a settler may repeat the step).
    pub(crate) async fn keep_dropped(
        &self,
        drop_id: &str,
        record: &TableRecord,
        dropped_at_ms: u64,
        purge_after_ms: u64,
        dropped_by: Option<String>,
    ) -> Result<()> {
        let placed = self.layout.place(&record.id)?;
        let kept = DroppedTable {
            format_version: FORMAT_SOFT_DROP,
            drop_id: drop_id.to_string(),
            table: TableRecord {
                mark: None,
                ..record.clone()
            },
            dropped_at_ms,
            dropped_by,
            purge_after_ms,
            mark: None,
            rev: new_uid(),
        };
        match self
            .write(
                &Layout::dropped_key(&placed.cell, placed.rel, drop_id),
                encode(&kept),
                Condition::IfAbsent,
            )
            .await
        {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every dropped record under `prefix` (`shallow`: only those directly in it), with its
    /// key and ETag.
    async fn dropped_in(
        &self,
        prefix: &str,
        shallow: bool,
    ) -> Result<Vec<(String, DroppedTable, String)>> {
        let keys = self.all_keys(prefix, shallow).await?;
        let reads = keys.iter().map(|k| self.read::<DroppedTable>(k));
        let found = futures::future::try_join_all(reads).await?;
        Ok(keys
            .into_iter()
            .zip(found)
            .filter_map(|(k, f)| f.map(|(d, etag)| (k, d, etag)))
            .collect())
    }

    /// Dropped tables are an admin's: listing, undropping and purging them takes the admin
    /// grant on the namespace or table concerned.
    fn may_manage_dropped(&self, ctx: &Ctx, id: &[String]) -> Result<()> {
        if self.access(ctx, id) >= Level::Admin {
            return Ok(());
        }
        crate::telemetry::denial("admin");
        Err(Error::permission_denied(format!(
            "managing the dropped tables of '{}' takes the admin grant",
            self.show(id)
        )))
    }

    /// The tables dropped in namespace `namespace` and kept for undrop, newest first.
    pub async fn list_dropped(&self, ctx: &Ctx, namespace: &[String]) -> Result<Vec<DroppedInfo>> {
        self.may_manage_dropped(ctx, namespace)?;
        let placed = self.layout.place(namespace)?;
        let prefix = Layout::dropped_of(&placed.cell, placed.rel);
        // Only the namespace's own tables: their drops lie two levels below its folder.
        let keys = self.all_keys(&prefix, false).await?;
        let own: Vec<&String> = keys
            .iter()
            .filter(|k| k[prefix.len()..].matches('/').count() == 1)
            .collect();
        let reads = own.iter().map(|k| self.read::<DroppedTable>(k));
        let found = futures::future::try_join_all(reads).await?;
        let mut out = Vec::new();
        for d in found.into_iter().flatten().map(|(d, _)| d) {
            if d.table.id.len() != namespace.len() + 1 || !d.table.id.starts_with(namespace) {
                continue;
            }
            let size = self
                .store
                .bytes_under(&format!("{}/", d.table.data_key))
                .await?;
            out.push(DroppedInfo {
                drop_id: d.drop_id,
                location: d.table.location.clone(),
                id: d.table.id,
                dropped_at_ms: d.dropped_at_ms,
                dropped_by: d.dropped_by,
                purge_after_ms: d.purge_after_ms,
                objects: size.map(|(n, _)| n),
                bytes: size.map(|(_, b)| b),
                busy: d.mark.is_some(),
            });
        }
        out.sort_by_key(|d| std::cmp::Reverse(d.dropped_at_ms));
        Ok(out)
    }

    /// The dropped record of table `id` (the drop `drop_id`, or its latest), unmarked or
    /// marked by an operation that is gone.
    async fn find_dropped(
        &self,
        id: &[String],
        drop_id: Option<&str>,
    ) -> Result<(String, DroppedTable, String)> {
        if let Some(d) = drop_id {
            check_drop_id(d)?;
        }
        let placed = self.layout.place(id)?;
        let cell = placed.cell.clone();
        let mut patience = self.patience();
        loop {
            // A named drop is read where it lies; the latest drop of a name is looked for
            // among that name's (one short listing).
            let candidates = match drop_id {
                Some(d) => {
                    let key = Layout::dropped_key(&cell, placed.rel, d);
                    self.read::<DroppedTable>(&key)
                        .await?
                        .map(|(t, etag)| (key, t, etag))
                        .into_iter()
                        .collect()
                }
                None => {
                    self.dropped_in(&Layout::dropped_of(&cell, placed.rel), true)
                        .await?
                }
            };
            let latest = candidates
                .into_iter()
                .filter(|(_, d, _)| {
                    d.table.id == id && drop_id.is_none_or(|want| want == d.drop_id)
                })
                .max_by_key(|(_, d, _)| d.dropped_at_ms);
            let Some((key, dropped, etag)) = latest else {
                let what = match drop_id {
                    Some(d) => format!("drop id '{d}' of table '{}'", self.show(id)),
                    None => format!("table '{}'", self.show(id)),
                };
                return Err(Error::new(
                    Code::TableNotFound,
                    format!("no dropped {what} is kept (purged, undropped, or never dropped)"),
                ));
            };
            // The drop that kept it may still be finishing (its dropped record is written
            // before its intent goes, and a settler repeats that write): wait for it, or
            // settle it if it was left, so nothing writes the record again once it is gone.
            let drop_key = Layout::drop_key(&cell, &dropped.drop_id);
            if let Some((entry, entry_etag)) = self.read_entry(&drop_key).await?
                && entry.op_id() == dropped.drop_id
            {
                if self.settleable_entry(&entry) {
                    self.settle(&drop_key, entry, &entry_etag).await?;
                } else if !patience.wait().await {
                    return Err(self.busy("dropped table", id));
                }
                continue;
            }
            let Some(mark) = dropped.mark.clone() else {
                return Ok((key, dropped, etag));
            };
            match self.resolve_mark(&key, &etag, &mark).await? {
                MarkState::Void => return Ok((key, dropped, etag)),
                MarkState::Moved => {}
                MarkState::Live => {
                    if !patience.wait().await {
                        return Err(self.busy("dropped table", id));
                    }
                }
            }
        }
    }

    /// Undrops table `id` (the drop `drop_id`, or its latest), under `new_id` or its own
    /// name: every version, tag and index as they were. Refused when the target name is
    /// taken (TableAlreadyExists) or its namespace is gone (NamespaceNotFound).
    pub async fn undrop_table(
        &self,
        ctx: &Ctx,
        id: &[String],
        drop_id: Option<&str>,
        new_id: Option<&[String]>,
    ) -> Result<TableRecord> {
        let target = new_id.unwrap_or(id).to_vec();
        self.may_manage_dropped(ctx, id)?;
        self.may_create_table(ctx, &target)?;
        let (parent, _) = self.split_table(&target)?;
        if self.cell_of(&target)? != self.cell_of(id)? {
            return Err(Error::invalid(
                "a table is undropped into the bucket it was dropped from",
            ));
        }
        let table_key = self.table_key(&target)?;
        let pending_key = self.table_pending_key(&target)?;
        let mut patience = self.patience();
        for _attempt in 0..64 {
            let (dkey, dropped, detag) = self.find_dropped(id, drop_id).await?;
            let op_id = new_uid();
            let record = TableRecord {
                id: target.clone(),
                mark: None,
                ..dropped.table.clone()
            }
            .revised();
            let mut intent = Intent::new(
                op_id.clone(),
                self.node.clone(),
                IntentKind::UndropTable {
                    dropped: dkey.clone(),
                    record: record.clone(),
                },
            );
            intent.format_version = FORMAT_SOFT_DROP;
            // 1. The target name, reserved.
            let intent_etag = match self
                .write(&pending_key, encode(&intent), Condition::IfAbsent)
                .await
            {
                Ok(e) => e,
                Err(StoreError::PreconditionFailed) => {
                    match self.await_rival(&pending_key, &table_key).await? {
                        Rival::Gone => continue,
                        Rival::Committed => return Err(Error::table_exists(&self.show(&target))),
                        Rival::Busy => return Err(self.busy("table", &target)),
                    }
                }
                Err(StoreError::NoSuchBucket(_)) => {
                    return Err(Error::namespace_not_found(&self.show(parent)));
                }
                Err(e) => return Err(e.into()),
            };
            // 2. The dropped record, marked: no purge or other undrop of it proceeds.
            let marked = DroppedTable {
                mark: Some(Mark {
                    op_id: op_id.clone(),
                    intent: pending_key.clone(),
                    batch: None,
                }),
                rev: new_uid(),
                ..dropped.clone()
            };
            if let Err(e) = self
                .write(&dkey, encode(&marked), Condition::IfMatch(detag))
                .await
            {
                let _ = self.remove(&pending_key, &intent_etag).await;
                match e {
                    StoreError::PreconditionFailed => {
                        if patience.wait().await {
                            continue;
                        }
                        return Err(self.busy("dropped table", id));
                    }
                    other => return Err(other.into()),
                }
            }
            // 3. The namespace open and the name free.
            let (open, taken) = tokio::join!(
                self.ensure_open_namespace(parent),
                self.store.get(&table_key)
            );
            let checked = match (open, taken) {
                (Err(e), _) => Err(e),
                (_, Err(e)) => Err(e.into()),
                (Ok(()), Ok(Some(_))) => Err(Error::table_exists(&self.show(&target))),
                (Ok(()), Ok(None)) => Ok(()),
            };
            if let Err(e) = checked {
                self.give_up_undrop(&pending_key, &intent_etag, &dkey, &op_id)
                    .await;
                return Err(e);
            }
            // 4. Commit: from here the table is visible (through its committed entry).
            let committed_etag = match self
                .commit_intent(&pending_key, &mut intent, &intent_etag)
                .await
            {
                Ok(e) => e,
                Err(e) => {
                    self.give_up_undrop(&pending_key, &intent_etag, &dkey, &op_id)
                        .await;
                    return Err(match e {
                        StoreError::PreconditionFailed => self.busy("table", &target),
                        other => other.into(),
                    });
                }
            };
            // 5. Published, and the dropped record gone (or left to recovery).
            if self.owner_in_time(intent.started_at_ms)
                && let Err(e) = self
                    .roll_forward(&pending_key, &mut intent, committed_etag)
                    .await
            {
                tracing::warn!(table = %self.show(&target), error = %e, "undrop committed; recovery will finish it");
            }
            tracing::info!(table = %self.show(&target), drop_id = %dropped.drop_id, "undropped a table");
            return Ok(record);
        }
        Err(self.busy("table", &target))
    }

    /// Rolls back an undrop that did not commit: its intent (if still as written), then its
    /// mark on the dropped record.
    async fn give_up_undrop(&self, pending_key: &str, etag: &str, dropped: &str, op_id: &str) {
        match self.remove(pending_key, etag).await {
            Ok(true) => {
                if let Err(e) = self.unmark_dropped(dropped, op_id).await {
                    tracing::warn!(key = dropped, error = %e, "could not unmark a dropped table; it is unmarked when next met");
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(key = pending_key, error = %e, "could not remove an undrop's intent; recovery will")
            }
        }
    }

    /// Removes operation `op_id`'s mark from the dropped record at `key`.
    pub(crate) async fn unmark_dropped(&self, key: &str, op_id: &str) -> Result<()> {
        if let Some((d, etag)) = self.read::<DroppedTable>(key).await?
            && d.mark.as_ref().is_some_and(|m| m.op_id == op_id)
        {
            let unmarked = DroppedTable {
                mark: None,
                rev: new_uid(),
                ..d
            };
            match self
                .write(key, encode(&unmarked), Condition::IfMatch(etag))
                .await
            {
                Ok(_) | Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Deletes the dropped record at `key` if operation `op_id` marks it: the last step of a
    /// committed undrop or purge.
    pub(crate) async fn delete_marked_dropped(&self, key: &str, op_id: &str) -> Result<()> {
        if let Some((d, etag)) = self.read::<DroppedTable>(key).await?
            && d.mark.as_ref().is_some_and(|m| m.op_id == op_id)
        {
            self.remove(key, &etag).await?;
        }
        Ok(())
    }

    /// Purges table `id`'s drop `drop_id` (or its latest) now, whatever its retention.
    pub async fn purge_dropped(
        &self,
        ctx: &Ctx,
        id: &[String],
        drop_id: Option<&str>,
    ) -> Result<DroppedTable> {
        self.may_manage_dropped(ctx, id)?;
        let mut patience = self.patience();
        loop {
            let (key, dropped, etag) = self.find_dropped(id, drop_id).await?;
            match self.purge(&key, &dropped, &etag).await? {
                true => {
                    crate::telemetry::purged("requested");
                    return Ok(dropped);
                }
                false if patience.wait().await => {}
                false => return Err(self.busy("dropped table", id)),
            }
        }
    }

    /// Purges the dropped record at `key` (at `etag`): its intent, its mark, the commit, then
    /// the data, the receipts, the claim and the record. `Ok(false)` when the record changed
    /// first (another purge or an undrop took it).
    async fn purge(&self, key: &str, dropped: &DroppedTable, etag: &str) -> Result<bool> {
        let cell = self.cell_of(&dropped.table.id)?;
        let op_id = new_uid();
        let intent_key = Layout::drop_key(&cell, &op_id);
        let mut intent = Intent::new(
            op_id.clone(),
            self.node.clone(),
            IntentKind::DropTable {
                record: dropped.table.clone(),
                delete_data: true,
                keep_until_ms: None,
                dropped: Some(key.to_string()),
                dropped_by: None,
            },
        );
        intent.format_version = FORMAT_SOFT_DROP;
        let intent_etag = self
            .write(&intent_key, encode(&intent), Condition::IfAbsent)
            .await?;
        let marked = DroppedTable {
            mark: Some(Mark {
                op_id: op_id.clone(),
                intent: intent_key.clone(),
                batch: None,
            }),
            rev: new_uid(),
            ..dropped.clone()
        };
        if let Err(e) = self
            .write(key, encode(&marked), Condition::IfMatch(etag.to_string()))
            .await
        {
            let _ = self.remove(&intent_key, &intent_etag).await;
            return match e {
                StoreError::PreconditionFailed => Ok(false),
                other => Err(other.into()),
            };
        }
        let committed_etag = match self
            .commit_intent(&intent_key, &mut intent, &intent_etag)
            .await
        {
            Ok(e) => e,
            Err(e) => {
                if let Ok(true) = self.remove(&intent_key, &intent_etag).await {
                    let _ = self.unmark_dropped(key, &op_id).await;
                }
                return match e {
                    StoreError::PreconditionFailed => Ok(false),
                    other => Err(other.into()),
                };
            }
        };
        self.roll_forward(&intent_key, &mut intent, committed_etag)
            .await?;
        tracing::info!(table = %self.show(&dropped.table.id), drop_id = %dropped.drop_id, location = %dropped.table.location, "purged a dropped table");
        Ok(true)
    }

    /// The recovery sweep's part: purges every dropped table of `cell` past its retention
    /// (each once: a purge marks the dropped record first, so of two gateways sweeping at
    /// once only one purges it), and counts what is kept.
    pub async fn purge_expired(&self, cell: &str) -> Result<PurgeSweep> {
        let mut sweep = PurgeSweep::default();
        let now = now_ms();
        for (key, dropped, etag) in self
            .dropped_in(&Layout::dropped_prefix(cell), false)
            .await?
        {
            let due = dropped.purge_after_ms <= now;
            let free = match &dropped.mark {
                None => true,
                Some(mark) => self.resolve_mark(&key, &etag, mark).await? == MarkState::Void,
            };
            if due && free {
                match self.purge(&key, &dropped, &etag).await {
                    Ok(true) => {
                        crate::telemetry::purged("expired");
                        sweep.purged += 1;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(key, error = %e, "could not purge an expired dropped table; the next sweep tries again")
                    }
                }
            }
            sweep.kept += 1;
            if let Ok(Some((_, bytes))) = self
                .store
                .bytes_under(&format!("{}/", dropped.table.data_key))
                .await
            {
                sweep.kept_bytes += bytes;
            }
        }
        Ok(sweep)
    }
}
