//! Settling what crashed or stalled operations left behind. Every gateway runs `sweep`
//! when it starts and then periodically; requests also settle an entry they trip over.
//! An entry is settled by whoever finds it once it is older than the grace period, or at
//! once when the node that wrote it finds it from an earlier run. What settling does is in
//! `intents.rs`: a prepared operation is rolled back, a committed one finished, and both
//! are decided by conditional writes, so any number of gateways may sweep at once.

use super::Catalog;
use super::layout::Layout;
use crate::error::{Error, Result};

/// Keeps the first failure and logs each: one entry that cannot be settled (unreadable, say,
/// or written by a newer gateway) must not keep recovery from the entries after it.
fn note(failed: &mut Option<Error>, key: &str, result: Result<()>) {
    if let Err(e) = result {
        tracing::warn!(key, error = %e, "could not settle an entry; moving on");
        failed.get_or_insert(e);
    }
}

/// Settles the entry at `key` if it may be settled now (or whatever its age, with `force`:
/// only for the catalog of a bucket namespace that is being removed).
async fn settle_key(catalog: &Catalog, key: &str, force: bool) -> Result<()> {
    let Some((entry, etag)) = catalog.read_entry(key).await? else {
        return Ok(());
    };
    if force || entry.is_aborted() || catalog.settleable_entry(&entry) {
        match catalog.settle(key, entry, &etag).await {
            Ok(true) => crate::telemetry::settled(true),
            // Changed meanwhile, or another gateway is settling it.
            Ok(false) => {}
            Err(e) => {
                crate::telemetry::settled(false);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Settles every entry of one cell that may be settled; reports the first entry that
/// failed, after trying all of them.
pub(crate) async fn settle_cell(catalog: &Catalog, cell: &str, force: bool) -> Result<()> {
    let store = catalog.store();
    let mut failed = None;
    for (prefix, shallow) in [
        (Layout::all_pending_prefix(cell), false),
        (Layout::drops_prefix(cell), true),
    ] {
        let mut after: Option<String> = None;
        loop {
            let page = store.list(&prefix, after.as_deref(), 1000, shallow).await?;
            for key in &page.keys {
                note(&mut failed, key, settle_key(catalog, key, force).await);
            }
            after = page.keys.last().cloned();
            if !page.more {
                break;
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

impl Layout {
    /// The lease on a cell's housekeeping (`leases::Spaced`).
    pub fn housekeeping_key(cell: &str) -> String {
        format!("{}housekeeping.json", Self::catalog_dir(cell))
    }
}

/// One pass over the whole warehouse, housekeeping included unless another gateway holds
/// its lease.
pub async fn sweep(catalog: &Catalog) -> Result<()> {
    sweep_spaced(catalog, std::time::Duration::ZERO).await
}

/// One pass over the whole warehouse, as each gateway runs it periodically: every cell's
/// unfinished operations are settled by every gateway (each settles what it trips over
/// anyway, and its own at once), but the warehouse-wide housekeeping (expired drops,
/// idempotency keys, old transactions), whose cost grows with the warehouse rather than
/// with what is in flight, runs on one gateway at a time under the cell's lease, and not
/// again until `spacing` after it last ran, whichever gateway ran it.
pub async fn sweep_spaced(catalog: &Catalog, spacing: std::time::Duration) -> Result<()> {
    let result = sweep_once(catalog, spacing).await;
    crate::telemetry::sweep(result.is_ok());
    result
}

async fn sweep_once(catalog: &Catalog, spacing: std::time::Duration) -> Result<()> {
    match catalog.store().remove_leftovers(catalog.grace()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "removed temporary files left by killed writers"
        ),
        Err(e) => tracing::warn!(error = %e, "could not remove temporary files"),
    }
    let cells = catalog.cells().await?;
    let mut failed = None;
    let mut dropped = Some(super::dropped::PurgeSweep::default());
    for cell in &cells {
        note(&mut failed, cell, settle_cell(catalog, cell, false).await);
        // Each create leaves its namespace's pending folder behind on a local warehouse,
        // and every page of ListAllTables lists them all (for arrivals): pruned here once
        // unchanged for the grace period, the folders it meets are those of the namespaces
        // created in lately.
        if let Err(e) = catalog
            .store()
            .prune_folders(&Layout::all_pending_prefix(cell), catalog.grace())
            .await
        {
            tracing::warn!(error = %e, "could not prune the empty pending folders");
        }
        match housekeeping(catalog, cell, spacing).await {
            Ok(Some(sweep)) => {
                if let Some(d) = dropped.as_mut() {
                    d.kept += sweep.kept;
                    d.kept_bytes += sweep.kept_bytes;
                }
            }
            // Another gateway keeps this cell's house: the warehouse's totals are its.
            Ok(None) => dropped = None,
            Err(e) => {
                dropped = None;
                note(&mut failed, cell, Err(e));
            }
        }
    }
    if let Some(d) = dropped {
        crate::telemetry::dropped_held(d.kept, d.kept_bytes);
    }
    failed.map_or(Ok(()), Err)
}

/// The cell's housekeeping, if this gateway may run it now (`None` when another holds the
/// lease, or it ran less than `spacing` ago). Safe to run twice at once (a lapsed holder
/// still running beside the next): each step decides by conditional writes.
async fn housekeeping(
    catalog: &Catalog,
    cell: &str,
    spacing: std::time::Duration,
) -> Result<Option<super::dropped::PurgeSweep>> {
    let key = Layout::housekeeping_key(cell);
    let Some(mut lease) = catalog.take_spaced(&key, "housekeeping", spacing).await? else {
        return Ok(None);
    };
    let mut failed = None;
    // Dropped tables past their retention are purged (after settling: an undrop or a
    // purge left unfinished is settled first).
    let dropped = match catalog.purge_expired(cell).await {
        Ok(sweep) => {
            if sweep.purged > 0 {
                tracing::info!(
                    purged = sweep.purged,
                    "purged dropped tables past their retention"
                );
            }
            sweep
        }
        Err(e) => {
            note(&mut failed, cell, Err(e));
            Default::default()
        }
    };
    catalog.renew_lease(&mut lease).await?;
    // Keys before records: a key is claimed before the record it names is written and
    // expires `KEEP` after, so it expires before that record may be swept (`idempotency`).
    match catalog.sweep_keys(cell).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(removed = n, "removed expired idempotency keys"),
        Err(e) => note(&mut failed, cell, Err(e)),
    }
    catalog.renew_lease(&mut lease).await?;
    match catalog.sweep_transactions(cell).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(removed = n, "removed the records of old transactions"),
        Err(e) => note(&mut failed, cell, Err(e)),
    }
    // The next run is spaced from this one only if this one got through.
    catalog.give_back_spaced(lease, failed.is_none()).await?;
    failed.map_or(Ok(Some(dropped)), Err)
}
