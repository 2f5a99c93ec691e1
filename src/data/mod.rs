//! The lance-backed data plane: opening a table's dataset at a version, tag or branch,
//! and the data operations of the spec run on it (`write`, `read`, `refs`, `index`,
//! `schema`). Everything here works on a dataset location; which table that is, and whether
//! the caller may touch it, is decided before (`api::data` asks the catalog).
//!
//! Data work runs on its own runtime (`DataRuntime`), so a large write, scan or index build
//! never occupies the threads that answer metadata requests, and every change runs to its
//! end even when the client goes away (a Lance commit is atomic: a change either produces
//! its new version or leaves the table as it was).

pub mod index;
pub mod ipc;
pub mod json;
pub mod maintain;
pub mod managed;
pub mod read;
pub mod refs;
pub mod schema;
pub mod write;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::io::{ObjectStoreParams, StorageOptionsAccessor};
use lance::session::Session;

use crate::catalog::{DatasetDetails, DatasetReader};
use crate::error::{Code, Error, Result};
use crate::vend::Vendor;

/// Which state of a table a request reads: the latest version of the main branch unless a
/// version, a tag or a branch is named.
#[derive(Clone, Debug, Default)]
pub struct At {
    pub version: Option<u64>,
    pub branch: Option<String>,
    pub tag: Option<String>,
}

impl At {
    pub fn latest() -> Self {
        At::default()
    }

    /// A request's `version` and `branch` fields (a negative version is refused; a branch
    /// named `main` is the main branch).
    pub fn of(version: Option<i64>, branch: Option<&str>) -> Result<Self> {
        let version = match version {
            Some(v) if v < 0 => {
                return Err(Error::invalid(format!(
                    "version must not be negative, got {v}"
                )));
            }
            Some(v) => Some(v as u64),
            None => None,
        };
        Ok(At {
            version,
            branch: branch
                .map(str::trim)
                .filter(|b| !b.is_empty() && *b != "main")
                .map(str::to_string),
            tag: None,
        })
    }
}

/// Caps on data requests.
#[derive(Clone, Copy, Debug)]
pub struct DataLimits {
    /// Largest Arrow upload (separate from the JSON body cap).
    pub max_arrow_body_bytes: usize,
    /// Most rows one query may return.
    pub max_query_rows: usize,
    /// Largest result one query may return, in bytes of Arrow memory.
    pub max_query_bytes: usize,
    /// How long an index build's request waits for it before answering its transaction id
    /// and letting it go on (three quarters of the request timeout).
    pub build_wait: std::time::Duration,
}

impl Default for DataLimits {
    fn default() -> Self {
        DataLimits {
            max_arrow_body_bytes: 256 * 1024 * 1024,
            max_query_rows: 1_000_000,
            max_query_bytes: 256 * 1024 * 1024,
            build_wait: std::time::Duration::from_secs(22),
        }
    }
}

impl DataLimits {
    pub fn results(&self) -> read::ResultLimits {
        read::ResultLimits {
            max_rows: self.max_query_rows,
            max_bytes: self.max_query_bytes,
        }
    }
}

/// Where data work runs: a runtime of its own, beside the one that serves requests.
#[derive(Clone)]
pub struct DataRuntime {
    handle: tokio::runtime::Handle,
}

impl DataRuntime {
    /// A runtime of `threads` workers that lives as long as the process.
    pub fn dedicated(threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("lance-data")
            .enable_all()
            .build()?;
        // Never dropped: dropping a runtime inside another one's async context panics, and
        // the process exits with it anyway.
        let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime));
        Ok(DataRuntime {
            handle: runtime.handle().clone(),
        })
    }

    /// Starts `work` on the data runtime without waiting for it.
    pub fn spawn<F>(&self, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handle.spawn(work);
    }

    /// Starts `work` on the data runtime; the handle answers its result, and aborting it
    /// stops the work at its next await (a Lance write or index build that has not
    /// committed then never does).
    pub fn start<T, F>(&self, work: F) -> tokio::task::JoinHandle<Result<T>>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.handle.spawn(work)
    }

    /// The caller's own runtime (for tests and tools that serve no requests).
    pub fn current() -> Self {
        DataRuntime {
            handle: tokio::runtime::Handle::current(),
        }
    }

    /// Runs `work` on the data runtime to its end, even if the caller stops waiting.
    pub async fn run<T, F>(&self, work: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .map_err(|e| Error::internal("a data operation failed", e))?
    }
}

/// A table's dataset as the data plane opens it: where it is, and which table it is (its
/// commits go through the catalog's commit log under managed versioning).
#[derive(Clone, Debug)]
pub struct TableData {
    pub location: String,
    pub id: Vec<String>,
}

impl TableData {
    pub fn of(record: &crate::catalog::records::TableRecord) -> Self {
        TableData {
            location: record.location.clone(),
            id: record.id.clone(),
        }
    }
}

/// Opens datasets with the gateway's own access to the warehouse, sharing one Lance session
/// (its index and metadata caches) across requests.
pub struct LanceDatasets {
    access: Vendor,
    session: Arc<Session>,
    runtime: DataRuntime,
    /// Datasets opened before, by location, with the table they were opened for (`None`:
    /// for reading only): reopening one only reads its latest manifest (its object store,
    /// with its connection pool, is kept).
    handles: std::sync::Mutex<HashMap<String, (Option<Vec<String>>, Dataset)>>,
    /// Under managed versioning, the commit log every commit of a table goes through.
    log: std::sync::OnceLock<Arc<dyn crate::catalog::own_commits::VersionLog>>,
}

/// How many datasets stay open at once.
const OPEN_HANDLES: usize = 512;

impl LanceDatasets {
    /// `access` must vend the gateway's own credentials (or none, on a local warehouse).
    /// Data work runs on the caller's runtime until `with_runtime` says otherwise.
    pub fn new(access: Vendor) -> Self {
        LanceDatasets {
            access,
            session: Arc::new(Session::default()),
            runtime: DataRuntime::current(),
            handles: std::sync::Mutex::new(HashMap::new()),
            log: std::sync::OnceLock::new(),
        }
    }

    /// Commits of every table from now on go through `log` (managed versioning; set once,
    /// at start, before any dataset is opened for writing).
    pub fn commit_through(&self, log: Arc<dyn crate::catalog::own_commits::VersionLog>) {
        let _ = self.log.set(log);
    }

    /// The commit handler of `table`'s commits: through the log under managed versioning,
    /// Lance's own otherwise.
    pub fn commit_handler(
        &self,
        table: &TableData,
    ) -> Option<Arc<dyn lance_table::io::commit::CommitHandler>> {
        let log = self.log.get()?;
        Some(managed::commit_handler(log.clone(), table.id.clone()))
    }

    pub fn with_runtime(mut self, runtime: DataRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    pub fn runtime(&self) -> &DataRuntime {
        &self.runtime
    }

    pub fn session(&self) -> Arc<Session> {
        self.session.clone()
    }

    pub async fn options(&self) -> Result<HashMap<String, String>> {
        self.access.plain(true).await
    }

    /// The object-store settings for writing a new dataset at a location.
    pub async fn store_params(&self) -> Result<ObjectStoreParams> {
        Ok(ObjectStoreParams {
            storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(
                self.options().await?,
            ))),
            ..Default::default()
        })
    }

    /// The dataset at `location`, as of `at`. Every call sees the newest committed version
    /// (or the one `at` names): a handle opened before is brought up to date, not trusted.
    pub async fn open(&self, table: &TableData, at: &At) -> Result<Dataset> {
        let location = table.location.as_str();
        let latest = self
            .latest(location, Some(table))
            .await
            .map_err(|e| self.load_error(e, location, at))?;
        let dataset = match (&at.tag, &at.branch, at.version) {
            (None, None, None) => return Ok(latest),
            (Some(tag), _, _) => latest.checkout_version(tag.as_str()).await,
            (None, Some(branch), version) => match version {
                Some(v) => latest.checkout_version((branch.as_str(), v)).await,
                None => latest.checkout_branch(branch).await,
            },
            (None, None, Some(version)) => latest.checkout_version(version).await,
        };
        dataset.map_err(|e| self.load_error(e, location, at))
    }

    /// The newest version at `location`, from a kept handle when there is one. A handle
    /// for committing (`table`) commits as that table; one for reading only (`None`) may be
    /// any.
    async fn latest(&self, location: &str, table: Option<&TableData>) -> lance::Result<Dataset> {
        let wanted = table
            .map(|t| t.id.clone())
            .filter(|_| self.log.get().is_some());
        let kept = self.handles.lock().ok().and_then(|h| {
            h.get(location)
                .filter(|(id, _)| wanted.is_none() || *id == wanted)
                .map(|(_, dataset)| dataset.clone())
        });
        if let Some(mut dataset) = kept {
            match dataset.checkout_latest().await {
                Ok(()) => return Ok(dataset),
                // The folder changed under the handle (a drop, a new table): open afresh.
                Err(_) => self.forget(location),
            }
        }
        let options = self
            .options()
            .await
            .map_err(|e| lance::Error::invalid_input(e.to_string()))?;
        let mut builder = DatasetBuilder::from_uri(location)
            .with_storage_options(options)
            .with_session(self.session.clone());
        if let Some(handler) = table.and_then(|t| self.commit_handler(t)) {
            builder = builder.with_commit_handler(handler);
        }
        let dataset = builder.load().await?;
        if let Ok(mut handles) = self.handles.lock() {
            if handles.len() >= OPEN_HANDLES {
                handles.clear();
            }
            handles.insert(location.to_string(), (wanted, dataset.clone()));
        }
        Ok(dataset)
    }

    /// Drops the kept handle of `location` (its table was dropped or replaced).
    pub fn forget(&self, location: &str) {
        if let Ok(mut handles) = self.handles.lock() {
            handles.remove(location);
        }
    }

    fn load_error(&self, e: lance::Error, location: &str, at: &At) -> Error {
        match e {
            // A branch that is not there has no version folder at all.
            lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. }
                if at.branch.is_some()
                    && (at.version.is_none()
                        || e.to_string().contains("_versions ")
                        || e.to_string().trim_end().ends_with("_versions")) =>
            {
                Error::new(
                    Code::TableBranchNotFound,
                    format!(
                        "branch '{}' not found",
                        at.branch.as_deref().unwrap_or_default()
                    ),
                )
            }
            lance::Error::DatasetNotFound { .. } | lance::Error::NotFound { .. }
                if at.version.is_some() =>
            {
                Error::new(
                    Code::TableVersionNotFound,
                    format!(
                        "version {} of the table not found",
                        at.version.unwrap_or_default()
                    ),
                )
            }
            lance::Error::DatasetNotFound { .. } if at.tag.is_none() => Error::new(
                Code::InvalidTableState,
                format!("the table at '{location}' holds no data yet"),
            ),
            other => lance_error(other),
        }
    }
}

#[async_trait]
impl DatasetReader for LanceDatasets {
    async fn describe(&self, location: &str) -> Result<DatasetDetails> {
        let dataset = self.latest(location, None).await.map_err(|e| {
            Error::unavailable(format!("could not open the dataset at '{location}'"))
                .with_detail(e.to_string())
        })?;
        details(&dataset).await
    }
}

/// What DescribeTable reports of a dataset with `load_detailed_metadata`.
pub async fn details(dataset: &Dataset) -> Result<DatasetDetails> {
    let arrow = arrow_schema::Schema::from(dataset.schema());
    let schema = lance_namespace::schema::arrow_schema_to_json(&arrow)
        .map_err(|e| Error::internal("could not describe the dataset's schema", e))?;
    let deleted = dataset.count_deleted_rows().await.map_err(|e| {
        Error::unavailable("could not read the dataset's deletions").with_detail(e.to_string())
    })?;
    Ok(DatasetDetails {
        version: dataset.version().version as i64,
        schema: Some(schema),
        num_deleted_rows: deleted as i64,
        num_fragments: dataset.get_fragments().len() as i64,
        metadata: dataset.metadata().clone(),
    })
}

/// A Lance failure as the spec's error: the client's mistakes (bad SQL, unknown columns,
/// wrong types) get their codes; a failure of the store is ServiceUnavailable; anything else
/// is Internal, with the cause in the log.
pub fn lance_error(e: lance::Error) -> Error {
    use lance::Error as L;
    let text = e.to_string();
    let code = match &e {
        L::InvalidInput { .. } | L::InvalidRef { .. } | L::NotSupported { .. } => {
            if names_missing_column(&text) {
                Code::TableColumnNotFound
            } else {
                Code::InvalidInput
            }
        }
        L::FieldNotFound { .. } => Code::TableColumnNotFound,
        L::SchemaMismatch { .. } => Code::TableSchemaValidationError,
        L::Schema { .. } | L::Arrow { .. } | L::Execution { .. } => {
            if names_missing_column(&text) {
                Code::TableColumnNotFound
            } else {
                Code::InvalidInput
            }
        }
        L::DatasetAlreadyExists { .. } => Code::TableAlreadyExists,
        L::DatasetNotFound { .. } => Code::TableNotFound,
        L::CommitConflict { .. }
        | L::RetryableCommitConflict { .. }
        | L::TooMuchWriteContention { .. }
        | L::IncompatibleTransaction { .. }
        | L::VersionConflict { .. } => Code::ConcurrentModification,
        L::IndexNotFound { .. } => Code::TableIndexNotFound,
        L::VersionNotFound { .. } => Code::TableVersionNotFound,
        L::RefNotFound { .. } if text.contains("ranch") => Code::TableBranchNotFound,
        L::RefNotFound { .. } => Code::TableTagNotFound,
        L::RefConflict { .. } if text.contains("ranch") => Code::TableBranchAlreadyExists,
        L::RefConflict { .. } => Code::TableTagAlreadyExists,
        L::NotFound { .. } if text.contains("ranch") => Code::TableBranchNotFound,
        L::NotFound { .. } if text.contains("ersion") => Code::TableVersionNotFound,
        L::IO { .. } | L::Timeout { .. } | L::Backpressure { .. } => Code::ServiceUnavailable,
        L::Index { .. } if text.contains("already exists") => Code::TableIndexAlreadyExists,
        L::Index { .. } => Code::InvalidInput,
        _ => {
            return Error::internal("the data operation failed", &text);
        }
    };
    Error::new(code, first_line(&text)).with_detail(text)
}

fn names_missing_column(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("no field named")
        || lower.contains("column not found")
        || lower.contains("field not found")
        || (lower.contains("column") && lower.contains("does not exist"))
        || (lower.contains("column") && lower.contains("not found"))
        || lower.contains("not found in schema")
}

/// A short message for the client: the first line, without Lance's source location.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text);
    let line = match line.rfind(", /") {
        Some(i) => &line[..i],
        None => line,
    };
    line.chars().take(500).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_reads_main_as_the_main_branch_and_refuses_negative_versions() {
        let at = At::of(Some(3), Some("main")).unwrap();
        assert_eq!(at.version, Some(3));
        assert_eq!(at.branch, None);
        assert_eq!(At::of(Some(-1), None).unwrap_err().code, Code::InvalidInput);
        assert_eq!(
            At::of(None, Some("dev")).unwrap().branch.as_deref(),
            Some("dev")
        );
    }

    #[test]
    fn client_mistakes_keep_their_codes() {
        let e = lance_error(lance::Error::invalid_input("No field named nope"));
        assert_eq!(e.code, Code::TableColumnNotFound);
        let e = lance_error(lance::Error::invalid_input("bad predicate"));
        assert_eq!(e.code, Code::InvalidInput);
        let e = lance_error(lance::Error::index_not_found("name=x"));
        assert_eq!(e.code, Code::TableIndexNotFound);
    }
}
