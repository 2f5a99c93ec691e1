//! Data-plane routes, one file per resource: rows (create, insert, merge, update, delete),
//! reads (query, count, plans, stats), refs (versions, tags, branches), indices and schema.
//! Each route finds the table in the catalog with the caller's access (read for reads,
//! write for writes, admin for destructive changes), then runs the Lance work on the data
//! runtime (`data::DataRuntime`) to its end.
//!
//! A declared table holds no data yet. Each route answers it within the statuses the spec
//! allows the operation: reads answer nothing (no rows, zero stats, an empty plan), and
//! what a request names inside the table (a tag, a branch, an index, a column, a version)
//! is missing, with that thing's own code.

pub mod indices;
pub mod reads;
pub mod refs;
pub mod rows;
pub mod schema;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::extract::Target;
use crate::access::{Ctx, Level};
use crate::catalog::records::TableRecord;
use crate::data::{At, LanceDatasets};
use crate::error::{Code, Error, Result};

/// The table a data request names, once the caller may do `needed` to it.
async fn table(
    state: &AppState,
    ctx: &Ctx,
    target: &Target,
    needed: Level,
    what: &str,
) -> Result<TableRecord> {
    if target.id.is_empty() {
        return Err(Error::invalid("the route needs a table id"));
    }
    let record = state.catalog.describe_table(ctx, &target.id).await?;
    if needed > Level::Read {
        state
            .catalog
            .may_change_table(ctx, &target.id, needed, what)?;
    }
    Ok(record)
}

/// Whether the table holds data yet (a declared table does not).
async fn has_rows(state: &AppState, record: &TableRecord) -> Result<bool> {
    state.catalog.has_data(record).await
}

/// The table, once the caller may do `needed` to it, if it holds data; `empty` is the
/// answer for one that does not (what the request names in it is missing).
async fn table_with_data(
    (state, ctx, target): (&AppState, &Ctx, &Target),
    (needed, what): (Level, &str),
    empty: impl FnOnce() -> Error,
) -> Result<TableRecord> {
    let record = table(state, ctx, target, needed, what).await?;
    if !has_rows(state, &record).await? {
        return Err(empty());
    }
    Ok(record)
}

/// Runs `work` with the datasets on the data runtime.
async fn on_data<T, F, Fut>(state: &AppState, work: F) -> Result<T>
where
    F: FnOnce(Arc<LanceDatasets>) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let datasets = state.data.clone();
    let runtime = datasets.runtime().clone();
    runtime.run(work(datasets)).await
}

/// Opens the table's dataset at `at` on the data runtime and runs `work` on it.
async fn with_dataset<T, F, Fut>(
    state: &AppState,
    record: &TableRecord,
    at: At,
    work: F,
) -> Result<T>
where
    F: FnOnce(lance::Dataset) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let location = crate::data::TableData::of(&record);
    on_data(state, move |datasets| async move {
        let dataset = datasets.open(&location, &at).await?;
        work(dataset).await
    })
    .await
}

/// The common shape of a change to a table's data: the table (holding data, `empty`
/// otherwise) once the caller may do `needed`, its dataset at `branch`, and `work` run on
/// it on the data runtime.
async fn on_branch<T, F, Fut>(
    request: (&AppState, &Ctx, &Target),
    access: (Level, &str),
    branch: Option<&str>,
    empty: impl FnOnce() -> Error,
    work: F,
) -> Result<T>
where
    F: FnOnce(lance::Dataset) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let record = table_with_data(request, access, empty).await?;
    let at = At::of(None, branch)?;
    with_dataset(request.0, &record, at, work).await
}

/// `on_branch` for a change that makes a version (`work` answers it beside its result):
/// the version is noted as the gateway's own commit.
async fn committing<T, F, Fut>(
    request: (&AppState, &Ctx, &Target),
    access: (Level, &str),
    branch: Option<&str>,
    empty: impl FnOnce() -> Error,
    work: F,
) -> Result<T>
where
    F: FnOnce(lance::Dataset) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(u64, T)>> + Send + 'static,
    T: Send + 'static,
{
    let record = table_with_data(request, access, empty).await?;
    let at = At::of(None, branch)?;
    let on = at.branch.clone();
    let (version, out) = with_dataset(request.0, &record, at, work).await?;
    request
        .0
        .catalog
        .note_own_commit(&record, on.as_deref(), version);
    Ok(out)
}

/// A read's answer, or `empty` for a table that holds no data yet.
fn or_empty<T>(read: Result<T>, empty: impl FnOnce() -> T) -> Result<T> {
    match read {
        Err(e) if e.code == Code::InvalidTableState => Ok(empty()),
        other => other,
    }
}

fn arrow_file(body: Body) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.apache.arrow.file"),
    );
    response
}

/// What a table with no data yet lacks, with each thing's own code.
mod absent {
    use crate::error::{Code, Error};

    const WHY: &str = "the table holds no data yet";

    pub fn tag(tag: &str) -> Error {
        Error::new(
            Code::TableTagNotFound,
            format!("tag '{tag}' not found: {WHY}"),
        )
    }
    pub fn branch(branch: &str) -> Error {
        Error::new(
            Code::TableBranchNotFound,
            format!("branch '{branch}' not found: {WHY}"),
        )
    }
    pub fn version(version: Option<i64>) -> Error {
        let which = version.map_or("a version".to_string(), |v| format!("version {v}"));
        Error::new(
            Code::TableVersionNotFound,
            format!("{which} of the table not found: {WHY}"),
        )
    }
    pub fn index(name: &str) -> Error {
        Error::new(
            Code::TableIndexNotFound,
            format!("index '{name}' not found: {WHY}"),
        )
    }
    pub fn column(column: &str) -> Error {
        Error::new(
            Code::TableColumnNotFound,
            format!("column '{column}' is not in the table: {WHY}"),
        )
    }
    pub fn schema() -> Error {
        Error::invalid(format!("{WHY}: it has no schema to change"))
    }
}
