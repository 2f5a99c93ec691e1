//! Commit receipts: the gateway's own record of each version it committed, kept beside the
//! catalog (`.lance-gateway/commits/<data folder>/<branch>/<version>.json`). Two things
//! need them:
//!
//! - **A CreateTableVersion retried after it succeeded** (the client lost the answer) must
//!   be answered with the same success, not with "the staged manifest does not exist"
//!   (the gateway removed the staging manifest once it had published it). The receipt
//!   names the staging manifest the version was published from; a retry naming the same
//!   one, for the same table, gets the version as committed.
//! - **Commits behind a managed table's back.** Under managed versioning every version of a
//!   table should come through the gateway: CreateTableVersion or the gateway's own data
//!   operations, each of which leaves a receipt. When a gateway sees a table gain a version
//!   with no receipt (lance-ray, for one, commits straight to `_versions/`), it logs that
//!   once per table and counts it (`lance_gateway_unmanaged_commits_total`), so an operator
//!   learns a client bypasses the ordering and the grant checks.
//!
//! A receipt goes when maintenance's cleanup removes its version (`forget_receipts`), or
//! with the table's data, so a table's receipts are bounded by its kept versions.
//!
//! A receipt is written after its version is published and is only ever read as evidence
//! of what was published; a version whose receipt is missing (a gateway killed between the
//! two writes) keeps its staging manifest, which answers the retry instead.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Catalog;
use super::layout::Layout;
use super::names::key_segment;
use super::records::{FORMAT_VERSION, TableRecord, decode, encode, now_ms};
use crate::error::Result;
use crate::store::Condition;

/// One committed version, as the gateway committed it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Receipt {
    pub format_version: u32,
    /// The table (its record's uid) the version was committed to.
    pub table_uid: String,
    pub version: u64,
    /// The staging manifest's file name it was published from (CreateTableVersion); `None`
    /// for the gateway's own data operations, which Lance commits directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
    /// The final manifest as the client's object store names it, its size and ETag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<String>,
    pub committed_at_ms: u64,
}

/// How long a gateway waits after seeing a new version before it looks for its receipt:
/// the committer writes the receipt right after publishing, and must be given the time.
const RECEIPT_GRACE: Duration = Duration::from_secs(5);

/// The most versions looked at per observation (the newest ones).
const CHECK_AT_MOST: u64 = 32;

/// What this gateway has seen of managed tables' versions.
#[derive(Default)]
pub(crate) struct Watch {
    /// The newest version seen, per data folder and branch.
    seen: Mutex<HashMap<String, u64>>,
    /// Tables already reported as committed to behind the gateway's back.
    reported: Mutex<HashSet<String>>,
}

/// How many tables the watch remembers before it starts over.
const WATCHED_AT_MOST: usize = 100_000;

pub(crate) fn branch_segment(branch: Option<&str>) -> String {
    match branch.filter(|b| !b.is_empty() && *b != "main") {
        None => "main".to_string(),
        // `main` cannot clash: a branch segment is always encoded with a leading `@`.
        Some(b) => format!("@{}", key_segment(b)),
    }
}

impl Layout {
    /// The folder of receipts of a table's data folder `data_key` (a store key).
    pub fn commits_prefix(cell: &str, data_key: &str) -> String {
        let rel = &data_key[cell.len().min(data_key.len())..];
        let segs: Vec<String> = rel.split('/').map(key_segment).collect();
        format!("{}commits/{}/", Self::catalog_dir(cell), segs.join("/"))
    }

    pub fn receipt_key(cell: &str, data_key: &str, branch: Option<&str>, version: u64) -> String {
        format!(
            "{}{}/{version:020}.json",
            Self::commits_prefix(cell, data_key),
            branch_segment(branch)
        )
    }
}

impl Catalog {
    /// Removes the receipts of the table's versions (main branch) that a cleanup removed:
    /// those below its newest kept version and not among `kept`, so a table's receipts are
    /// bounded by its kept versions. A retry of a CreateTableVersion older than the table's
    /// retention is no longer recognised; nothing else reads a receipt that old. Returns
    /// how many went.
    pub(crate) async fn forget_receipts(&self, record: &TableRecord, kept: &[u64]) -> Result<u64> {
        let Some(&newest) = kept.iter().max() else {
            return Ok(0);
        };
        let cell = self.cell_of(&record.id)?;
        let prefix = format!(
            "{}{}/",
            Layout::commits_prefix(&cell, &record.data_key),
            branch_segment(None)
        );
        let kept: HashSet<u64> = kept.iter().copied().collect();
        let gone: Vec<String> = self
            .all_keys(&prefix, true)
            .await?
            .into_iter()
            .filter(|key| {
                key[prefix.len()..]
                    .strip_suffix(".json")
                    .and_then(|v| v.parse::<u64>().ok()) // not the head
                    .is_some_and(|v| v < newest && !kept.contains(&v))
            })
            .collect();
        let mut removed = 0;
        for some in gone.chunks(16) {
            let deletes = some
                .iter()
                .map(|key| self.store.delete(key, Condition::None));
            futures::future::try_join_all(deletes).await?;
            removed += some.len() as u64;
        }
        Ok(removed)
    }

    fn receipt_key_of(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        version: u64,
    ) -> Result<String> {
        let cell = self.cell_of(&record.id)?;
        Ok(Layout::receipt_key(
            &cell,
            &record.data_key,
            branch,
            version,
        ))
    }

    /// Writes the receipt of a version just published (a rewrite of the same version's
    /// receipt replaces it: the version is the same commit).
    pub(crate) async fn write_receipt(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        receipt: &Receipt,
    ) -> Result<()> {
        let key = self.receipt_key_of(record, branch, receipt.version)?;
        self.store
            .put(&key, encode(receipt), Condition::None)
            .await?;
        Ok(())
    }

    /// The receipt of `version` of this table, if the gateway committed it.
    pub(crate) async fn read_receipt(
        &self,
        record: &TableRecord,
        branch: Option<&str>,
        version: u64,
    ) -> Result<Option<Receipt>> {
        let key = self.receipt_key_of(record, branch, version)?;
        let Some(object) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let receipt: Receipt = decode(&key, &object.body)?;
        Ok(Some(receipt).filter(|r| r.table_uid == record.uid))
    }

    /// Records that the gateway's own data operation made `version` of the table: the
    /// commit listener hears of it. Under managed versioning the commit went through the
    /// log (`own_commits`), which did that and wrote its receipt; a catalog whose data plane
    /// does not commit through it (tests) writes the receipt here, in the background.
    pub fn note_own_commit(
        self: &Arc<Self>,
        record: &TableRecord,
        branch: Option<&str>,
        version: u64,
    ) {
        if self.own_commits_logged() {
            return;
        }
        self.commit_seen(record);
        if !self.managed_versioning {
            return;
        }
        let receipt = Receipt {
            format_version: FORMAT_VERSION,
            table_uid: record.uid.clone(),
            version,
            staged: None,
            manifest_path: None,
            size: None,
            e_tag: None,
            committed_at_ms: now_ms(),
        };
        let (catalog, record, branch) = (self.clone(), record.clone(), branch.map(str::to_string));
        self.after_answer(async move {
            // Create-if-absent: a version this gateway made is new, and a receipt already
            // there was written by whoever published that version (keep theirs).
            let key = match catalog.receipt_key_of(&record, branch.as_deref(), version) {
                Ok(key) => key,
                Err(e) => {
                    tracing::warn!(table = ?record.id, version, error = %e, "could not record a commit's receipt");
                    return;
                }
            };
            match catalog
                .store
                .put(&key, encode(&receipt), Condition::IfAbsent)
                .await
            {
                Ok(_) | Err(crate::store::StoreError::PreconditionFailed) => {}
                Err(e) => {
                    tracing::warn!(table = ?record.id, version, error = %e, "could not record a commit's receipt")
                }
            }
        });
    }

    /// Notes that the table's newest version (on `branch`) is `version`, committed at
    /// `committed_at_ms`. Under managed versioning, versions that appeared since this
    /// gateway last looked are checked for receipts in the background, and one without is
    /// reported (once per table). On a table's first sight only its newest version is
    /// checked, and only if it was committed since this gateway started: versions from
    /// before (made, perhaps, before managed versioning was turned on) are not this run's to
    /// judge.
    pub fn observe_version(
        self: &Arc<Self>,
        record: &TableRecord,
        branch: Option<&str>,
        version: u64,
        committed_at_ms: Option<i64>,
    ) {
        if !self.managed_versioning {
            return;
        }
        let watch_key = format!("{}\u{0}{}", record.data_key, branch_segment(branch));
        let before = {
            let mut seen = self.watch.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() >= WATCHED_AT_MOST {
                seen.clear();
            }
            let before = seen.get(&watch_key).copied();
            if before.is_none_or(|b| version > b) {
                seen.insert(watch_key.clone(), version);
            }
            before
        };
        let first = match before {
            Some(before) if version > before => {
                before.max(version.saturating_sub(CHECK_AT_MOST)) + 1
            }
            Some(_) => return,
            None if committed_at_ms.is_some_and(|at| at >= self.started_ms as i64) => version,
            None => return,
        };
        let (catalog, record, branch) = (self.clone(), record.clone(), branch.map(str::to_string));
        tokio::spawn(async move {
            tokio::time::sleep(RECEIPT_GRACE).await;
            let mut bypassed = Vec::new();
            for v in first..=version {
                match catalog.read_receipt(&record, branch.as_deref(), v).await {
                    Ok(Some(_)) => {}
                    Ok(None) => bypassed.push(v),
                    Err(e) => {
                        tracing::debug!(error = %e, "could not read a commit receipt");
                        return;
                    }
                }
            }
            if bypassed.is_empty() {
                return;
            }
            crate::telemetry::unmanaged_commits(bypassed.len() as u64);
            let first_time = catalog
                .watch
                .reported
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(watch_key);
            if first_time {
                tracing::warn!(
                    table = %catalog.show(&record.id),
                    location = %record.location,
                    versions = ?bypassed,
                    "a managed table gained versions that were not committed through the gateway \
                     (CreateTableVersion): a client commits to its _versions/ folder directly, \
                     bypassing the catalog's ordering and grant checks (reported once per table)"
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_sit_under_their_folder_and_branch() {
        let key = Layout::receipt_key("", "ml/docs.lance", None, 3);
        assert_eq!(
            key,
            ".lance-gateway/commits/ml/docs%2Elance/main/00000000000000000003.json"
        );
        assert!(key.starts_with(&Layout::commits_prefix("", "ml/docs.lance")));
        let on_branch = Layout::receipt_key("b/", "b/ml/docs.lance", Some("main"), 3);
        assert_eq!(
            on_branch,
            "b/.lance-gateway/commits/ml/docs%2Elance/main/00000000000000000003.json"
        );
        let dev = Layout::receipt_key("", "t.lance", Some("feature/x"), 1);
        assert!(dev.contains("/@feature%2Fx/"), "{dev}");
    }
}
