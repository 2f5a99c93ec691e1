//! Reads: QueryTable (scans, vector search, full-text search), CountTableRows, the query
//! plan (explain and analyze) and GetTableStats.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType, Field};
use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::scanner::{ColumnOrdering, Scanner};
use lance::dataset::statistics::DatasetStatisticsExt;
use lance::index::DatasetIndexExt;
use lance::io::RecordBatchStream;
use lance_index::scalar::FullTextSearchQuery;
use lance_index::scalar::inverted::query::FtsQuery;
use lance_linalg::distance::DistanceType;
use serde::Deserialize;
use serde_json::Value;

use super::lance_error;
use crate::error::{Error, Result};

/// A QueryTableRequest, read leniently: `vector` may be absent, `null`, `{}`, a bare list or
/// a list of lists (LanceDB's remote client); `columns` may be a bare list of names.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Query {
    pub k: Option<i64>,
    pub vector: Option<Value>,
    pub vector_column: Option<String>,
    pub columns: Option<Value>,
    pub filter: Option<String>,
    pub prefilter: Option<bool>,
    pub full_text_query: Option<Value>,
    pub distance_type: Option<String>,
    pub ef: Option<i64>,
    pub nprobes: Option<i64>,
    pub minimum_nprobes: Option<i64>,
    pub maximum_nprobes: Option<i64>,
    pub refine_factor: Option<i64>,
    pub lower_bound: Option<f32>,
    pub upper_bound: Option<f32>,
    pub bypass_vector_index: Option<bool>,
    pub fast_search: Option<bool>,
    pub offset: Option<i64>,
    pub version: Option<i64>,
    pub with_row_id: Option<bool>,
    pub branch: Option<String>,
    /// The table the body names (checked against the path).
    pub id: Option<Vec<String>>,
    /// LanceDB's remote client: `[{column_name, ascending, nulls_first}]`.
    pub order_by: Option<Vec<Ordering>>,
    /// LanceDB's remote client; refused when set (see `check`).
    pub approx_mode: Option<Value>,
    pub use_lsm: Option<bool>,
}

/// One ordering column, as LanceDB's remote client writes it.
#[derive(Clone, Debug, Deserialize)]
pub struct Ordering {
    pub column_name: String,
    #[serde(default = "yes")]
    pub ascending: bool,
    #[serde(default)]
    pub nulls_first: bool,
}

fn yes() -> bool {
    true
}

/// Refuses what a query asks for that the gateway does not serve (also inside
/// ExplainTableQueryPlan's nested query, which the route's field check does not reach).
pub fn check(query: &Query) -> Result<()> {
    if query.approx_mode.as_ref().is_some_and(|m| !m.is_null()) {
        return Err(Error::invalid(
            "QueryTable does not serve the field `approx_mode`: only RQ-quantized indices (IVF_RQ) read it, and lance-gateway does not build them",
        ));
    }
    if query.use_lsm == Some(true) {
        return Err(Error::invalid(
            "QueryTable does not serve the field `use_lsm`: lance-gateway tables have no MemWAL (LSM) to read",
        ));
    }
    Ok(())
}

/// A `k` this large means "no limit".
const UNLIMITED: usize = 1 << 53;

/// How much one query may return.
#[derive(Clone, Copy, Debug)]
pub struct ResultLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
}

/// The query vector(s) a request carries, if any.
fn query_vectors(value: &Option<Value>) -> Result<Option<Vec<Vec<f32>>>> {
    let bad = |why: &str| Error::invalid(format!("bad query vector: {why}"));
    let floats = |v: &Value| -> Result<Vec<f32>> {
        v.as_array()
            .ok_or_else(|| bad("expected a list of numbers"))?
            .iter()
            .map(|x| {
                x.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| bad("expected numbers"))
            })
            .collect()
    };
    let value = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let vectors = match value {
        // LanceDB's pushed-down scans send `{"single_vector": []}`: no vector.
        Value::Object(map) => match (map.get("single_vector"), map.get("multi_vector")) {
            (Some(Value::Array(v)), _) if !v.is_empty() => vec![floats(&Value::Array(v.clone()))?],
            (_, Some(Value::Array(list))) if !list.is_empty() => {
                list.iter().map(floats).collect::<Result<_>>()?
            }
            (Some(v), _) if !v.is_null() && !v.is_array() => {
                return Err(bad("single_vector must be a list of numbers"));
            }
            _ => return Ok(None),
        },
        Value::Array(list) if list.is_empty() => return Ok(None),
        Value::Array(list) if list[0].is_array() => {
            list.iter().map(floats).collect::<Result<_>>()?
        }
        Value::Array(_) => vec![floats(value)?],
        _ => return Err(bad("expected an object or a list")),
    };
    if vectors.iter().any(Vec::is_empty) {
        return Err(bad("a vector must not be empty"));
    }
    Ok(Some(vectors))
}

/// The columns to return: plain names, and `alias -> expression` pairs.
fn projection(value: &Option<Value>) -> Result<Option<Vec<(String, String)>>> {
    let bad = || {
        Error::invalid(
            "columns must be a list of names, or {column_names: [...]} / {column_aliases: {alias: path}}",
        )
    };
    let names = |v: &Value| -> Result<Vec<(String, String)>> {
        v.as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|n| {
                n.as_str()
                    .map(|s| (s.to_string(), s.to_string()))
                    .ok_or_else(bad)
            })
            .collect()
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Array(_)) => Ok(Some(names(v)?)),
        // LanceDB's remote client sends aliases as a bare `{alias: expression}` map.
        Some(Value::Object(map))
            if !map.contains_key("column_names") && !map.contains_key("column_aliases") =>
        {
            let sorted: BTreeMap<_, _> = map.iter().collect();
            sorted
                .into_iter()
                .map(|(alias, path)| {
                    path.as_str()
                        .map(|p| (alias.clone(), p.to_string()))
                        .ok_or_else(bad)
                })
                .collect::<Result<Vec<_>>>()
                .map(|v| if v.is_empty() { None } else { Some(v) })
        }
        Some(Value::Object(map)) => {
            let mut out = Vec::new();
            if let Some(v) = map.get("column_names").filter(|v| !v.is_null()) {
                out.extend(names(v)?);
            }
            if let Some(v) = map.get("column_aliases").filter(|v| !v.is_null()) {
                let aliases = v.as_object().ok_or_else(bad)?;
                // Sorted, so the result's column order does not depend on the JSON map's.
                let sorted: BTreeMap<_, _> = aliases.iter().collect();
                for (alias, path) in sorted {
                    out.push((alias.clone(), path.as_str().ok_or_else(bad)?.to_string()));
                }
            }
            Ok(if out.is_empty() { None } else { Some(out) })
        }
        Some(_) => Err(bad()),
    }
}

/// The full-text query: `{string_query: {query, columns}}`, `{structured_query: {query:
/// FtsQuery}}`, or LanceDB's flat `{query, columns}`.
fn full_text(value: &Option<Value>) -> Result<Option<FullTextSearchQuery>> {
    let value = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) if map.is_empty() => return Ok(None),
        Some(v) => v,
    };
    let bad = |why: String| Error::invalid(format!("bad full_text_query: {why}"));
    let string_query = |v: &Value| -> Result<FullTextSearchQuery> {
        let text = v
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a string query needs `query`".into()))?;
        if let Some(fts) = debug_fts(text) {
            return Ok(FullTextSearchQuery::new_query(fts));
        }
        let query = FullTextSearchQuery::new(text.to_string());
        match v.get("columns").and_then(Value::as_array) {
            Some(columns) if !columns.is_empty() => {
                let columns: Vec<String> = columns
                    .iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect();
                query.with_columns(&columns).map_err(lance_error)
            }
            _ => Ok(query),
        }
    };
    if let Some(v) = value.get("string_query").filter(|v| !v.is_null()) {
        return string_query(v).map(Some);
    }
    if let Some(v) = value.get("structured_query").filter(|v| !v.is_null()) {
        let inner = v.get("query").unwrap_or(v);
        let fts: FtsQuery =
            serde_json::from_value(inner.clone()).map_err(|e| bad(e.to_string()))?;
        return Ok(Some(FullTextSearchQuery::new_query(fts)));
    }
    match value.get("query") {
        // LanceDB's remote client (server version 0.3 and up): `{query: FtsQuery}`.
        Some(inner @ Value::Object(_)) => {
            let fts: FtsQuery =
                serde_json::from_value(inner.clone()).map_err(|e| bad(e.to_string()))?;
            return Ok(Some(FullTextSearchQuery::new_query(fts)));
        }
        Some(_) => return string_query(value).map(Some),
        None => {}
    }
    Err(bad("expected string_query or structured_query".to_string()))
}

/// LanceDB 0.40, pushing a full-text search down to QueryTable, sends the query's Rust
/// debug text (`Match(MatchQuery { column: None, terms: "cats", ... })`) as a string query.
/// Searching for those words would answer nonsense, so match and phrase queries written that
/// way are read back into the query they describe.
fn debug_fts(text: &str) -> Option<FtsQuery> {
    use lance_index::scalar::inverted::query::{MatchQuery, Operator, PhraseQuery};
    let text = text.trim();
    let (phrase, body) = if let Some(body) = text.strip_prefix("Match(MatchQuery {") {
        (false, body)
    } else if let Some(body) = text.strip_prefix("Phrase(PhraseQuery {") {
        (true, body)
    } else {
        return None;
    };
    let terms = debug_string(body, "terms: ")?;
    let column = match debug_value(body, "column: ")? {
        "None" => None,
        _ => Some(debug_string(body, "column: Some(")?),
    };
    if phrase {
        let slop = debug_value(body, "slop: ")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        return Some(
            PhraseQuery::new(terms)
                .with_column(column)
                .with_slop(slop)
                .into(),
        );
    }
    let mut query = MatchQuery::new(terms).with_column(column);
    if let Some(boost) = debug_value(body, "boost: ").and_then(|v| v.parse().ok()) {
        query = query.with_boost(boost);
    }
    if let Some(fuzziness) = debug_value(body, "fuzziness: ") {
        let inner = fuzziness
            .strip_prefix("Some(")
            .and_then(|v| v.strip_suffix(')'));
        query = query.with_fuzziness(inner.and_then(|v| v.parse().ok()));
    }
    if let Some(n) = debug_value(body, "max_expansions: ").and_then(|v| v.parse().ok()) {
        query = query.with_max_expansions(n);
    }
    if let Some(n) = debug_value(body, "prefix_length: ").and_then(|v| v.parse().ok()) {
        query = query.with_prefix_length(n);
    }
    if debug_value(body, "operator: ") == Some("And") {
        query = query.with_operator(Operator::And);
    }
    Some(query.into())
}

/// The bare value after `key` in debug text, up to the next `,` or `}`.
fn debug_value<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let start = body.find(key)? + key.len();
    let rest = &body[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The quoted string after `key` in debug text, unescaped.
fn debug_string(body: &str, key: &str) -> Option<String> {
    let start = body.find(key)? + key.len();
    let mut chars = body[start..].chars();
    if chars.next()? != '"' {
        return None;
    }
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            other => out.push(other),
        }
    }
    None
}

fn positive(name: &str, value: Option<i64>) -> Result<Option<usize>> {
    match value {
        None => Ok(None),
        Some(v) if v < 0 => Err(Error::invalid(format!(
            "{name} must not be negative, got {v}"
        ))),
        Some(v) => Ok(Some(v as usize)),
    }
}

/// The first column holding float vectors, for a vector query that names none.
fn default_vector_column(dataset: &Dataset) -> Result<String> {
    let schema = arrow_schema::Schema::from(dataset.schema());
    schema
        .fields()
        .iter()
        .find(|f| match f.data_type() {
            DataType::FixedSizeList(inner, _) => inner.data_type().is_floating(),
            DataType::List(inner) => {
                matches!(inner.data_type(), DataType::FixedSizeList(i, _) if i.data_type().is_floating())
            }
            _ => false,
        })
        .map(|f| f.name().clone())
        .ok_or_else(|| {
            Error::invalid("the query has a vector but the table has no vector column")
        })
}

fn vector_array(mut vectors: Vec<Vec<f32>>) -> Result<Arc<dyn Array>> {
    if let [single] = vectors.as_mut_slice() {
        return Ok(Arc::new(Float32Array::from(std::mem::take(single))));
    }
    let dim = vectors.first().map_or(0, Vec::len);
    if vectors.iter().any(|v| v.len() != dim) {
        return Err(Error::invalid(
            "the vectors of a multi-vector query must have one length",
        ));
    }
    let values = Float32Array::from(vectors.concat());
    let list = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        dim as i32,
        Arc::new(values),
        None,
    )
    .map_err(|e| Error::invalid("bad multi-vector query").with_detail(e.to_string()))?;
    Ok(Arc::new(list))
}

/// Builds the scanner a query describes. `limits.max_rows` caps what a query may ask for.
pub fn scanner(dataset: Arc<Dataset>, query: &Query, limits: ResultLimits) -> Result<Scanner> {
    let mut scan = dataset.scan();
    // LanceDB's remote client asks for "no limit" with k = isize::MAX.
    let k = positive("k", query.k)?.filter(|k| *k < UNLIMITED);
    let offset = positive("offset", query.offset)?;
    if let Some(k) = k
        && k > limits.max_rows
    {
        return Err(Error::invalid(format!(
            "k={k} is more than the limit of {} rows per query (max-query-rows)",
            limits.max_rows
        )));
    }
    let vectors = query_vectors(&query.vector)?;
    let fts = full_text(&query.full_text_query)?;
    if let Some(mut columns) = projection(&query.columns)? {
        // Searches answer their score column too; naming it keeps Lance from warning on
        // every query that it will stop adding it by itself.
        let score = if vectors.is_some() {
            Some("_distance")
        } else if fts.is_some() {
            Some("_score")
        } else {
            None
        };
        if let Some(score) = score
            && !columns.iter().any(|(alias, _)| alias == score)
        {
            columns.push((score.to_string(), score.to_string()));
        }
        if columns.iter().all(|(a, p)| a == p) {
            let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
            scan.project(&names).map_err(lance_error)?;
        } else {
            scan.project_with_transform(&columns).map_err(lance_error)?;
        }
    }
    if let Some(filter) = query.filter.as_deref().filter(|f| !f.trim().is_empty()) {
        scan.filter(filter).map_err(lance_error)?;
        // Clients filter before the search unless they say otherwise (LanceDB's default).
        scan.prefilter(query.prefilter.unwrap_or(true));
    }
    if let Some(vectors) = vectors {
        let column = match query.vector_column.as_deref().filter(|c| !c.is_empty()) {
            Some(c) => c.to_string(),
            None => default_vector_column(&dataset)?,
        };
        let array = vector_array(vectors)?;
        let wanted = k.unwrap_or(10) + offset.unwrap_or(0);
        scan.nearest(&column, array.as_ref(), wanted.max(1))
            .map_err(lance_error)?;
        if let Some(name) = query.distance_type.as_deref().filter(|d| !d.is_empty()) {
            let distance =
                DistanceType::try_from(name.to_ascii_lowercase().as_str()).map_err(|_| {
                    Error::invalid(format!(
                        "unknown distance_type '{name}' (use l2, cosine, dot or hamming)"
                    ))
                })?;
            scan.distance_metric(distance);
        }
        match (
            positive("minimum_nprobes", query.minimum_nprobes)?,
            positive("maximum_nprobes", query.maximum_nprobes)?,
        ) {
            (None, None) => {
                if let Some(n) = positive("nprobes", query.nprobes)?.filter(|n| *n > 0) {
                    scan.nprobes(n);
                }
            }
            (min, max) => {
                if let Some(min) = min {
                    scan.minimum_nprobes(min.max(1));
                }
                // 0 is LanceDB's "no maximum".
                if let Some(max) = max.filter(|m| *m > 0) {
                    scan.maximum_nprobes(max);
                }
            }
        }
        if let Some(ef) = positive("ef", query.ef)?.filter(|e| *e > 0) {
            scan.ef(ef);
        }
        if let Some(factor) = positive("refine_factor", query.refine_factor)?.filter(|f| *f > 0) {
            scan.refine(factor as u32);
        }
        if query.lower_bound.is_some() || query.upper_bound.is_some() {
            scan.distance_range(query.lower_bound, query.upper_bound);
        }
        if query.bypass_vector_index == Some(true) {
            scan.use_index(false);
        }
        if query.fast_search == Some(true) {
            scan.fast_search();
        }
        if offset.is_some() {
            scan.limit(k.map(|k| k as i64), offset.map(|o| o as i64))
                .map_err(lance_error)?;
        }
    } else if let Some(fts) = fts {
        let limit = k.filter(|k| *k > 0).unwrap_or(limits.max_rows);
        scan.full_text_search(fts.limit(Some((limit + offset.unwrap_or(0)) as i64)))
            .map_err(lance_error)?;
        scan.limit(Some(limit as i64), offset.map(|o| o as i64))
            .map_err(lance_error)?;
    } else {
        // A plain scan: `k` is its limit; without one, one row past the cap is read so an
        // answer that would be too large is refused rather than cut short.
        let limit = k.filter(|k| *k > 0).unwrap_or(limits.max_rows + 1);
        scan.limit(Some(limit as i64), offset.map(|o| o as i64))
            .map_err(lance_error)?;
    }
    if query.with_row_id == Some(true) {
        scan.with_row_id();
    }
    if let Some(order) = query.order_by.as_ref().filter(|o| !o.is_empty()) {
        let ordering = order
            .iter()
            .map(|o| ColumnOrdering {
                ascending: o.ascending,
                nulls_first: o.nulls_first,
                column_name: o.column_name.clone(),
            })
            .collect();
        scan.order_by(Some(ordering)).map_err(lance_error)?;
    }
    Ok(scan)
}

/// Results up to this size are answered whole (a limit met on the way is still a clean 400);
/// larger ones stream out as they are read, so the gateway never holds a large result.
const STREAM_AFTER_BYTES: usize = 8 * 1024 * 1024;

/// A query's answer: the whole Arrow IPC file, or its start and the rest still being read.
pub enum Answer {
    Whole(Vec<u8>),
    Streaming(ResultStream),
}

/// A result too large to hold, written out batch by batch.
pub struct ResultStream {
    schema: arrow_schema::SchemaRef,
    head: Vec<RecordBatch>,
    rest: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    rows: usize,
    bytes: usize,
    limits: ResultLimits,
}

fn too_many_rows(limits: ResultLimits) -> Error {
    Error::invalid(format!(
        "the result has more than {} rows (max-query-rows): add a filter or set k",
        limits.max_rows
    ))
}

fn too_many_bytes(limits: ResultLimits) -> Error {
    Error::invalid(format!(
        "the result is larger than {} bytes (max-query-bytes): select fewer columns or rows",
        limits.max_bytes
    ))
}

impl ResultStream {
    /// Counts a batch against the limits.
    fn admit(&mut self, batch: &RecordBatch) -> Result<()> {
        self.rows += batch.num_rows();
        self.bytes += batch.get_array_memory_size();
        if self.rows > self.limits.max_rows {
            return Err(too_many_rows(self.limits));
        }
        if self.bytes > self.limits.max_bytes {
            return Err(too_many_bytes(self.limits));
        }
        Ok(())
    }

    /// Writes the Arrow IPC file into `out`, a chunk per batch. Its status line is already
    /// sent, so a failure on the way (a limit crossed, the store failing) ends the body with
    /// an error: the client sees a broken transfer, never a file cut short.
    pub async fn send(mut self, out: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>) {
        let failed = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
        let mut writer = match FileWriter::try_new(Vec::new(), &self.schema) {
            Ok(w) => w,
            Err(e) => {
                let _ = out.send(Err(failed(&e))).await;
                return;
            }
        };
        let head = std::mem::take(&mut self.head);
        let mut pending = head.into_iter();
        loop {
            let batch = match pending.next() {
                Some(batch) => batch,
                None => match self.rest.next().await {
                    None => break,
                    Some(Ok(batch)) => {
                        if let Err(e) = self.admit(&batch) {
                            let _ = out.send(Err(failed(&e))).await;
                            return;
                        }
                        batch
                    }
                    Some(Err(e)) => {
                        let _ = out.send(Err(failed(&e))).await;
                        return;
                    }
                },
            };
            if let Err(e) = writer.write(&batch) {
                let _ = out.send(Err(failed(&e))).await;
                return;
            }
            let chunk = std::mem::take(writer.get_mut());
            if out.send(Ok(bytes::Bytes::from(chunk))).await.is_err() {
                return; // the client went away
            }
        }
        if let Err(e) = writer.finish() {
            let _ = out.send(Err(failed(&e))).await;
            return;
        }
        let tail = std::mem::take(writer.get_mut());
        let _ = out.send(Ok(bytes::Bytes::from(tail))).await;
    }
}

/// Runs a query. A plain scan without a limit is counted first, so one that would answer
/// more rows than allowed is refused before anything is sent.
pub async fn query(dataset: Arc<Dataset>, query: &Query, limits: ResultLimits) -> Result<Answer> {
    let unlimited = positive("k", query.k)?.is_none_or(|k| k == 0 || k >= UNLIMITED);
    let plain =
        query_vectors(&query.vector)?.is_none() && full_text(&query.full_text_query)?.is_none();
    if plain && unlimited {
        let matching = count_rows(&dataset, query.filter.as_deref()).await? as usize;
        let skipped = positive("offset", query.offset)?.unwrap_or(0);
        if matching.saturating_sub(skipped) > limits.max_rows {
            return Err(too_many_rows(limits));
        }
    }
    let scan = scanner(dataset, query, limits)?;
    let stream = scan.try_into_stream().await.map_err(lance_error)?;
    let schema = stream.schema();
    let mut answer = ResultStream {
        schema,
        head: Vec::new(),
        rest: stream.map_err(lance_error).boxed(),
        rows: 0,
        bytes: 0,
        limits,
    };
    while let Some(batch) = answer.rest.try_next().await? {
        answer.admit(&batch)?;
        answer.head.push(batch);
        if answer.bytes > STREAM_AFTER_BYTES {
            return Ok(Answer::Streaming(answer));
        }
    }
    super::ipc::encode_file(&answer.schema, &answer.head).map(Answer::Whole)
}

/// The number of rows, or of rows matching `predicate`.
pub async fn count_rows(dataset: &Dataset, predicate: Option<&str>) -> Result<u64> {
    let predicate = predicate
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    dataset
        .count_rows(predicate)
        .await
        .map(|n| n as u64)
        .map_err(lance_error)
}

/// The query's physical plan (`analyze` runs it and reports what each step did).
pub async fn plan(
    dataset: Arc<Dataset>,
    query: &Query,
    limits: ResultLimits,
    verbose: bool,
    analyze: bool,
) -> Result<String> {
    let scan = scanner(dataset, query, limits)?;
    if analyze {
        scan.analyze_plan().await.map_err(lance_error)
    } else {
        scan.explain_plan(verbose).await.map_err(lance_error)
    }
}

/// Fragments with fewer rows than this count as small (worth compacting).
const SMALL_FRAGMENT_ROWS: usize = 100_000;

/// GetTableStats.
pub async fn stats(
    dataset: Arc<Dataset>,
) -> Result<lance_namespace::models::GetTableStatsResponse> {
    use lance_namespace::models::{FragmentStats, FragmentSummary, GetTableStatsResponse};
    let data = dataset.calculate_data_stats().await.map_err(lance_error)?;
    let total_bytes: u64 = data.fields.iter().map(|f| f.bytes_on_disk).sum();
    let mut lengths = Vec::new();
    for fragment in dataset.get_fragments() {
        lengths.push(fragment.count_rows(None).await.map_err(lance_error)?);
    }
    let num_rows: usize = lengths.iter().sum();
    let indices = dataset.load_indices().await.map_err(lance_error)?;
    let names: std::collections::BTreeSet<&str> = indices.iter().map(|i| i.name.as_str()).collect();
    lengths.sort_unstable();
    let pick = |q: f64| -> i64 {
        if lengths.is_empty() {
            return 0;
        }
        let i = ((lengths.len() - 1) as f64 * q).round() as usize;
        lengths[i] as i64
    };
    let summary = FragmentSummary {
        min: pick(0.0),
        max: pick(1.0),
        mean: if lengths.is_empty() {
            0
        } else {
            (num_rows / lengths.len()) as i64
        },
        p25: pick(0.25),
        p50: pick(0.5),
        p75: pick(0.75),
        p99: pick(0.99),
    };
    Ok(GetTableStatsResponse {
        total_bytes: total_bytes as i64,
        num_rows: num_rows as i64,
        num_indices: names.len() as i64,
        fragment_stats: Box::new(FragmentStats {
            num_fragments: lengths.len() as i64,
            num_small_fragments: lengths.iter().filter(|l| **l < SMALL_FRAGMENT_ROWS).count()
                as i64,
            lengths: Box::new(summary),
        }),
        ..Default::default()
    })
}

/// GetTableStats of a table that holds no data yet.
pub fn empty_stats() -> lance_namespace::models::GetTableStatsResponse {
    use lance_namespace::models::{FragmentStats, FragmentSummary, GetTableStatsResponse};
    GetTableStatsResponse {
        fragment_stats: Box::new(FragmentStats {
            lengths: Box::new(FragmentSummary::default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_vector_form_the_clients_send() {
        assert_eq!(query_vectors(&None).unwrap(), None);
        assert_eq!(query_vectors(&Some(json!(null))).unwrap(), None);
        assert_eq!(query_vectors(&Some(json!({}))).unwrap(), None);
        assert_eq!(
            query_vectors(&Some(json!({"single_vector": []}))).unwrap(),
            None
        );
        assert_eq!(
            query_vectors(&Some(json!({"single_vector": [1.0, 2.0]}))).unwrap(),
            Some(vec![vec![1.0, 2.0]])
        );
        assert_eq!(
            query_vectors(&Some(json!([1, 2]))).unwrap(),
            Some(vec![vec![1.0, 2.0]])
        );
        assert_eq!(
            query_vectors(&Some(json!({"multi_vector": [[1.0], [2.0]]})))
                .unwrap()
                .map(|v| v.len()),
            Some(2)
        );
        assert!(query_vectors(&Some(json!({"single_vector": ["a"]}))).is_err());
        assert!(query_vectors(&Some(json!("text"))).is_err());
    }

    #[test]
    fn columns_as_names_or_aliases() {
        assert_eq!(
            projection(&Some(json!(["a", "b"]))).unwrap().unwrap().len(),
            2
        );
        let p = projection(&Some(json!({"column_aliases": {"z": "a", "y": "b"}})))
            .unwrap()
            .unwrap();
        assert_eq!(p[0], ("y".to_string(), "b".to_string()));
        assert!(projection(&Some(json!(3))).is_err());
        let bare = projection(&Some(json!({"twice": "v * 2"})))
            .unwrap()
            .unwrap();
        assert_eq!(bare, vec![("twice".to_string(), "v * 2".to_string())]);
    }

    #[test]
    fn full_text_queries_string_and_structured() {
        assert!(full_text(&None).unwrap().is_none());
        assert!(
            full_text(&Some(json!({"string_query": {"query": "hello"}})))
                .unwrap()
                .is_some()
        );
        assert!(
            full_text(&Some(
                json!({"structured_query": {"query": {"match": {"terms": "hello", "column": "text"}}}})
            ))
            .unwrap()
            .is_some()
        );
        assert!(full_text(&Some(json!({"structured_query": {"query": {"nope": 1}}}))).is_err());
    }

    #[test]
    fn lancedb_debug_text_reads_back_as_the_query_it_describes() {
        let q = debug_fts(r#"Match(MatchQuery { column: Some("te\"xt"), terms: "cats and \"dogs\"", boost: 2.0, fuzziness: Some(1), max_expansions: 50, operator: And, prefix_length: 0, document_granularity: None })"#).unwrap();
        match q {
            FtsQuery::Match(m) => {
                assert_eq!(m.terms, "cats and \"dogs\"");
                assert_eq!(m.column.as_deref(), Some("te\"xt"));
                assert_eq!(m.fuzziness, Some(1));
                assert_eq!(m.boost, 2.0);
                assert_eq!(
                    m.operator,
                    lance_index::scalar::inverted::query::Operator::And
                );
            }
            other => panic!("{other:?}"),
        }
        let q = debug_fts(r#"Phrase(PhraseQuery { column: None, terms: "a b", slop: 2, document_granularity: None })"#).unwrap();
        assert!(
            matches!(q, FtsQuery::Phrase(p) if p.terms == "a b" && p.slop == 2 && p.column.is_none())
        );
        assert!(debug_fts("plain words").is_none());
        assert!(debug_fts("Match(MatchQuery { column: None })").is_none());
    }
}
