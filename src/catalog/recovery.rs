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

/// One pass over the whole warehouse.
pub async fn sweep(catalog: &Catalog) -> Result<()> {
    let result = sweep_once(catalog).await;
    crate::telemetry::sweep(result.is_ok());
    result
}

async fn sweep_once(catalog: &Catalog) -> Result<()> {
    match catalog.store().remove_leftovers(catalog.grace()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "removed temporary files left by killed writers"
        ),
        Err(e) => tracing::warn!(error = %e, "could not remove temporary files"),
    }
    let cells = if catalog.layout().endpoint_mode() {
        let all = crate::access::Ctx::internal();
        let buckets = catalog.list_catalog_buckets(&all, None, None).await?.items;
        buckets.into_iter().map(|b| format!("{b}/")).collect()
    } else {
        vec![String::new()]
    };
    let mut failed = None;
    let mut dropped = super::dropped::PurgeSweep::default();
    for cell in &cells {
        note(&mut failed, cell, settle_cell(catalog, cell, false).await);
        // Dropped tables past their retention are purged (after settling: an undrop or a
        // purge left unfinished is settled first).
        match catalog.purge_expired(cell).await {
            Ok(sweep) => {
                if sweep.purged > 0 {
                    tracing::info!(
                        purged = sweep.purged,
                        "purged dropped tables past their retention"
                    );
                }
                dropped.kept += sweep.kept;
                dropped.kept_bytes += sweep.kept_bytes;
            }
            Err(e) => note(&mut failed, cell, Err(e)),
        }
        // Keys before records: a key is claimed before the record it names is written and
        // expires `KEEP` after, so it expires before that record may be swept (`idempotency`).
        match catalog.sweep_keys(cell).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "removed expired idempotency keys"),
            Err(e) => note(&mut failed, cell, Err(e)),
        }
        match catalog.sweep_transactions(cell).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "removed the records of old transactions"),
            Err(e) => note(&mut failed, cell, Err(e)),
        }
    }
    crate::telemetry::dropped_held(dropped.kept, dropped.kept_bytes);
    failed.map_or(Ok(()), Err)
}
