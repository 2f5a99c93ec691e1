//! Data-plane routes: writes, reads, indices, versions, tags, branches and schema changes.
//! Each route finds the table in the catalog with the caller's access (read for reads,
//! write for writes, admin for destructive changes), then runs the Lance work on the data
//! runtime (`data::DataRuntime`) to its end.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::models::{
    AlterTableAddColumnsResponse, AlterTableAlterColumnsResponse, AlterTableDropColumnsResponse,
    CreateTableBranchResponse, CreateTableIndexRequest, CreateTableIndexResponse,
    CreateTableResponse, CreateTableTagResponse, DeleteFromTableResponse,
    DeleteTableBranchResponse, DeleteTableTagResponse, DescribeTableIndexStatsResponse,
    DescribeTableVersionResponse, DropTableIndexResponse, GetTableStatsResponse,
    GetTableTagVersionResponse, InsertIntoTableResponse, ListTableBranchesResponse,
    ListTableIndicesResponse, ListTableTagsResponse, ListTableVersionsResponse,
    MergeInsertIntoTableResponse, RestoreTableResponse, UpdateFieldMetadataResponse,
    UpdateTableResponse, UpdateTableTagResponse,
};
use serde::Deserialize;

use super::extract::{Dialect, JsonBody, QueryOf, Target};
use super::{AppState, detached};
use crate::access::{Ctx, Level};
use crate::catalog::records::TableRecord;
use crate::data::read::{Query, ResultLimits};
use crate::data::write::{MergeOptions, Written};
use crate::data::{At, LanceDatasets, index, ipc, read, refs, schema, write};
use crate::error::{Code, Error, Result};

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
    fn results(&self) -> ResultLimits {
        ResultLimits {
            max_rows: self.max_query_rows,
            max_bytes: self.max_query_bytes,
        }
    }
}

/// The table a data request names, once the caller may do `needed` to it.
async fn table(
    state: &AppState,
    ctx: &Ctx,
    target: &Target,
    needed: Level,
    what: &str,
) -> Result<TableRecord> {
    target_is_table(target)?;
    let record = state.catalog.describe_table(ctx, &target.id).await?;
    if needed > Level::Read {
        state
            .catalog
            .may_change_table(ctx, &target.id, needed, what)?;
    }
    Ok(record)
}

fn target_is_table(target: &Target) -> Result<()> {
    if target.id.is_empty() {
        return Err(Error::invalid("the route needs a table id"));
    }
    Ok(())
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
    let location = record.location.clone();
    on_data(state, move |datasets| async move {
        let dataset = datasets.open(&location, &at).await?;
        work(dataset).await
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Writes

#[derive(Deserialize, Default)]
pub struct CreateQuery {
    mode: Option<String>,
    properties: Option<String>,
    storage_options: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreateMode {
    Create,
    ExistOk,
    Overwrite,
}

fn create_mode(mode: Option<&str>) -> Result<CreateMode> {
    match mode
        .map(|m| m.replace(['_', '-'], "").to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("create") => Ok(CreateMode::Create),
        Some("existok") => Ok(CreateMode::ExistOk),
        Some("overwrite") => Ok(CreateMode::Overwrite),
        Some(other) => Err(Error::invalid(format!(
            "unknown mode '{other}': use create, exist_ok or overwrite"
        ))),
    }
}

fn json_map(name: &str, text: Option<&str>) -> Result<HashMap<String, String>> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(HashMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            Error::invalid(format!("{name} must be a JSON object of strings"))
                .with_detail(e.to_string())
        }),
    }
}

/// CreateTable: the gateway picks the location (as for declare), writes the upload there,
/// and publishes the table. A write that fails takes the name back, so the catalog is as it
/// was.
pub async fn create(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    query: QueryOf<CreateQuery>,
    body: Body,
) -> Response {
    match create_table(state, ctx, target, query, body).await {
        Ok(created) => created.into_response(),
        // LanceDB's remote client knows a create conflict only as a 400 saying so.
        Err(e) if e.code == Code::TableAlreadyExists && dialect == Dialect::LanceDbRemote => {
            let mut response = e.into_response();
            *response.status_mut() = axum::http::StatusCode::BAD_REQUEST;
            response
        }
        Err(e) => e.into_response(),
    }
}

async fn create_table(
    state: AppState,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<CreateQuery>,
    body: Body,
) -> Result<Json<CreateTableResponse>> {
    target_is_table(&target)?;
    let mode = create_mode(q.mode.as_deref())?;
    let properties = json_map("properties", q.properties.as_deref())?;
    // Validated, not applied: the gateway writes with its own access to the warehouse.
    json_map("storage_options", q.storage_options.as_deref())?;
    let upload = ipc::read_upload(body, state.data_limits.max_arrow_body_bytes).await?;
    let flow_state = state.clone();
    let flow_ctx = ctx.clone();
    let id = target.id.clone();
    let (record, version) = detached(async move {
        let state = flow_state;
        let ctx = flow_ctx;
        let existing = match state.catalog.describe_table(&ctx, &id).await {
            Ok(record) => Some(record),
            Err(e) if e.code == Code::TableNotFound => None,
            Err(e) => return Err(e),
        };
        if let Some(record) = existing {
            match mode {
                CreateMode::Create => {
                    return Err(Error::table_exists(&state.catalog.show(&id)));
                }
                CreateMode::ExistOk => {
                    let version = if state.catalog.has_data(&record).await? {
                        Some(state.catalog.dataset_details(&record).await?.version)
                    } else {
                        None
                    };
                    return Ok((record, version));
                }
                CreateMode::Overwrite => {
                    state
                        .catalog
                        .may_change_table(&ctx, &id, Level::Admin, "overwriting")?;
                    let location = record.location.clone();
                    let written = on_data(&state, move |datasets| async move {
                        write::create(&datasets, &location, upload, true).await
                    })
                    .await?;
                    return Ok((record, Some(written.version as i64)));
                }
            }
        }
        let record = state
            .catalog
            .declare_table(&ctx, &id, None, properties)
            .await?;
        let location = record.location.clone();
        let written = on_data(&state, move |datasets| async move {
            write::create(&datasets, &location, upload, false).await
        })
        .await;
        match written {
            Ok(written) => Ok((record, Some(written.version as i64))),
            Err(e) => {
                // Take the name back (with whatever the failed write left in the folder).
                if let Err(undo) = state.catalog.abandon_table(&record).await {
                    tracing::warn!(error = %undo, table = ?id, "could not undo a failed create");
                }
                Err(e)
            }
        }
    })
    .await?;
    let level = state.catalog.access(&ctx, &record.id);
    let storage_options = state.vendor.options(&ctx, &record, level, true).await?;
    Ok(Json(CreateTableResponse {
        location: Some(record.location),
        version,
        storage_options: Some(storage_options),
        properties: Some(record.properties),
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
pub struct InsertQuery {
    mode: Option<String>,
    branch: Option<String>,
}

pub async fn insert(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<InsertQuery>,
    body: Body,
) -> Result<Json<InsertIntoTableResponse>> {
    let overwrite = match q.mode.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("append") => false,
        Some("overwrite") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "unknown mode '{other}': use append or overwrite"
            )));
        }
    };
    let record = table(&state, &ctx, &target, Level::Write, "inserting").await?;
    let at = At::of(None, q.branch.as_deref())?;
    let (upload, feed) = ipc::stream_upload(body, state.data_limits.max_arrow_body_bytes).await?;
    let location = record.location.clone();
    let write = on_data(&state, move |datasets| async move {
        write::insert(&datasets, &location, &at, upload, overwrite).await
    });
    // The upload is written as it arrives; when it breaks off or is not a whole Arrow
    // stream, the write commits nothing and the upload's fault is the answer.
    let (written, fed) = tokio::join!(write, feed.run());
    fed?;
    let written = written?;
    Ok(Json(InsertIntoTableResponse {
        num_inserted_rows: Some(written.inserted as i64),
        version: Some(written.version as i64),
        ..Default::default()
    }))
}

fn query_bool(name: &str, value: Option<&str>) -> Result<bool> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(Error::invalid(format!(
            "{name} must be true or false, got '{other}'"
        ))),
    }
}

/// MergeInsert's query string: `on` may repeat (or come comma-joined).
fn merge_options(query: Option<&str>) -> Result<(MergeOptions, Option<String>)> {
    let mut options = MergeOptions::default();
    let mut branch = None;
    let mut flags: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "on" => options.on.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            ),
            "branch" => branch = Some(v.into_owned()),
            _ => {
                flags.insert(k.into_owned(), v.into_owned());
            }
        }
    }
    let get = |k: &str| flags.get(k).map(String::as_str);
    options.when_matched_update_all =
        query_bool("when_matched_update_all", get("when_matched_update_all"))?;
    options.when_matched_update_all_filt = get("when_matched_update_all_filt")
        .filter(|f| !f.trim().is_empty())
        .map(str::to_string);
    options.when_not_matched_insert_all = query_bool(
        "when_not_matched_insert_all",
        get("when_not_matched_insert_all"),
    )?;
    options.when_not_matched_by_source_delete = query_bool(
        "when_not_matched_by_source_delete",
        get("when_not_matched_by_source_delete"),
    )?;
    options.when_not_matched_by_source_delete_filt = get("when_not_matched_by_source_delete_filt")
        .filter(|f| !f.trim().is_empty())
        .map(str::to_string);
    options.use_index = query_bool("use_index", get("use_index"))?;
    options.timeout = match get("timeout").filter(|t| !t.trim().is_empty()) {
        Some(t) => Some(write::parse_duration(t)?),
        None => None,
    };
    Ok((options, branch))
}

pub async fn merge_insert(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    uri: Uri,
    body: Body,
) -> Result<Json<MergeInsertIntoTableResponse>> {
    let (options, branch) = merge_options(uri.query())?;
    if options.on.is_empty() {
        return Err(Error::invalid(
            "merge_insert needs at least one `on` key column",
        ));
    }
    let record = table(&state, &ctx, &target, Level::Write, "merge-inserting").await?;
    let upload = ipc::read_upload(body, state.data_limits.max_arrow_body_bytes).await?;
    let at = At::of(None, branch.as_deref())?;
    let location = record.location.clone();
    let written: Written = on_data(&state, move |datasets| async move {
        write::merge_insert(&datasets, &location, &at, upload, options).await
    })
    .await?;
    Ok(Json(MergeInsertIntoTableResponse {
        num_updated_rows: Some(written.updated as i64),
        num_inserted_rows: Some(written.inserted as i64),
        num_deleted_rows: Some(written.deleted as i64),
        version: Some(written.version as i64),
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct UpdateBody {
    id: Option<Vec<String>>,
    updates: Vec<Vec<String>>,
    predicate: Option<String>,
    branch: Option<String>,
}

pub async fn update(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<UpdateBody>,
) -> Result<Json<Updated>> {
    target.check_body_id(req.id.as_ref())?;
    let mut updates = Vec::with_capacity(req.updates.len());
    for pair in req.updates {
        match <[String; 2]>::try_from(pair) {
            Ok([column, expression]) => updates.push((column, expression)),
            Err(_) => {
                return Err(Error::invalid(
                    "each update must be a [column, SQL expression] pair",
                ));
            }
        }
    }
    let record = table(&state, &ctx, &target, Level::Write, "updating").await?;
    let at = At::of(None, req.branch.as_deref())?;
    let location = record.location.clone();
    let predicate = req.predicate;
    let written = on_data(&state, move |datasets| async move {
        write::update(&datasets, &location, &at, &updates, predicate.as_deref()).await
    })
    .await?;
    Ok(Json(Updated {
        spec: UpdateTableResponse {
            updated_rows: written.updated as i64,
            version: written.version as i64,
            properties: Some(record.properties),
            ..Default::default()
        },
        rows_updated: written.updated,
    }))
}

/// UpdateTable's answer, with the count also under the name LanceDB's remote client reads.
#[derive(serde::Serialize)]
pub struct Updated {
    #[serde(flatten)]
    spec: UpdateTableResponse,
    rows_updated: u64,
}

/// DeleteFromTable's answer, with the number of rows deleted (LanceDB's remote client reads
/// it; the spec's answer has only the version).
#[derive(serde::Serialize)]
pub struct Deleted {
    #[serde(flatten)]
    spec: DeleteFromTableResponse,
    num_deleted_rows: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DeleteBody {
    id: Option<Vec<String>>,
    predicate: Option<String>,
    branch: Option<String>,
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DeleteBody>,
) -> Result<Json<Deleted>> {
    target.check_body_id(req.id.as_ref())?;
    let predicate = req
        .predicate
        .ok_or_else(|| Error::invalid("delete needs a predicate"))?;
    let record = table(&state, &ctx, &target, Level::Write, "deleting rows").await?;
    let at = At::of(None, req.branch.as_deref())?;
    let location = record.location.clone();
    let written = on_data(&state, move |datasets| async move {
        write::delete(&datasets, &location, &at, &predicate).await
    })
    .await?;
    Ok(Json(Deleted {
        spec: DeleteFromTableResponse {
            version: Some(written.version as i64),
            ..Default::default()
        },
        num_deleted_rows: written.deleted,
    }))
}

// ---------------------------------------------------------------------------------------
// Reads

fn arrow_file(body: Body) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.apache.arrow.file"),
    );
    response
}

/// Whether the table holds data yet (a declared table does not).
async fn has_rows(state: &AppState, record: &TableRecord) -> Result<bool> {
    state.catalog.has_data(record).await
}

/// A read's answer, or the empty answer for a table that holds no data yet.
fn or_empty<T: Default>(read: Result<T>) -> Result<T> {
    match read {
        Err(e) if e.code == Code::InvalidTableState => Ok(T::default()),
        other => other,
    }
}

pub async fn query(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<Query>,
) -> Result<Response> {
    let record = table(&state, &ctx, &target, Level::Read, "querying").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let limits = state.data_limits.results();
    let answer = with_dataset(&state, &record, at, move |dataset| async move {
        read::query(Arc::new(dataset), &req, limits).await
    })
    .await?;
    match answer {
        read::Answer::Whole(bytes) => Ok(arrow_file(bytes.into())),
        read::Answer::Streaming(rest) => {
            // The rest is read and written on the data runtime while the body goes out.
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            state.data.runtime().spawn(rest.send(tx));
            let chunks = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|chunk| (chunk, rx))
            });
            Ok(arrow_file(Body::from_stream(chunks)))
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CountBody {
    version: Option<i64>,
    branch: Option<String>,
    predicate: Option<String>,
    filter: Option<String>,
}

pub async fn count_rows(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<CountBody>,
) -> Result<Json<i64>> {
    let record = table(&state, &ctx, &target, Level::Read, "counting").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let predicate = req.predicate.or(req.filter);
    let n = with_dataset(&state, &record, at, move |dataset| async move {
        read::count_rows(&dataset, predicate.as_deref()).await
    })
    .await;
    // A table with no data yet has no rows.
    Ok(Json(or_empty(n)? as i64))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ExplainBody {
    query: Query,
    verbose: Option<bool>,
    branch: Option<String>,
}

pub async fn explain_plan(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<ExplainBody>,
) -> Result<Json<String>> {
    let branch = req.branch.clone().or(req.query.branch.clone());
    plan(
        state,
        ctx,
        target,
        req.query,
        branch,
        req.verbose.unwrap_or(false),
        false,
    )
    .await
}

pub async fn analyze_plan(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<Query>,
) -> Result<Json<String>> {
    let branch = req.branch.clone();
    plan(state, ctx, target, req, branch, false, true).await
}

async fn plan(
    state: AppState,
    ctx: Ctx,
    target: Target,
    query: Query,
    branch: Option<String>,
    verbose: bool,
    analyze: bool,
) -> Result<Json<String>> {
    let record = table(&state, &ctx, &target, Level::Read, "planning").await?;
    let at = At::of(query.version, branch.as_deref())?;
    let limits = state.data_limits.results();
    let text = with_dataset(&state, &record, at, move |dataset| async move {
        read::plan(Arc::new(dataset), &query, limits, verbose, analyze).await
    })
    .await?;
    Ok(Json(text))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct BranchBody {
    branch: Option<String>,
    version: Option<i64>,
}

pub async fn stats(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchBody>,
) -> Result<Json<GetTableStatsResponse>> {
    let record = table(&state, &ctx, &target, Level::Read, "reading stats").await?;
    let at = At::of(None, req.branch.as_deref())?;
    let stats = with_dataset(&state, &record, at, move |dataset| async move {
        read::stats(Arc::new(dataset)).await
    })
    .await?;
    Ok(Json(stats))
}

// ---------------------------------------------------------------------------------------
// Versions

#[derive(Deserialize, Default)]
pub struct VersionListQuery {
    page_token: Option<String>,
    limit: Option<usize>,
    descending: Option<bool>,
    branch: Option<String>,
}

pub async fn list_versions(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<VersionListQuery>,
) -> Result<Json<ListTableVersionsResponse>> {
    let record = table(&state, &ctx, &target, Level::Read, "listing versions").await?;
    let at = At::of(None, q.branch.as_deref())?;
    let descending = q.descending.unwrap_or(false);
    // A table that holds no data yet has no versions (found by opening it, not by a listing
    // of its own: this is the read managed clients make before every commit).
    let (versions, next) = or_empty(
        with_dataset(&state, &record, at, move |dataset| async move {
            refs::list_versions(&dataset, descending, q.page_token.as_deref(), q.limit).await
        })
        .await,
    )?;
    Ok(Json(ListTableVersionsResponse {
        versions,
        page_token: next,
        ..Default::default()
    }))
}

pub async fn describe_version(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchBody>,
) -> Result<Json<DescribeTableVersionResponse>> {
    let record = table(&state, &ctx, &target, Level::Read, "describing a version").await?;
    if !has_rows(&state, &record).await? {
        return Err(Error::new(
            Code::TableVersionNotFound,
            "the table holds no versions yet",
        ));
    }
    let at = At::of(req.version, req.branch.as_deref())?;
    let version = with_dataset(&state, &record, at, move |dataset| async move {
        Ok(refs::describe_version(&dataset))
    })
    .await?;
    Ok(Json(DescribeTableVersionResponse {
        version: Box::new(version),
        ..Default::default()
    }))
}

pub async fn restore(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchBody>,
) -> Result<Json<RestoreTableResponse>> {
    let version = req
        .version
        .ok_or_else(|| Error::invalid("restore needs a version"))?;
    let record = table(&state, &ctx, &target, Level::Admin, "restoring").await?;
    let at = At::of(Some(version), req.branch.as_deref())?;
    with_dataset(&state, &record, at, refs::restore).await?;
    Ok(Json(RestoreTableResponse::default()))
}

// ---------------------------------------------------------------------------------------
// Tags and branches

#[derive(Deserialize, Default)]
pub struct PageQuery {
    page_token: Option<String>,
    limit: Option<usize>,
}

pub async fn list_tags(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    QueryOf(q): QueryOf<PageQuery>,
) -> Result<Response> {
    let record = table(&state, &ctx, &target, Level::Read, "listing tags").await?;
    let (tags, next) = if has_rows(&state, &record).await? {
        with_dataset(&state, &record, At::latest(), move |dataset| async move {
            refs::list_tags(&dataset, q.page_token.as_deref(), q.limit).await
        })
        .await?
    } else {
        Default::default()
    };
    // LanceDB's remote client reads the bare map of tags.
    if dialect == Dialect::LanceDbRemote {
        return Ok(Json(tags).into_response());
    }
    Ok(Json(ListTableTagsResponse {
        tags,
        page_token: next,
        ..Default::default()
    })
    .into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TagBody {
    tag: Option<String>,
    version: Option<i64>,
    branch: Option<String>,
}

impl TagBody {
    fn tag(&self) -> Result<String> {
        self.tag
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| Error::invalid("the request needs a tag"))
    }
}

/// A table's tags live with its data: one with no data yet has none.
async fn tagged_table(
    state: &AppState,
    ctx: &Ctx,
    target: &Target,
    needed: Level,
    what: &str,
) -> Result<TableRecord> {
    let record = table(state, ctx, target, needed, what).await?;
    if !has_rows(state, &record).await? {
        return Err(read::no_data());
    }
    Ok(record)
}

/// The common shape of a change to a table's data: the table (holding data) once the caller
/// may do `needed`, its dataset at `branch`, and `work` run on it on the data runtime.
async fn on_branch<T, F, Fut>(
    (state, ctx, target): (&AppState, &Ctx, &Target),
    (needed, what): (Level, &str),
    branch: Option<&str>,
    work: F,
) -> Result<T>
where
    F: FnOnce(lance::Dataset) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let record = tagged_table(state, ctx, target, needed, what).await?;
    let at = At::of(None, branch)?;
    with_dataset(state, &record, at, work).await
}

pub async fn tag_version(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagBody>,
) -> Result<Json<GetTableTagVersionResponse>> {
    let tag = req.tag()?;
    let access = (Level::Read, "reading a tag");
    let contents = on_branch((&state, &ctx, &target), access, None, |ds| async move {
        refs::tag_version(&ds, &tag).await
    })
    .await?;
    Ok(Json(GetTableTagVersionResponse {
        version: contents.version,
        branch: contents.branch,
        ..Default::default()
    }))
}

async fn set_tag(
    state: AppState,
    ctx: Ctx,
    target: Target,
    req: TagBody,
    update: bool,
) -> Result<()> {
    let tag = req.tag()?;
    let version = req
        .version
        .ok_or_else(|| Error::invalid("the request needs a version"))?;
    let branch = req.branch;
    on_branch(
        (&state, &ctx, &target),
        (Level::Write, "tagging"),
        None,
        move |ds| async move { refs::set_tag(&ds, &tag, version, branch.as_deref(), update).await },
    )
    .await
}

pub async fn create_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagBody>,
) -> Result<Json<CreateTableTagResponse>> {
    set_tag(state, ctx, target, req, false).await?;
    Ok(Json(CreateTableTagResponse::default()))
}

pub async fn update_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagBody>,
) -> Result<Json<UpdateTableTagResponse>> {
    set_tag(state, ctx, target, req, true).await?;
    Ok(Json(UpdateTableTagResponse::default()))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagBody>,
) -> Result<Json<DeleteTableTagResponse>> {
    let tag = req.tag()?;
    let access = (Level::Admin, "deleting a tag");
    on_branch((&state, &ctx, &target), access, None, |ds| async move {
        refs::delete_tag(&ds, &tag).await
    })
    .await?;
    Ok(Json(DeleteTableTagResponse::default()))
}

pub async fn list_branches(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<PageQuery>,
) -> Result<Json<ListTableBranchesResponse>> {
    let record = table(&state, &ctx, &target, Level::Read, "listing branches").await?;
    if !has_rows(&state, &record).await? {
        return Ok(Json(ListTableBranchesResponse::default()));
    }
    let (branches, next) = with_dataset(&state, &record, At::latest(), move |dataset| async move {
        refs::list_branches(&dataset, q.page_token.as_deref(), q.limit).await
    })
    .await?;
    Ok(Json(ListTableBranchesResponse {
        branches,
        page_token: next,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct BranchCreateBody {
    name: Option<String>,
    from_branch: Option<String>,
    from_version: Option<i64>,
}

pub async fn create_branch(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchCreateBody>,
) -> Result<Json<CreateTableBranchResponse>> {
    let name = req
        .name
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| Error::invalid("the request needs a branch name"))?;
    let record = tagged_table(&state, &ctx, &target, Level::Write, "branching").await?;
    let at = At::of(None, req.from_branch.as_deref())?;
    let from_version = At::of(req.from_version, None)?.version;
    let from_branch = at.branch.clone();
    with_dataset(&state, &record, at, move |dataset| async move {
        refs::create_branch(dataset, &name, from_branch.as_deref(), from_version).await
    })
    .await?;
    Ok(Json(CreateTableBranchResponse::default()))
}

pub async fn delete_branch(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchCreateBody>,
) -> Result<Json<DeleteTableBranchResponse>> {
    let name = req
        .name
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| Error::invalid("the request needs a branch name"))?;
    let access = (Level::Admin, "deleting a branch");
    on_branch((&state, &ctx, &target), access, None, |ds| async move {
        refs::delete_branch(ds, &name).await
    })
    .await?;
    Ok(Json(DeleteTableBranchResponse::default()))
}

// ---------------------------------------------------------------------------------------
// Indices

/// CreateTableIndexRequest, plus what LanceDB's remote client sends beside it: the distance
/// as `metric_type`, and `replace` (default true: an index of the same name is rebuilt).
#[derive(Deserialize, Default)]
pub struct IndexBody {
    #[serde(flatten)]
    req: CreateTableIndexRequest,
    metric_type: Option<String>,
    replace: Option<bool>,
}

/// Builds an index on the data runtime under a transaction (`transaction::supervised`):
/// answers once it is committed, or with its transaction id if it takes longer than the
/// request may wait.
async fn build_index(
    state: AppState,
    ctx: Ctx,
    target: Target,
    body: IndexBody,
    scalar_only: bool,
) -> Result<String> {
    let mut req = body.req;
    if req.distance_type.is_none() {
        req.distance_type = body.metric_type;
    }
    let replace = body.replace.unwrap_or(true);
    target.check_body_id(req.id.as_ref())?;
    let record = tagged_table(&state, &ctx, &target, Level::Write, "indexing").await?;
    let at = At::of(None, req.branch.as_deref())?;
    // Lance's own default name, so the record names what the build makes.
    let name = req
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| format!("{}_idx", req.column.trim()));
    let (datasets, location) = (state.data.clone(), record.location.clone());
    let work = state.data.runtime().start(async move {
        let dataset = datasets.open(&location, &at).await?;
        index::create(dataset, &req, scalar_only, replace)
            .await
            .map(|_| ())
    });
    super::transaction::supervised(&state, &target.id, ("create_index", &name), work).await
}

/// Whether the index a stopped gateway was building was committed: an index of that name
/// made since the build started.
pub(super) async fn index_committed(
    state: &AppState,
    ctx: &Ctx,
    tx: crate::catalog::transactions::TransactionRecord,
) -> Result<bool> {
    let record = match state.catalog.describe_table(ctx, &tx.table).await {
        Ok(record) => record,
        Err(e) if e.code == Code::TableNotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !has_rows(state, &record).await? {
        return Ok(false);
    }
    let (name, since) = (tx.target, tx.started_at_ms as i64);
    with_dataset(state, &record, At::default(), move |dataset| async move {
        index::made_since(&dataset, &name, since).await
    })
    .await
}

pub async fn create_index(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<IndexBody>,
) -> Result<Json<CreateTableIndexResponse>> {
    let transaction = build_index(state, ctx, target, req, false).await?;
    Ok(Json(CreateTableIndexResponse {
        transaction_id: Some(transaction),
        ..Default::default()
    }))
}

pub async fn create_scalar_index(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<IndexBody>,
) -> Result<Json<lance_namespace::models::CreateTableScalarIndexResponse>> {
    let transaction = build_index(state, ctx, target, req, true).await?;
    Ok(Json(
        lance_namespace::models::CreateTableScalarIndexResponse {
            transaction_id: Some(transaction),
            ..Default::default()
        },
    ))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct IndexListBody {
    version: Option<i64>,
    branch: Option<String>,
    page_token: Option<String>,
    limit: Option<usize>,
}

pub async fn list_indices(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<IndexListBody>,
) -> Result<Json<ListTableIndicesResponse>> {
    let record = table(&state, &ctx, &target, Level::Read, "listing indices").await?;
    if !has_rows(&state, &record).await? {
        return Ok(Json(ListTableIndicesResponse::default()));
    }
    let at = At::of(req.version, req.branch.as_deref())?;
    let all = with_dataset(&state, &record, at, move |dataset| async move {
        index::list(&dataset).await
    })
    .await?;
    let after = req.page_token.filter(|t| !t.is_empty());
    let rest: Vec<_> = all
        .into_iter()
        .filter(|i| after.as_deref().is_none_or(|a| i.index_name.as_str() > a))
        .collect();
    let limit = req.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let next = (rest.len() > limit).then(|| rest[limit - 1].index_name.clone());
    Ok(Json(ListTableIndicesResponse {
        indexes: rest.into_iter().take(limit).collect(),
        page_token: next,
        ..Default::default()
    }))
}

pub async fn index_stats(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    Path((_, name)): Path<(String, String)>,
    JsonBody(req): JsonBody<BranchBody>,
) -> Result<Json<DescribeTableIndexStatsResponse>> {
    let record = tagged_table(&state, &ctx, &target, Level::Read, "reading index stats").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let stats = with_dataset(&state, &record, at, move |dataset| async move {
        index::stats(&dataset, &name).await
    })
    .await?;
    Ok(Json(stats))
}

#[derive(Deserialize, Default)]
pub struct BranchQuery {
    branch: Option<String>,
}

pub async fn drop_index(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    Path((_, name)): Path<(String, String)>,
    QueryOf(q): QueryOf<BranchQuery>,
) -> Result<Json<DropTableIndexResponse>> {
    let access = (Level::Admin, "dropping an index");
    on_branch(
        (&state, &ctx, &target),
        access,
        q.branch.as_deref(),
        |ds| async move { index::drop(ds, &name).await.map(|_| ()) },
    )
    .await?;
    Ok(Json(DropTableIndexResponse::default()))
}

// ---------------------------------------------------------------------------------------
// Schema

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AddColumnsBody {
    new_columns: Vec<schema::NewColumn>,
    branch: Option<String>,
}

pub async fn add_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<AddColumnsBody>,
) -> Result<Json<AlterTableAddColumnsResponse>> {
    let access = (Level::Write, "adding columns");
    let columns = req.new_columns;
    let version = on_branch(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        |ds| async move { schema::add_columns(ds, &columns).await },
    )
    .await?;
    Ok(Json(AlterTableAddColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AlterColumnsBody {
    alterations: Vec<schema::Alteration>,
    branch: Option<String>,
}

pub async fn alter_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<AlterColumnsBody>,
) -> Result<Json<AlterTableAlterColumnsResponse>> {
    let access = (Level::Admin, "altering columns");
    let alterations = req.alterations;
    let version = on_branch(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        |ds| async move { schema::alter_columns(ds, &alterations).await },
    )
    .await?;
    Ok(Json(AlterTableAlterColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DropColumnsBody {
    columns: Vec<String>,
    branch: Option<String>,
}

pub async fn drop_columns(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DropColumnsBody>,
) -> Result<Json<AlterTableDropColumnsResponse>> {
    let access = (Level::Admin, "dropping columns");
    let columns = req.columns;
    let version = on_branch(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        |ds| async move { schema::drop_columns(ds, &columns).await },
    )
    .await?;
    Ok(Json(AlterTableDropColumnsResponse {
        version: version as i64,
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct FieldMetadataBody {
    updates: Vec<schema::FieldMetadata>,
    branch: Option<String>,
}

pub async fn update_field_metadata(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<FieldMetadataBody>,
) -> Result<Json<UpdateFieldMetadataResponse>> {
    let access = (Level::Write, "updating field metadata");
    let updates = req.updates;
    let (version, fields) = on_branch(
        (&state, &ctx, &target),
        access,
        req.branch.as_deref(),
        |ds| async move { schema::update_field_metadata(ds, &updates).await },
    )
    .await?;
    Ok(Json(UpdateFieldMetadataResponse {
        version: version as i64,
        fields: Some(fields),
        ..Default::default()
    }))
}

pub async fn update_schema_metadata(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(q): QueryOf<BranchQuery>,
    JsonBody(metadata): JsonBody<HashMap<String, String>>,
) -> Result<Json<HashMap<String, String>>> {
    let access = (Level::Write, "updating schema metadata");
    let result = on_branch(
        (&state, &ctx, &target),
        access,
        q.branch.as_deref(),
        |ds| async move { schema::replace_schema_metadata(ds, metadata).await },
    )
    .await?;
    Ok(Json(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keys_repeat_or_come_joined() {
        let (o, branch) = merge_options(Some(
            "on=a&on=b,c&when_matched_update_all=true&timeout=5m&branch=dev",
        ))
        .unwrap();
        assert_eq!(o.on, vec!["a", "b", "c"]);
        assert!(o.when_matched_update_all);
        assert!(!o.when_not_matched_insert_all);
        assert_eq!(o.timeout, Some(std::time::Duration::from_secs(300)));
        assert_eq!(branch.as_deref(), Some("dev"));
        assert!(merge_options(Some("on=a&use_index=maybe")).is_err());
        assert!(merge_options(Some("on=a&timeout=soon")).is_err());
    }

    #[test]
    fn create_modes_in_every_spelling() {
        assert_eq!(create_mode(None).unwrap(), CreateMode::Create);
        assert_eq!(create_mode(Some("exist_ok")).unwrap(), CreateMode::ExistOk);
        assert_eq!(create_mode(Some("ExistOk")).unwrap(), CreateMode::ExistOk);
        assert_eq!(
            create_mode(Some("OVERWRITE")).unwrap(),
            CreateMode::Overwrite
        );
        assert!(create_mode(Some("replace")).is_err());
    }
}
