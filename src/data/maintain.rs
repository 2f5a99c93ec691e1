//! The three maintenance tasks on one dataset, with the lance crate: compaction (small
//! fragments rewritten into fewer, deleted rows dropped), index upkeep (rows written since
//! an index was built folded into it) and version cleanup (old manifests and the files only
//! they reference deleted). Which table, whether it is due and who may run it are decided
//! before (`maintain`); this module measures a dataset and runs one task on it.
//!
//! Every task that makes a version commits it through Lance's own conflict resolution, so
//! a writer committing meanwhile keeps its rows: an append rebases over a compaction, and a
//! compaction that lost a race with a delete of the same rows fails as a whole and changes
//! nothing. Each commit carries the transaction's id (`lance_gateway.transaction_id`) in
//! its Lance transaction properties, so a run whose gateway died can be told committed or
//! not by reading the table's history.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance::Dataset;
use lance::dataset::cleanup::{CleanupPolicyBuilder, RemovalStats};
use lance::dataset::index::DatasetIndexRemapperOptions;
use lance::dataset::optimize::{CompactionOptions, commit_compaction, plan_compaction};
use lance::dataset::transaction::Operation;
use lance::index::DatasetIndexExt;
use lance_index::optimize::OptimizeOptions;

use super::lance_error;
use crate::catalog::policy::Policy;
use crate::error::Result;

/// The Lance transaction property that names the gateway transaction of a commit.
pub const TRANSACTION_PROPERTY: &str = "lance_gateway.transaction_id";

/// One index and how far behind the table it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexState {
    pub name: String,
    pub unindexed_rows: u64,
}

/// What maintenance looks at in a dataset: its fragments, deletions, indices and versions.
#[derive(Clone, Debug, Default)]
pub struct Assessment {
    pub version: u64,
    pub fragments: u64,
    /// Fragments with fewer rows than the policy's target.
    pub small_fragments: u64,
    /// Rows written (deleted ones included) and rows deleted.
    pub rows: u64,
    pub deleted_rows: u64,
    /// The rewrite tasks Lance would plan for the policy's compaction (0: nothing to do).
    pub compaction_tasks: u64,
    pub indices: Vec<IndexState>,
    /// Versions on the main branch, and how old the oldest is.
    pub versions: u64,
    pub oldest_version_age: Option<Duration>,
    /// The key of the manifest the next version will have, below the table's folder
    /// (`_versions/…`, in the dataset's naming scheme): while it is absent, the table has
    /// not committed since.
    pub next_manifest: String,
}

impl Assessment {
    pub fn unindexed_rows(&self) -> u64 {
        self.indices.iter().map(|i| i.unindexed_rows).sum()
    }

    /// Whether compaction is due under `policy`: enough small fragments, or enough
    /// deleted rows, and Lance finds something to rewrite.
    pub fn compaction_due(&self, policy: &Policy) -> bool {
        let c = &policy.compaction;
        let deleted_share = if self.rows == 0 {
            0.0
        } else {
            self.deleted_rows as f64 / self.rows as f64
        };
        c.enabled
            && self.compaction_tasks > 0
            && (self.small_fragments >= c.min_fragments
                || (self.deleted_rows > 0 && deleted_share >= c.deleted_share))
    }

    /// The indices due for upkeep under `policy`.
    pub fn indices_due(&self, policy: &Policy) -> Vec<String> {
        let i = &policy.index;
        if !i.enabled {
            return Vec::new();
        }
        let live = self.rows.saturating_sub(self.deleted_rows).max(1) as f64;
        self.indices
            .iter()
            .filter(|x| {
                x.unindexed_rows > 0
                    && (x.unindexed_rows >= i.unindexed_rows
                        || x.unindexed_rows as f64 / live >= i.unindexed_share)
            })
            .map(|x| x.name.clone())
            .collect()
    }

    /// Whether cleanup is due under `policy`: more versions than it keeps, the oldest of
    /// them past the retention period.
    pub fn cleanup_due(&self, policy: &Policy) -> bool {
        let c = &policy.cleanup;
        c.enabled
            && self.versions > c.keep_versions
            && self.oldest_version_age.is_some_and(|age| age > c.retention)
    }
}

/// The manifest key of the version after `version`, in the naming scheme of `current` (the
/// file name of its manifest): `_versions/<n>.manifest` (V1), or with the number inverted
/// and zero-padded to twenty digits (V2), so the newest lists first.
pub fn next_manifest(current: &str, version: u64) -> String {
    let next = version + 1;
    let v2 = current
        .split_once('.')
        .is_some_and(|(n, _)| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()));
    if v2 {
        format!("_versions/{:020}.manifest", u64::MAX - next)
    } else {
        format!("_versions/{next}.manifest")
    }
}

fn compaction_options(policy: &Policy, transaction: Option<&str>) -> CompactionOptions {
    let c = &policy.compaction;
    CompactionOptions {
        target_rows_per_fragment: c.target_rows_per_fragment as usize,
        materialize_deletions_threshold: c.deleted_share as f32,
        // One rewrite at a time: maintenance shares the machine with requests.
        num_threads: Some(1),
        transaction_properties: transaction.map(tagged),
        ..Default::default()
    }
}

fn tagged(transaction: &str) -> Arc<HashMap<String, String>> {
    Arc::new(HashMap::from([(
        TRANSACTION_PROPERTY.to_string(),
        transaction.to_string(),
    )]))
}

/// Measures `dataset` (at its current version) against `policy`.
pub async fn assess(dataset: &Dataset, policy: &Policy) -> Result<Assessment> {
    let target = policy.compaction.target_rows_per_fragment;
    let version = dataset.version().version;
    let mut a = Assessment {
        version,
        next_manifest: next_manifest(
            dataset
                .manifest_location()
                .path
                .filename()
                .unwrap_or_default(),
            version,
        ),
        ..Default::default()
    };
    for fragment in dataset.get_fragments() {
        let meta = fragment.metadata();
        let rows = match meta.physical_rows {
            Some(rows) => rows as u64,
            None => fragment.physical_rows().await.map_err(lance_error)? as u64,
        };
        let deleted = meta
            .deletion_file
            .as_ref()
            .and_then(|d| d.num_deleted_rows)
            .unwrap_or(0) as u64;
        a.fragments += 1;
        a.rows += rows;
        a.deleted_rows += deleted;
        if rows.saturating_sub(deleted) < target {
            a.small_fragments += 1;
        }
    }
    if policy.compaction.enabled && (a.fragments > 1 || a.deleted_rows > 0) {
        let plan = plan_compaction(dataset, &compaction_options(policy, None))
            .await
            .map_err(lance_error)?;
        a.compaction_tasks = plan.num_tasks() as u64;
    }
    if policy.index.enabled {
        let total = dataset.count_rows(None).await.map_err(lance_error)? as u64;
        for d in dataset.describe_indices(None).await.map_err(lance_error)? {
            a.indices.push(IndexState {
                name: d.name().to_string(),
                unindexed_rows: total.saturating_sub(d.rows_indexed()),
            });
        }
        a.indices.sort_by(|x, y| x.name.cmp(&y.name));
    }
    if policy.cleanup.enabled {
        let refs = dataset.version_refs().await.map_err(lance_error)?;
        a.versions = refs.len() as u64;
        if a.versions > policy.cleanup.keep_versions
            && let Some(oldest) = refs.first()
        {
            let old = dataset
                .checkout_version(oldest.version)
                .await
                .map_err(lance_error)?;
            let at = old.manifest().timestamp();
            a.oldest_version_age = (chrono::Utc::now() - at).to_std().ok();
        }
    }
    Ok(a)
}

/// What a compaction did.
#[derive(Clone, Debug, Default)]
pub struct Compacted {
    pub fragments_removed: u64,
    pub fragments_added: u64,
    /// The version it made (`None`: nothing was rewritten).
    pub version: Option<u64>,
    /// Every version it committed: the rewrite, and before it the versions that reserved
    /// the new fragments' ids (Lance commits those separately).
    pub versions: Vec<u64>,
}

/// Compacts `dataset` under `policy`: plans, rewrites each task in turn, then, once
/// `before_commit` says the work may still commit, commits them as one Lance transaction
/// tagged with `transaction`.
pub async fn compact<F, Fut>(
    dataset: &mut Dataset,
    policy: &Policy,
    transaction: &str,
    before_commit: F,
) -> Result<Compacted>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let options = compaction_options(policy, Some(transaction));
    let plan = plan_compaction(dataset, &options)
        .await
        .map_err(lance_error)?;
    if plan.num_tasks() == 0 {
        return Ok(Compacted::default());
    }
    let mut rewritten = Vec::with_capacity(plan.num_tasks());
    for task in plan.compaction_tasks() {
        rewritten.push(task.execute(dataset).await.map_err(lance_error)?);
    }
    before_commit().await?;
    let read_version = dataset.version().version;
    let metrics = commit_compaction(
        dataset,
        rewritten,
        Arc::new(DatasetIndexRemapperOptions::default()),
        &options,
    )
    .await
    .map_err(lance_error)?;
    let made = dataset.version().version;
    let mut versions = Vec::new();
    for v in read_version + 1..made {
        let reserved = dataset
            .read_transaction_by_version(v)
            .await
            .map_err(lance_error)?
            .is_some_and(|t| matches!(t.operation, Operation::ReserveFragments { .. }));
        if reserved {
            versions.push(v);
        }
    }
    versions.push(made);
    Ok(Compacted {
        fragments_removed: metrics.fragments_removed as u64,
        fragments_added: metrics.fragments_added as u64,
        version: Some(made),
        versions,
    })
}

/// Folds the rows the named indices miss into them: the newest segment of each is merged
/// with the new rows, and Lance splits or joins partitions where it finds them out of
/// balance (its own judgement of when a vector index needs retraining).
pub async fn update_indices(
    dataset: &mut Dataset,
    names: &[String],
    transaction: &str,
) -> Result<u64> {
    let options = OptimizeOptions::merge(1)
        .with_partition_rebalancing()
        .index_names(names.to_vec())
        .transaction_properties(HashMap::from([(
            TRANSACTION_PROPERTY.to_string(),
            transaction.to_string(),
        )]));
    dataset
        .optimize_indices(&options)
        .await
        .map_err(lance_error)?;
    Ok(dataset.version().version)
}

/// Removes versions older than the retention period except the newest `keep_versions`,
/// and the files only they referenced. Tagged versions and what branches reference are
/// kept (Lance's own rules); files no version ever referenced (a writer's abandoned work)
/// are removed only once they are a week old, as Lance does, since a writer may still be
/// about to commit them.
pub async fn cleanup(dataset: &Dataset, policy: &Policy, dry_run: bool) -> Result<RemovalStats> {
    let retention = chrono::Duration::from_std(policy.cleanup.retention)
        .unwrap_or_else(|_| chrono::Duration::days(7));
    let keep = policy.cleanup.keep_versions.max(1) as usize;
    let cleanup_policy = CleanupPolicyBuilder::default()
        .before_timestamp(chrono::Utc::now() - retention)
        .retain_n_versions(dataset, keep)
        .await
        .map_err(lance_error)?
        .error_if_tagged_old_versions(false)
        .build();
    let operation = dataset.cleanup(cleanup_policy);
    if dry_run {
        return Ok(operation.explain().await.map_err(lance_error)?.stats);
    }
    operation.execute().await.map_err(lance_error)
}

/// The numbers of the versions the dataset keeps.
pub async fn version_numbers(dataset: &Dataset) -> Result<Vec<u64>> {
    let versions = dataset.versions().await.map_err(lance_error)?;
    Ok(versions.iter().map(|v| v.version).collect())
}

/// Whether a version made since `since_ms` carries `transaction` in its Lance transaction
/// properties: the run it names committed.
pub async fn committed_by(dataset: &Dataset, transaction: &str, since_ms: u64) -> Result<bool> {
    let versions = dataset.versions().await.map_err(lance_error)?;
    for v in versions.iter().rev() {
        if (v.timestamp.timestamp_millis() as u64) + 1000 < since_ms {
            break;
        }
        let Some(tx) = dataset
            .read_transaction_by_version(v.version)
            .await
            .map_err(lance_error)?
        else {
            continue;
        };
        if tx
            .transaction_properties
            .as_ref()
            .and_then(|p| p.get(TRANSACTION_PROPERTY))
            .is_some_and(|id| id == transaction)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::next_manifest;

    #[test]
    fn the_next_manifest_keeps_the_naming_scheme() {
        assert_eq!(next_manifest("7.manifest", 7), "_versions/8.manifest");
        let v2 = format!("{:020}.manifest", u64::MAX - 7);
        assert_eq!(
            next_manifest(&v2, 7),
            format!("_versions/{:020}.manifest", u64::MAX - 8)
        );
        // V2 names sort newest first: the next one before the current.
        assert!(next_manifest(&v2, 7) < format!("_versions/{v2}"));
    }
}
