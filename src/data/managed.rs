//! Lance's commits of the gateway's own writes on a managed table, through the catalog's
//! commit log (`catalog::own_commits`).
//!
//! The handler writes each new manifest under a staging name
//! (`_versions/<final name>-<uuid>`), as a Lance client of a managed table does, and hands it
//! to the log, which commits it or refuses it (a rival took the version, or a batch holds the
//! table: Lance's conflict, which it retries on the newer version) and publishes it before it
//! answers. Everything else (finding the newest version, a version's manifest) is storage's,
//! as for an unmanaged table: every version the log commits is published before its commit
//! answers, and a crash in between is settled by the next commit of the table.

use std::sync::Arc;

use async_trait::async_trait;
use lance::io::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
};
use object_store::ObjectStoreExt;
use object_store::path::Path;

use crate::catalog::own_commits::VersionLog;
use crate::error::Code;

/// Commits one table's versions through the log.
pub struct LogCommits {
    log: Arc<dyn VersionLog>,
    id: Vec<String>,
}

impl std::fmt::Debug for LogCommits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCommits").field("id", &self.id).finish()
    }
}

/// The commit handler of table `id`, through `log`.
pub fn commit_handler(log: Arc<dyn VersionLog>, id: Vec<String>) -> Arc<dyn CommitHandler> {
    Arc::new(LogCommits { log, id })
}

#[async_trait]
impl CommitHandler for LogCommits {
    /// A commit the log refused did not land (the log decides before it answers), and a
    /// version it committed is published before it answers: storage not holding a version
    /// means no one committed it.
    fn is_version_not_found_definitive(&self) -> bool {
        true
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> std::result::Result<ManifestLocation, CommitError> {
        let version = manifest.version;
        let final_path = naming_scheme.manifest_path(base_path, version);
        let staged = Path::parse(format!("{final_path}-{}", uuid::Uuid::new_v4()))
            .map_err(|e| CommitError::OtherError(lance::Error::invalid_input(e.to_string())))?;
        let written =
            manifest_writer(object_store, manifest, indices, &staged, transaction).await?;
        let scheme = match naming_scheme {
            ManifestNamingScheme::V1 => "V1",
            ManifestNamingScheme::V2 => "V2",
        };
        let committed = self
            .log
            .commit(
                &self.id,
                base_path.as_ref(),
                version,
                staged.as_ref(),
                written.size as u64,
                scheme,
            )
            .await;
        match committed {
            Ok(committed) => Ok(ManifestLocation {
                version,
                path: Path::parse(&committed.manifest_path).map_err(|e| {
                    CommitError::OtherError(lance::Error::invalid_input(e.to_string()))
                })?,
                size: Some(committed.size),
                naming_scheme,
                e_tag: committed.e_tag,
                identity: None,
            }),
            Err(e) if e.code == Code::ConcurrentModification => {
                // Refused: the staging manifest was never committed, and is only litter.
                if let Err(e) = object_store.inner.delete(&staged).await {
                    tracing::debug!(path = %staged, error = %e, "could not delete a refused staging manifest");
                }
                Err(CommitError::CommitConflict)
            }
            Err(e) => Err(CommitError::OtherError(lance::Error::invalid_input(
                e.to_string(),
            ))),
        }
    }
}
