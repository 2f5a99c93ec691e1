//! The gateway's own Lance commits on managed tables (its data operations and maintenance),
//! through the same commit log as its clients' CreateTableVersion: the data plane opens a
//! managed table's dataset with a commit handler (`data::managed`) that stages each manifest
//! as Lance does, then hands it to `VersionLog::commit`. So a batch holding a table, or a
//! client's commit of the same version, orders against the gateway's own writes exactly as
//! against any other writer's (a lost race is a conflict Lance retries on the newer version).

use std::sync::Arc;

use async_trait::async_trait;

use super::Catalog;
use super::records::TableRecord;
use super::versions::{CommittedVersion, NewVersion};
use crate::access::Ctx;
use crate::error::{Code, Error, Result};

/// What the data plane asks of the log for a table's dataset rooted at `base` (an object
/// store path: the table's folder, or one of its branches under `tree/`).
#[async_trait]
pub trait VersionLog: Send + Sync {
    /// Commits the manifest staged at `staged` (an object-store path, `size` bytes, named
    /// by `scheme`) as `version`: CreateTableVersion with the gateway's own rights.
    async fn commit(
        &self,
        id: &[String],
        base: &str,
        version: u64,
        staged: &str,
        size: u64,
        scheme: &str,
    ) -> Result<CommittedVersion>;
}

/// The catalog as the data plane's `VersionLog`.
pub struct OwnCommits(Arc<Catalog>);

impl OwnCommits {
    /// The log of `catalog`, which from now on counts on the data plane committing
    /// through it (and no longer writes receipts of the gateway's own commits itself).
    pub fn of(catalog: Arc<Catalog>) -> Self {
        catalog
            .own_commits
            .store(true, std::sync::atomic::Ordering::Relaxed);
        OwnCommits(catalog)
    }

    async fn table(&self, id: &[String]) -> Result<TableRecord> {
        self.0.describe_table(&Ctx::internal(), id).await
    }
}

#[async_trait]
impl VersionLog for OwnCommits {
    async fn commit(
        &self,
        id: &[String],
        base: &str,
        version: u64,
        staged: &str,
        size: u64,
        scheme: &str,
    ) -> Result<CommittedVersion> {
        let record = self.table(id).await?;
        let branch = self.0.branch_at(&record, base)?;
        let req = NewVersion {
            version: i64::try_from(version)
                .map_err(|_| Error::invalid(format!("version {version} is out of range")))?,
            manifest_path: staged.to_string(),
            manifest_size: i64::try_from(size).ok(),
            e_tag: None,
            naming_scheme: Some(scheme.to_string()),
            branch,
        };
        // A batch deciding holds the version: wait for its decision (a batch decides in
        // moments; one whose gateway died is failed after the grace period), as Lance's own
        // retries are too few and quick to outlast it. Any other refusal is Lance's to
        // retry on the newer version.
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(self.0.grace_ms.saturating_mul(2).max(1_000));
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            let refused = match self
                .0
                .create_table_version(&Ctx::internal(), id, req.clone())
                .await
            {
                Err(e) if e.code == Code::ConcurrentModification => e,
                done => return done,
            };
            let log = self.0.settle_log(&record, req.branch.as_deref()).await?;
            let held = log.live_lock().is_some_and(|lock| lock.version == version);
            if !held || std::time::Instant::now() + pause > deadline {
                return Err(refused);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }
}

impl Catalog {
    /// Whether the gateway's own commits go through the log (see `OwnCommits::of`).
    pub(crate) fn own_commits_logged(&self) -> bool {
        self.managed_versioning && self.own_commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The branch whose dataset is rooted at `base` (an object-store path): `None` for the
    /// table's own folder, the name for `<folder>/tree/<name>`; anything else is refused.
    fn branch_at(&self, record: &TableRecord, base: &str) -> Result<Option<String>> {
        let root = self.layout.store_path_of(&record.data_key);
        let (root, base) = (root.trim_end_matches('/'), base.trim_end_matches('/'));
        if base == root {
            return Ok(None);
        }
        base.strip_prefix(root)
            .and_then(|rest| rest.strip_prefix("/tree/"))
            .filter(|name| !name.is_empty())
            .map(|name| Some(name.to_string()))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "'{base}' is neither the table's folder '{root}' nor one of its branches"
                ))
            })
    }
}
