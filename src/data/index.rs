//! Indices: create (vector, scalar and full-text, with their build parameters), list, stats
//! and drop.

use lance::Dataset;
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexType;
use lance_index::scalar::{BuiltinIndexType, InvertedIndexParams, ScalarIndexParams};
use lance_index::vector::hnsw::builder::HnswBuildParams;
use lance_index::vector::ivf::IvfBuildParams;
use lance_index::vector::pq::PQBuildParams;
use lance_index::vector::sq::builder::SQBuildParams;
use lance_linalg::distance::DistanceType;
use lance_namespace::models::{
    CreateTableIndexRequest, DescribeTableIndexStatsResponse, IndexContent,
};

use super::lance_error;
use crate::error::{Code, Error, Result};

fn non_negative(name: &str, value: Option<i32>) -> Result<Option<usize>> {
    match value {
        None => Ok(None),
        Some(v) if v < 0 => Err(Error::invalid(format!(
            "{name} must not be negative, got {v}"
        ))),
        Some(0) => Ok(None),
        Some(v) => Ok(Some(v as usize)),
    }
}

fn distance(req: &CreateTableIndexRequest) -> Result<DistanceType> {
    match req.distance_type.as_deref().filter(|d| !d.is_empty()) {
        None => Ok(DistanceType::L2),
        Some(name) => DistanceType::try_from(name.to_ascii_lowercase().as_str()).map_err(|_| {
            Error::invalid(format!(
                "unknown distance_type '{name}' (use l2, cosine, dot or hamming)"
            ))
        }),
    }
}

/// Sets `field` from a request's value when it gives one (zero means the default).
fn set(field: &mut usize, name: &str, value: Option<i32>) -> Result<()> {
    if let Some(v) = non_negative(name, value)? {
        *field = v;
    }
    Ok(())
}

fn ivf(req: &CreateTableIndexRequest) -> Result<IvfBuildParams> {
    let mut ivf = IvfBuildParams::default();
    if let Some(n) = non_negative("num_partitions", req.num_partitions)? {
        ivf.num_partitions = Some(n);
    } else if let Some(size) = non_negative("target_partition_size", req.target_partition_size)? {
        ivf.target_partition_size = Some(size);
    }
    set(&mut ivf.max_iters, "max_iterations", req.max_iterations)?;
    set(&mut ivf.sample_rate, "sample_rate", req.sample_rate)?;
    Ok(ivf)
}

fn pq(req: &CreateTableIndexRequest) -> Result<PQBuildParams> {
    let mut pq = PQBuildParams::default();
    set(
        &mut pq.num_sub_vectors,
        "num_sub_vectors",
        req.num_sub_vectors,
    )?;
    set(&mut pq.num_bits, "num_bits", req.num_bits)?;
    set(&mut pq.max_iters, "max_iterations", req.max_iterations)?;
    set(&mut pq.sample_rate, "sample_rate", req.sample_rate)?;
    Ok(pq)
}

fn hnsw(req: &CreateTableIndexRequest) -> Result<HnswBuildParams> {
    let mut hnsw = HnswBuildParams::default();
    set(&mut hnsw.m, "m", req.m)?;
    set(
        &mut hnsw.ef_construction,
        "ef_construction",
        req.ef_construction,
    )?;
    Ok(hnsw)
}

/// A full-text index's parameters, read from the request body by Lance's own parser, so
/// every parameter Lance knows is served (the spec names eight; LanceDB's remote client
/// sends all of Lance's). `None` unless the request builds a full-text index. A
/// `max_token_length` of 0 (or less) is the spec clients' "no limit".
pub fn fts_params(body: &serde_json::Value) -> Result<Option<InvertedIndexParams>> {
    let kind = body
        .get("index_type")
        .and_then(|v| v.as_str())
        .and_then(index_kind);
    if kind != Some("FTS") {
        return Ok(None);
    }
    let mut fields = body.as_object().cloned().unwrap_or_default();
    fields.retain(|_, v| !v.is_null());
    if fields
        .get("max_token_length")
        .and_then(|v| v.as_i64())
        .is_some_and(|n| n <= 0)
    {
        fields.remove("max_token_length");
    }
    if fields
        .get("base_tokenizer")
        .and_then(|v| v.as_str())
        .is_some_and(str::is_empty)
    {
        fields.remove("base_tokenizer");
    }
    // The spec writes the language by name ("English", "french"): set through Lance's
    // builder, which reads names in any case.
    let language = match fields.remove("language") {
        Some(serde_json::Value::String(l)) if !l.is_empty() => Some(l),
        Some(serde_json::Value::String(_)) | None => None,
        Some(other) => {
            return Err(Error::invalid(format!(
                "language must be a language's name, got {other}"
            )));
        }
    };
    let mut params: InvertedIndexParams = serde_json::from_value(fields.into())
        .map_err(|e| Error::invalid("bad full-text index parameters").with_detail(e.to_string()))?;
    if let Some(language) = language {
        params = params.language(&language).map_err(lance_error)?;
    }
    Ok(Some(params))
}

/// Index types a request may name, in the spellings clients use.
fn index_kind(name: &str) -> Option<&'static str> {
    Some(
        match name.to_ascii_uppercase().replace(['-', ' '], "_").as_str() {
            "BTREE" | "SCALAR" => "BTREE",
            "BITMAP" => "BITMAP",
            "LABEL_LIST" | "LABELLIST" => "LABEL_LIST",
            "FTS" | "INVERTED" => "FTS",
            "IVF_FLAT" => "IVF_FLAT",
            "IVF_PQ" | "VECTOR" => "IVF_PQ",
            "IVF_HNSW_SQ" => "IVF_HNSW_SQ",
            "IVF_HNSW_PQ" => "IVF_HNSW_PQ",
            "IVF_SQ" => "IVF_SQ",
            _ => return None,
        },
    )
}

/// What an index request builds, checked against the table: Lance's kind of index (as
/// `index_kind` names it), its name and its column.
pub struct Planned {
    pub kind: &'static str,
    pub name: String,
    pub column: String,
}

/// Checks a request against `dataset` before anything is built: the column is there, the
/// index type is known (and scalar, with `scalar_only`), its parameters are valid, and an
/// index of the same name is there only with `replace`.
pub async fn plan(
    dataset: &Dataset,
    req: &CreateTableIndexRequest,
    scalar_only: bool,
    replace: bool,
) -> Result<Planned> {
    let column = req.column.trim();
    if column.is_empty() {
        return Err(Error::invalid("create_index needs a column"));
    }
    if dataset.schema().field(column).is_none() {
        return Err(Error::new(
            Code::TableColumnNotFound,
            format!("column '{column}' is not in the table"),
        ));
    }
    let kind = index_kind(&req.index_type).ok_or_else(|| {
        Error::invalid(format!(
            "unknown index_type '{}' (use BTREE, BITMAP, LABEL_LIST, FTS, IVF_FLAT, IVF_SQ, IVF_PQ, IVF_HNSW_SQ or IVF_HNSW_PQ)",
            req.index_type
        ))
    })?;
    if scalar_only && kind.starts_with("IVF") {
        return Err(Error::invalid(format!(
            "create_scalar_index cannot build a {kind} index: use create_index"
        )));
    }
    if kind.starts_with("IVF") {
        distance(req)?;
        ivf(req)?;
        pq(req)?;
        hnsw(req)?;
    }
    let name = req
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| format!("{column}_idx"));
    if !replace {
        let indices = dataset.load_indices().await.map_err(lance_error)?;
        if indices.iter().any(|i| i.name == name) {
            return Err(Error::new(
                Code::TableIndexAlreadyExists,
                format!("index '{name}' already exists"),
            ));
        }
    }
    Ok(Planned {
        kind,
        name,
        column: column.to_string(),
    })
}

/// What a Ray job (`jobs/lance_gateway_ray/index.py`) is told to build for a request
/// planned as `planned`: the column, the type as pylance names it, the name, and the
/// parameters the request gave, under pylance's names.
pub fn job_options(
    req: &CreateTableIndexRequest,
    planned: &Planned,
    fts: Option<&InvertedIndexParams>,
) -> Result<serde_json::Value> {
    let mut params = serde_json::Map::new();
    if planned.kind == "FTS" {
        if let Some(fts) = fts {
            let given = serde_json::to_value(fts)
                .map_err(|e| Error::internal("could not write full-text parameters", e))?;
            if let serde_json::Value::Object(given) = given {
                params.extend(given.into_iter().filter(|(_, v)| !v.is_null()));
            }
        }
    } else if planned.kind.starts_with("IVF") {
        let metric = req
            .distance_type
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("l2")
            .to_ascii_lowercase();
        params.insert("metric".into(), metric.into());
        for (name, value) in [
            ("num_partitions", req.num_partitions),
            ("target_partition_size", req.target_partition_size),
            ("num_sub_vectors", req.num_sub_vectors),
            ("num_bits", req.num_bits),
            ("sample_rate", req.sample_rate),
            ("max_iters", req.max_iterations),
            ("m", req.m),
            ("ef_construction", req.ef_construction),
        ] {
            if let Some(v) = value.filter(|v| *v > 0) {
                params.insert(name.into(), v.into());
            }
        }
    }
    let index_type = if planned.kind == "FTS" {
        "INVERTED"
    } else {
        planned.kind
    };
    Ok(serde_json::json!({
        "column": planned.column,
        "index_type": index_type,
        "name": planned.name,
        "params": params,
    }))
}

/// Builds the index the request describes and answers the dataset version it made. An index
/// of the same name is rebuilt with `replace`, refused (TableIndexAlreadyExists) without.
/// `scalar_only` refuses vector index types (CreateTableScalarIndex).
pub async fn create(
    mut dataset: Dataset,
    req: &CreateTableIndexRequest,
    fts: Option<InvertedIndexParams>,
    scalar_only: bool,
    replace: bool,
) -> Result<u64> {
    let Planned { kind, name, column } = plan(&dataset, req, scalar_only, replace).await?;
    let name = Some(name);
    let column = column.as_str();
    let columns = [column];
    let metric = distance(req)?;
    let created = match kind {
        "BTREE" | "BITMAP" | "LABEL_LIST" => {
            let (builtin, index_type) = match kind {
                "BTREE" => (BuiltinIndexType::BTree, IndexType::BTree),
                "BITMAP" => (BuiltinIndexType::Bitmap, IndexType::Bitmap),
                _ => (BuiltinIndexType::LabelList, IndexType::LabelList),
            };
            let params = ScalarIndexParams::for_builtin(builtin);
            dataset
                .create_index(&columns, index_type, name, &params, replace)
                .await
        }
        "FTS" => {
            let params = fts.unwrap_or_default();
            dataset
                .create_index(&columns, IndexType::Inverted, name, &params, replace)
                .await
        }
        _ => {
            let (params, index_type) = match kind {
                "IVF_FLAT" => (
                    VectorIndexParams::with_ivf_flat_params(metric, ivf(req)?),
                    IndexType::IvfFlat,
                ),
                "IVF_SQ" => (
                    VectorIndexParams::with_ivf_sq_params(metric, ivf(req)?, sq(req)),
                    IndexType::IvfSq,
                ),
                "IVF_HNSW_SQ" => (
                    VectorIndexParams::with_ivf_hnsw_sq_params(
                        metric,
                        ivf(req)?,
                        hnsw(req)?,
                        sq(req),
                    ),
                    IndexType::IvfHnswSq,
                ),
                "IVF_HNSW_PQ" => (
                    VectorIndexParams::with_ivf_hnsw_pq_params(
                        metric,
                        ivf(req)?,
                        hnsw(req)?,
                        pq(req)?,
                    ),
                    IndexType::IvfHnswPq,
                ),
                _ => (
                    VectorIndexParams::with_ivf_pq_params(metric, ivf(req)?, pq(req)?),
                    IndexType::IvfPq,
                ),
            };
            dataset
                .create_index(&columns, index_type, name, &params, replace)
                .await
        }
    };
    created.map_err(lance_error)?;
    Ok(dataset.version().version)
}

fn sq(req: &CreateTableIndexRequest) -> SQBuildParams {
    let mut sq = SQBuildParams::default();
    if let Some(rate) = req.sample_rate.filter(|r| *r > 0) {
        sq.sample_rate = rate as usize;
    }
    sq
}

/// Whether an index named `name` was committed at or after `since_ms` (unix ms); one whose
/// time Lance did not record counts.
pub async fn made_since(dataset: &Dataset, name: &str, since_ms: i64) -> Result<bool> {
    let indices = dataset.load_indices().await.map_err(lance_error)?;
    Ok(indices.iter().any(|i| {
        i.name == name
            && i.created_at
                .is_none_or(|at| at.timestamp_millis() >= since_ms)
    }))
}

/// Every index of the dataset, by name.
pub async fn list(dataset: &Dataset) -> Result<Vec<IndexContent>> {
    let descriptions = dataset.describe_indices(None).await.map_err(lance_error)?;
    let total = dataset.count_rows(None).await.map_err(lance_error)? as i64;
    let mut out = Vec::with_capacity(descriptions.len());
    for d in descriptions {
        let columns = d
            .field_ids()
            .iter()
            .filter_map(|id| dataset.schema().field_by_id(*id as i32))
            .map(|f| f.name.clone())
            .collect();
        let segments = d.metadata();
        let first = segments.first();
        let indexed = d.rows_indexed() as i64;
        out.push(IndexContent {
            index_name: d.name().to_string(),
            index_uuid: first.map(|s| s.uuid.to_string()).unwrap_or_default(),
            columns,
            status: "Ready".into(),
            index_type: Some(spec_index_type(d.index_type())),
            type_url: Some(d.type_url().to_string()),
            num_indexed_rows: Some(indexed),
            num_unindexed_rows: Some((total - indexed).max(0)),
            size_bytes: d.total_size_bytes().map(|b| b as i64),
            num_segments: Some(segments.len() as i32),
            created_at: first.and_then(|s| s.created_at).map(|t| t.to_rfc3339()),
            index_version: first.map(|s| s.index_version),
            index_details: d.details().ok(),
        });
    }
    out.sort_by(|a, b| a.index_name.cmp(&b.index_name));
    Ok(out)
}

/// Lance's name for an index type, in the spec's spelling (which LanceDB reads too).
fn spec_index_type(lance: &str) -> String {
    match index_kind(lance) {
        Some(kind) => kind.to_string(),
        None => lance.to_ascii_uppercase(),
    }
}

fn not_found(name: &str) -> Error {
    Error::new(
        Code::TableIndexNotFound,
        format!("index '{name}' not found"),
    )
}

/// DescribeTableIndexStats.
pub async fn stats(dataset: &Dataset, name: &str) -> Result<DescribeTableIndexStatsResponse> {
    let index = list(dataset)
        .await?
        .into_iter()
        .find(|i| i.index_name == name)
        .ok_or_else(|| not_found(name))?;
    let raw = dataset.index_statistics(name).await.map_err(lance_error)?;
    let stats: serde_json::Value = serde_json::from_str(&raw).unwrap_or_default();
    // Vector indices report their metric per segment.
    let distance_type = [Some(&stats), stats.pointer("/indices/0")]
        .into_iter()
        .flatten()
        .find_map(|s| s.get("distance_type").or_else(|| s.get("metric_type")))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Ok(DescribeTableIndexStatsResponse {
        distance_type,
        index_type: index.index_type,
        num_indexed_rows: index.num_indexed_rows,
        num_unindexed_rows: index.num_unindexed_rows,
        num_indices: index.num_segments,
        ..Default::default()
    })
}

/// Loads index `name` into the gateway's cache (the Lance session every request shares), so
/// the searches after it do not wait for it.
pub async fn prewarm(dataset: &Dataset, name: &str) -> Result<()> {
    let exists = dataset
        .load_indices()
        .await
        .map_err(lance_error)?
        .iter()
        .any(|i| i.name == name);
    if !exists {
        return Err(not_found(name));
    }
    dataset.prewarm_index(name).await.map_err(lance_error)
}

/// Drops index `name`; answers the version that made.
pub async fn drop(mut dataset: Dataset, name: &str) -> Result<u64> {
    let exists = dataset
        .load_indices()
        .await
        .map_err(lance_error)?
        .iter()
        .any(|i| i.name == name);
    if !exists {
        return Err(not_found(name));
    }
    dataset.drop_index(name).await.map_err(lance_error)?;
    Ok(dataset.version().version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_types_in_the_clients_spellings() {
        assert_eq!(index_kind("ivf_pq"), Some("IVF_PQ"));
        assert_eq!(index_kind("IVF-HNSW-SQ"), Some("IVF_HNSW_SQ"));
        assert_eq!(index_kind("Inverted"), Some("FTS"));
        assert_eq!(index_kind("LabelList"), Some("LABEL_LIST"));
        assert_eq!(index_kind("RTREE2"), None);
    }

    fn planned(kind: &'static str, column: &str) -> Planned {
        Planned {
            kind,
            name: format!("{column}_idx"),
            column: column.into(),
        }
    }

    #[test]
    fn a_ray_job_is_told_the_index_in_pylances_names() {
        // A vector build: the distance as pylance's metric, the parameters given under
        // pylance's names, the ones left at zero (the spec clients' "default") left out.
        let req = CreateTableIndexRequest {
            column: "vec".into(),
            index_type: "ivf_pq".into(),
            distance_type: Some("Cosine".into()),
            num_partitions: Some(16),
            num_sub_vectors: Some(0),
            max_iterations: Some(5),
            ..Default::default()
        };
        let options = job_options(&req, &planned("IVF_PQ", "vec"), None).expect("options");
        assert_eq!(
            options,
            serde_json::json!({
                "column": "vec", "index_type": "IVF_PQ", "name": "vec_idx",
                "params": {"metric": "cosine", "num_partitions": 16, "max_iters": 5},
            })
        );
        // A full-text build is pylance's INVERTED, with the parameters Lance's parser read.
        let body =
            serde_json::json!({"column": "text", "index_type": "FTS", "with_position": true});
        let fts = fts_params(&body)
            .expect("parameters")
            .expect("a full-text build");
        let req = CreateTableIndexRequest {
            column: "text".into(),
            index_type: "FTS".into(),
            ..Default::default()
        };
        let options = job_options(&req, &planned("FTS", "text"), Some(&fts)).expect("options");
        assert_eq!(options["index_type"], "INVERTED");
        assert_eq!(options["params"]["with_position"], true);
        assert!(
            options["params"].get("base_tokenizer").is_some(),
            "{options}"
        );
        // A scalar build has no parameters to pass.
        let req = CreateTableIndexRequest {
            column: "id".into(),
            index_type: "BTREE".into(),
            num_partitions: Some(4),
            ..Default::default()
        };
        let options = job_options(&req, &planned("BTREE", "id"), None).expect("options");
        assert_eq!(options["params"], serde_json::json!({}));
    }
}
