//! Indices: CreateTableIndex, CreateTableScalarIndex (built under a transaction, see
//! `api::transaction::supervised`), ListTableIndices, DescribeTableIndexStats and
//! DropTableIndex.

use axum::Json;
use axum::extract::State;
use lance_namespace::models::{
    CreateTableIndexRequest, CreateTableIndexResponse, DescribeTableIndexStatsResponse,
    DropTableIndexResponse, ListTableIndicesResponse,
};
use serde::Deserialize;
use serde_json::Value;

use super::{absent, committing, has_rows, table, table_with_data, with_dataset};
use crate::access::{Ctx, Level};
use crate::api::AppState;
use crate::api::extract::{IndexName, JsonBody, QueryOf, Target};
use crate::data::{At, index};
use crate::error::{Code, Error, Result};
use crate::fields;

/// CreateTableIndexRequest, plus what LanceDB's remote client sends beside it: the distance
/// as `metric_type`, `replace` (default true: an index of the same name is rebuilt), and a
/// full-text index's parameters as Lance names them (every one of them is Lance's own, and
/// read by Lance's own parser).
#[derive(Default)]
pub struct IndexBody {
    req: CreateTableIndexRequest,
    metric_type: Option<String>,
    replace: Option<bool>,
    /// The whole body, for the full-text parameters.
    raw: Value,
}

impl<'de> Deserialize<'de> for IndexBody {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        let req = CreateTableIndexRequest::deserialize(&raw).map_err(serde::de::Error::custom)?;
        let text = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_string);
        Ok(IndexBody {
            metric_type: text("metric_type"),
            replace: raw.get("replace").and_then(Value::as_bool),
            req,
            raw,
        })
    }
}

fields!(IndexBody, "CreateTableIndex", served: [
    "branch", "column", "index_type", "name", "distance_type", "num_partitions",
    "num_sub_vectors", "num_bits", "sample_rate", "max_iterations", "target_partition_size",
    "m", "ef_construction", "with_position", "base_tokenizer", "language",
    "max_token_length", "lower_case", "stem", "remove_stop_words", "ascii_folding",
    // LanceDB's remote client.
    "metric_type", "replace",
    // Full-text parameters beyond the spec's, as Lance's own parser reads them.
    "analyzer", "lance_tokenizer", "custom_stop_words", "min_ngram_length",
    "max_ngram_length", "prefix_only", "block_size", "split_identifiers",
    "split_on_numerics", "preserve_original", "index_operators", "memory_limit_mb",
    "num_workers", "format_version", "document_granularity",
]);

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct ScalarIndexBody(IndexBody);
fields!(ScalarIndexBody, "CreateTableScalarIndex", served: [
    "branch", "column", "index_type", "name", "with_position", "base_tokenizer", "language",
    "max_token_length", "lower_case", "stem", "remove_stop_words", "ascii_folding",
    "metric_type", "replace",
    "analyzer", "lance_tokenizer", "custom_stop_words", "min_ngram_length",
    "max_ngram_length", "prefix_only", "block_size", "split_identifiers",
    "split_on_numerics", "preserve_original", "index_operators", "memory_limit_mb",
    "num_workers", "format_version", "document_granularity",
], refused: [
    ("distance_type", "a scalar index has no distance: use CreateTableIndex for vector indices"),
    ("num_partitions", "a scalar index has no partitions: use CreateTableIndex for vector indices"),
    ("num_sub_vectors", "a scalar index has no sub-vectors: use CreateTableIndex for vector indices"),
    ("num_bits", "a scalar index has no quantization: use CreateTableIndex for vector indices"),
    ("sample_rate", "a scalar index is not trained: use CreateTableIndex for vector indices"),
    ("max_iterations", "a scalar index is not trained: use CreateTableIndex for vector indices"),
    ("target_partition_size", "a scalar index has no partitions: use CreateTableIndex for vector indices"),
    ("m", "a scalar index has no graph: use CreateTableIndex for vector indices"),
    ("ef_construction", "a scalar index has no graph: use CreateTableIndex for vector indices"),
]);

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
    let column = req.column.trim().to_string();
    let record = table_with_data((&state, &ctx, &target), (Level::Write, "indexing"), || {
        absent::column(&column)
    })
    .await?;
    let at = At::of(None, req.branch.as_deref())?;
    // Lance's own default name, so the record names what the build makes.
    let name = req
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| format!("{}_idx", req.column.trim()));
    let fts = index::fts_params(&body.raw)?;
    let ray = on_ray(&state, &record, &at).await?;
    let mut before = crate::jobs::Figures::new();
    if ray.is_some() {
        // The record says where the work runs; the job is `ray::job_id` of its id.
        before.insert("executor".into(), "ray".into());
    }
    let (datasets, location) = (state.data.clone(), crate::data::TableData::of(&record));
    let catalog = state.catalog.clone();
    let runtime = state.data.runtime().clone();
    let work = move |transaction: &str| {
        let transaction = transaction.to_string();
        runtime.start(async move {
            let branch = at.branch.clone();
            let dataset = datasets.open(&location, &at).await?;
            if let Some(ray) = ray {
                // Checked here, so a request the build would refuse is refused the same.
                let planned = index::plan(&dataset, &req, scalar_only, replace).await?;
                let options = index::job_options(&req, &planned, fts.as_ref())?;
                return ray
                    .work(crate::ray::JobSpec {
                        task: "index",
                        table: &record.id,
                        transaction: &transaction,
                        options,
                    })
                    .await;
            }
            let made = index::create(dataset, &req, fts, scalar_only, replace).await?;
            catalog.note_own_commit(&record, branch.as_deref(), made);
            Ok(crate::jobs::Figures::from([(
                "version_after".to_string(),
                made.to_string(),
            )]))
        })
    };
    crate::api::transaction::supervised(&state, &target.id, ("create_index", &name), before, work)
        .await
}

/// The Ray cluster an index build on `record` at `at` runs on, if it leaves the gateway:
/// a cluster is configured, the build is on the table's main line (a job opens the table
/// as clients do, at its latest version), and the table has at least the rows its policy's
/// `maintenance.ray.min_rows` says.
async fn on_ray(
    state: &AppState,
    record: &crate::catalog::records::TableRecord,
    at: &At,
) -> Result<Option<std::sync::Arc<crate::ray::Ray>>> {
    let Some(ray) = state.ray.clone() else {
        return Ok(None);
    };
    if at.branch.is_some() || at.version.is_some() {
        return Ok(None);
    }
    let policy = state.catalog.table_policy(record).await?;
    let rows = with_dataset(state, record, at.clone(), |dataset| async move {
        dataset
            .count_rows(None)
            .await
            .map_err(crate::data::lance_error)
    })
    .await?;
    Ok((rows as u64 >= policy.ray.min_rows).then_some(ray))
}

/// Whether the index a stopped gateway was building was committed: an index of that name
/// made since the build started.
pub(crate) async fn index_committed(
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
    // A build on Ray: Ray's record of the job says.
    if let Some(settled) = crate::ray::settled(state.ray.as_ref(), &tx).await {
        return settled;
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
    JsonBody(ScalarIndexBody(req)): JsonBody<ScalarIndexBody>,
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
    id: Option<Vec<String>>,
    version: Option<i64>,
    branch: Option<String>,
    page_token: Option<String>,
    limit: Option<usize>,
}
fields!(IndexListBody, "ListTableIndices", served: ["version", "branch", "page_token", "limit"]);

pub async fn list_indices(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<IndexListBody>,
) -> Result<Json<ListTableIndicesResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let record = table(&state, &ctx, &target, Level::Read, "listing indices").await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    if !has_rows(&state, &record).await? {
        if at.version.is_some() {
            return Err(absent::version(req.version));
        }
        if let Some(branch) = &at.branch {
            return Err(absent::branch(branch));
        }
        return Ok(Json(ListTableIndicesResponse::default()));
    }
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

/// The index a body names must be the one the path names.
fn same_index(path: &str, body: Option<&str>) -> Result<()> {
    match body.filter(|b| !b.is_empty()) {
        Some(b) if b != path => Err(Error::invalid(format!(
            "the body names index '{b}' but the path names '{path}'"
        ))),
        _ => Ok(()),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct IndexStatsBody {
    id: Option<Vec<String>>,
    version: Option<i64>,
    branch: Option<String>,
    index_name: Option<String>,
}
fields!(IndexStatsBody, "DescribeTableIndexStats", served: ["version", "branch", "index_name"]);

pub async fn index_stats(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    IndexName(name): IndexName,
    JsonBody(req): JsonBody<IndexStatsBody>,
) -> Result<Json<DescribeTableIndexStatsResponse>> {
    target.check_body_id(req.id.as_ref())?;
    same_index(&name, req.index_name.as_deref())?;
    let missing = name.clone();
    let record = table_with_data(
        (&state, &ctx, &target),
        (Level::Read, "reading index stats"),
        || absent::index(&missing),
    )
    .await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let stats = with_dataset(&state, &record, at, move |dataset| async move {
        index::stats(&dataset, &name).await
    })
    .await?;
    Ok(Json(stats))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DropIndexQuery {
    branch: Option<String>,
}
fields!(DropIndexQuery, "DropTableIndex", served: ["branch"]);

/// DropTableIndex's body: the spec sends none, the Lance client its request model (with a
/// branch, if any, in the body).
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DropIndexBody {
    id: Option<Vec<String>>,
    branch: Option<String>,
    index_name: Option<String>,
}
fields!(DropIndexBody, "DropTableIndex", served: ["branch", "index_name"]);

pub async fn drop_index(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    IndexName(name): IndexName,
    QueryOf(q): QueryOf<DropIndexQuery>,
    JsonBody(body): JsonBody<DropIndexBody>,
) -> Result<Json<DropTableIndexResponse>> {
    target.check_body_id(body.id.as_ref())?;
    same_index(&name, body.index_name.as_deref())?;
    let branch = q.branch.or(body.branch);
    let access = (Level::Admin, "dropping an index");
    let missing = name.clone();
    committing(
        (&state, &ctx, &target),
        access,
        branch.as_deref(),
        || absent::index(&missing),
        |ds| async move { index::drop(ds, &name).await.map(|v| (v, ())) },
    )
    .await?;
    Ok(Json(DropTableIndexResponse::default()))
}

/// LanceDB's remote client's `prewarm_index` (`index/{name}/prewarm`): the index is loaded
/// into the gateway's cache, which every server-side search shares.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PrewarmBody {
    id: Option<Vec<String>>,
}
fields!(PrewarmBody, "PrewarmIndex", served: []);

pub async fn prewarm_index(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    IndexName(name): IndexName,
    JsonBody(req): JsonBody<PrewarmBody>,
) -> Result<Json<serde_json::Value>> {
    target.check_body_id(req.id.as_ref())?;
    let missing = name.clone();
    let record = table_with_data(
        (&state, &ctx, &target),
        (Level::Read, "prewarming an index"),
        || absent::index(&missing),
    )
    .await?;
    with_dataset(&state, &record, At::latest(), move |dataset| async move {
        index::prewarm(&dataset, &name).await
    })
    .await?;
    Ok(Json(serde_json::json!({})))
}
