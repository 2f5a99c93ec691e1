//! Settling what crashed or timed-out operations left behind. Every gateway runs
//! `sweep` periodically and also settles an entry when it trips over one; entries younger
//! than the grace period belong to a live operation and are left alone. Each step is a
//! conditional write, so two gateways settling the same entry agree.
//!
//! - pending create (`create_namespace`, or `declare` and `register`, whose entry is the
//!   staged table record itself): if the record was published, keep it; otherwise release
//!   the data-folder claim. Then remove the entry.
//! - pending `rename`: if the new name was published, make sure the old one is gone; if the
//!   old name still holds the same table, the rename never happened; otherwise the rename
//!   passed its point of no return, so publish the new name. Then remove the entry.
//! - drop record: if the table record still exists with the same uid, the drop never
//!   happened; otherwise delete the data (for a drop) and release the claim. Then remove it.

use super::layout::Layout;
use super::records::{DropRecord, PendingEntry, TableRecord};
use super::{Catalog, record_bytes};
use crate::error::{Error, Result};
use crate::store::{Condition, StoreError};

/// Settles the pending entry at `key`. With `force`, settles it whatever its age (used only
/// when the namespace holding it is being removed). `Ok(true)` when it is gone.
pub(crate) async fn settle_pending(catalog: &Catalog, key: &str, force: bool) -> Result<bool> {
    let Some((entry, etag)) = catalog.read_any::<PendingEntry>(key).await? else {
        return Ok(true);
    };
    let pending = entry.into_pending();
    if !force && !catalog.is_stale(pending.started_at_ms) {
        return Ok(false);
    }
    tracing::info!(key, op = %pending.op, "settling an abandoned operation");
    if let Some(table) = &pending.table {
        let target_key = catalog.table_key(&table.id)?;
        let published = catalog
            .read_any::<TableRecord>(&target_key)
            .await?
            .is_some_and(|(t, _)| t.uid == pending.uid);
        let cell = cell_of(catalog, &table.id)?;
        // Before acting on "never published", make sure the entry is still the one read: the
        // table may have published and then left the name (a rename or drop removes its own
        // leftover entry before it does), and the entry's removal is then that operation's.
        if !published && !unchanged(catalog, key, &etag).await? {
            return Ok(true);
        }
        match (pending.op.as_str(), published) {
            ("rename", true) => {
                if let Some(from) = &pending.rename_from {
                    remove_if_same(catalog, &catalog.table_key(from)?, &pending.uid).await?;
                }
            }
            ("rename", false) => {
                let from_key =
                    catalog.table_key(pending.rename_from.as_deref().unwrap_or_default())?;
                let source_alive = catalog
                    .read_any::<TableRecord>(&from_key)
                    .await?
                    .is_some_and(|(t, _)| t.uid == pending.uid);
                if !source_alive {
                    match catalog
                        .store()
                        .put(&target_key, record_bytes(table), Condition::IfAbsent)
                        .await
                    {
                        Ok(_) | Err(StoreError::PreconditionFailed) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            (_, true) => {}
            (_, false) => {
                catalog
                    .release_location(&cell, &table.data_key, &pending.uid)
                    .await
            }
        }
    }
    match catalog.store().delete(key, Condition::IfMatch(etag)).await {
        Ok(()) | Err(StoreError::PreconditionFailed) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Whether the entry at `key` is still at `etag`.
async fn unchanged(catalog: &Catalog, key: &str, etag: &str) -> Result<bool> {
    Ok(catalog
        .read_any::<PendingEntry>(key)
        .await?
        .is_some_and(|(_, now)| now == etag))
}

async fn remove_if_same(catalog: &Catalog, key: &str, uid: &str) -> Result<()> {
    if let Some((t, etag)) = catalog.read_any::<TableRecord>(key).await?
        && t.uid == uid
    {
        match catalog.store().delete(key, Condition::IfMatch(etag)).await {
            Ok(()) | Err(StoreError::PreconditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn cell_of(catalog: &Catalog, id: &[String]) -> Result<String> {
    let parent = &id[..id.len().saturating_sub(1)];
    Ok(catalog.layout().place(parent)?.cell)
}

/// Completes a drop or deregister whose table record is already deleted.
pub(crate) async fn finish_drop(
    catalog: &Catalog,
    cell: &str,
    key: &str,
    intent: &DropRecord,
) -> Result<()> {
    let table = &intent.table;
    if intent.op == "drop" {
        let removed = catalog
            .store()
            .delete_prefix(&format!("{}/", table.data_key))
            .await?;
        tracing::info!(location = %table.location, objects = removed, "deleted the data of a dropped table");
    }
    catalog
        .release_location(cell, &table.data_key, &table.uid)
        .await;
    catalog.store().delete(key, Condition::None).await?;
    Ok(())
}

async fn settle_drop(catalog: &Catalog, cell: &str, key: &str, force: bool) -> Result<()> {
    let Some((intent, _)) = catalog.read_any::<DropRecord>(key).await? else {
        return Ok(());
    };
    if !force && !catalog.is_stale(intent.started_at_ms) {
        return Ok(());
    }
    let table_key = catalog.table_key(&intent.table.id)?;
    let still_there = catalog
        .read_any::<TableRecord>(&table_key)
        .await?
        .is_some_and(|(t, _)| t.uid == intent.table.uid);
    if still_there {
        catalog.store().delete(key, Condition::None).await?;
    } else {
        tracing::info!(location = %intent.table.location, op = %intent.op, "finishing an abandoned drop");
        finish_drop(catalog, cell, key, &intent).await?;
    }
    Ok(())
}

/// Keeps the first failure and logs each: one entry that cannot be settled (unreadable, say,
/// or written by a newer gateway) must not keep recovery from the entries after it.
fn note(failed: &mut Option<Error>, key: &str, result: Result<()>) {
    if let Err(e) = result {
        tracing::warn!(key, error = %e, "could not settle an entry; moving on");
        failed.get_or_insert(e);
    }
}

/// Settles every abandoned entry of one cell; reports the first entry that failed, after
/// trying all of them.
pub(crate) async fn settle_cell(catalog: &Catalog, cell: &str, force: bool) -> Result<()> {
    let store = catalog.store();
    let mut failed = None;
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list(
                &Layout::all_pending_prefix(cell),
                after.as_deref(),
                1000,
                false,
            )
            .await?;
        for key in &page.keys {
            note(
                &mut failed,
                key,
                settle_pending(catalog, key, force).await.map(|_| ()),
            );
        }
        after = page.keys.last().cloned();
        if !page.more {
            break;
        }
    }
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list(&Layout::drops_prefix(cell), after.as_deref(), 1000, true)
            .await?;
        for key in &page.keys {
            note(
                &mut failed,
                key,
                settle_drop(catalog, cell, key, force).await,
            );
        }
        after = page.keys.last().cloned();
        if !page.more {
            break;
        }
    }
    failed.map_or(Ok(()), Err)
}

/// One pass over the whole warehouse.
pub async fn sweep(catalog: &Catalog) -> Result<()> {
    if catalog.layout().endpoint_mode() {
        let mut failed = None;
        for bucket in catalog.list_namespaces(&[], None, None).await?.items {
            let cell = format!("{bucket}/");
            note(&mut failed, &cell, settle_cell(catalog, &cell, false).await);
        }
        failed.map_or(Ok(()), Err)
    } else {
        settle_cell(catalog, "", false).await
    }
}
