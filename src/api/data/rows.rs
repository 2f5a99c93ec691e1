//! Row writes: CreateTable, InsertIntoTable, MergeInsertIntoTable, UpdateTable and
//! DeleteFromTable. Each is one Lance commit and answers the version it made.

use std::collections::HashMap;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use lance_namespace::models::{
    CreateTableResponse, DeleteFromTableResponse, InsertIntoTableResponse,
    MergeInsertIntoTableResponse, UpdateTableResponse,
};
use serde::Deserialize;

use super::{on_data, table};
use crate::access::{Ctx, Level};
use crate::api::extract::{JsonBody, QueryOf, Target};
use crate::api::fields::Request;
use crate::api::{AppState, detached};
use crate::data::write::{MergeOptions, Written};
use crate::data::{At, ipc, write};
use crate::error::{Code, Error, Result};
use crate::fields;

#[derive(Deserialize, Default)]
pub struct CreateQuery {
    mode: Option<String>,
    properties: Option<String>,
}
fields!(CreateQuery, "CreateTable", served: ["mode", "properties"], refused: [
    ("storage_options", "the gateway writes with its own access to the warehouse; storage options are vended beside locations, not taken from callers"),
]);

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
    query: QueryOf<CreateQuery>,
    body: Body,
) -> Response {
    // (LanceDB's remote client knows a create conflict only as a 400: `api::error`.)
    match create_table(state, ctx, target, query, body).await {
        Ok(created) => created.into_response(),
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
    if target.id.is_empty() {
        return Err(Error::invalid("the route needs a table id"));
    }
    let mode = create_mode(q.mode.as_deref())?;
    let properties = json_map("properties", q.properties.as_deref())?;
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
                    let location = crate::data::TableData::of(&record);
                    let written = on_data(&state, move |datasets| async move {
                        write::create(&datasets, &location, upload, true).await
                    })
                    .await?;
                    state
                        .catalog
                        .note_own_commit(&record, None, written.version);
                    return Ok((record, Some(written.version as i64)));
                }
            }
        }
        let record = state
            .catalog
            .declare_table(&ctx, &id, None, properties)
            .await?;
        let location = crate::data::TableData::of(&record);
        let written = on_data(&state, move |datasets| async move {
            write::create(&datasets, &location, upload, false).await
        })
        .await;
        match written {
            Ok(written) => {
                state
                    .catalog
                    .note_own_commit(&record, None, written.version);
                Ok((record, Some(written.version as i64)))
            }
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
fields!(InsertQuery, "InsertIntoTable", served: ["mode", "branch"]);

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
    let location = crate::data::TableData::of(&record);
    let branch = at.branch.clone();
    let write = on_data(&state, move |datasets| async move {
        write::insert(&datasets, &location, &at, upload, overwrite).await
    });
    // The upload is written as it arrives; when it breaks off or is not a whole Arrow
    // stream, the write commits nothing and the upload's fault is the answer.
    let (written, fed) = tokio::join!(write, feed.run());
    fed?;
    let written = written?;
    state
        .catalog
        .note_own_commit(&record, branch.as_deref(), written.version);
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

/// MergeInsertIntoTable's query string (parsed by hand: `on` may repeat).
#[derive(Deserialize, Default)]
struct MergeQuery;
fields!(MergeQuery, "MergeInsertIntoTable", served: [
    "on", "when_matched_update_all", "when_matched_update_all_filt",
    "when_not_matched_insert_all", "when_not_matched_by_source_delete",
    "when_not_matched_by_source_delete_filt", "timeout", "use_index", "branch",
]);

/// MergeInsert's query string: `on` may repeat (or come comma-joined).
fn merge_options(query: Option<&str>) -> Result<(MergeOptions, Option<String>)> {
    <MergeQuery as Request>::FIELDS.check_query(query)?;
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
    let location = crate::data::TableData::of(&record);
    let on_branch = at.branch.clone();
    let written: Written = on_data(&state, move |datasets| async move {
        write::merge_insert(&datasets, &location, &at, upload, options).await
    })
    .await?;
    state
        .catalog
        .note_own_commit(&record, on_branch.as_deref(), written.version);
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
fields!(UpdateBody, "UpdateTable", served: ["updates", "predicate", "branch"], refused: [
    ("properties", "UpdateTable changes rows; the table's properties are kept as declared"),
]);

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
    let location = crate::data::TableData::of(&record);
    let predicate = req.predicate;
    let branch = at.branch.clone();
    let written = on_data(&state, move |datasets| async move {
        write::update(&datasets, &location, &at, &updates, predicate.as_deref()).await
    })
    .await?;
    state
        .catalog
        .note_own_commit(&record, branch.as_deref(), written.version);
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
fields!(DeleteBody, "DeleteFromTable", served: ["predicate", "branch"]);

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
    let location = crate::data::TableData::of(&record);
    let branch = at.branch.clone();
    let written = on_data(&state, move |datasets| async move {
        write::delete(&datasets, &location, &at, &predicate).await
    })
    .await?;
    state
        .catalog
        .note_own_commit(&record, branch.as_deref(), written.version);
    Ok(Json(Deleted {
        spec: DeleteFromTableResponse {
            version: Some(written.version as i64),
            ..Default::default()
        },
        num_deleted_rows: written.deleted,
    }))
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
