//! Table metadata routes: declare, register, describe, exists, list-all, drop, deregister,
//! rename.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use lance_namespace::models::{
    DeclareTableRequest, DeclareTableResponse, DeregisterTableRequest, DeregisterTableResponse,
    DescribeTableRequest, DescribeTableResponse, DropTableRequest, DropTableResponse,
    ListTablesResponse, RegisterTableRequest, RegisterTableResponse, RenameTableResponse,
    TableBasicStats, TableExistsRequest,
};
use serde::Deserialize;

use super::extract::{Dialect, JsonBody, QueryOf, Target, delimiter_of, flag};
use super::namespace::PageQuery;
use super::{AppState, detached};
use crate::access::Ctx;
use crate::catalog::records::TableRecord;
use crate::data::At;
use crate::error::{Code, Error, Result};
use crate::fields;

fields!(DeclareTableRequest, "DeclareTable", served: ["location", "vend_credentials", "properties"]);
fields!(RegisterTableRequest, "RegisterTable", served: ["location", "mode", "properties"]);
fields!(DescribeTableRequest, "DescribeTable", served: [
    "version", "tag", "branch", "with_table_uri", "load_detailed_metadata", "check_declared",
    "vend_credentials",
]);
fields!(TableExistsRequest, "TableExists", served: ["version"]);
fields!(DropTableRequest, "DropTable", served: []);
fields!(DeregisterTableRequest, "DeregisterTable", served: []);

/// ListAllTables (`GET /v1/table`). LanceDB's remote client sends the same request for the
/// root's `table_names()`, and LanceDB's own server answers it with the root namespace's own
/// tables, so that is what its dialect gets.
pub async fn list_all(
    State(state): State<AppState>,
    ctx: Ctx,
    uri: Uri,
    dialect: Dialect,
    QueryOf(q): QueryOf<PageQuery>,
) -> Result<Json<ListTablesResponse>> {
    let delimiter = delimiter_of(uri.query())?;
    let include_declared = q.include_declared.unwrap_or(true);
    let listing = if dialect == Dialect::LanceDbRemote {
        state
            .catalog
            .list_tables(&ctx, &[], q.token(), q.limit(), include_declared)
            .await?
    } else {
        state
            .catalog
            .list_all_tables(&ctx, &delimiter, q.token(), q.limit(), include_declared)
            .await?
    };
    Ok(Json(ListTablesResponse {
        tables: listing.items,
        page_token: listing.next,
        ..Default::default()
    }))
}

pub async fn declare(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DeclareTableRequest>,
) -> Result<Json<DeclareTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let location = req.location.filter(|l| !l.is_empty());
    let (catalog, id, change_ctx) = (state.catalog.clone(), target.id.clone(), ctx.clone());
    let properties = req.properties.unwrap_or_default();
    let record = detached(async move {
        catalog
            .declare_table(&change_ctx, &id, location.as_deref(), properties)
            .await
    })
    .await?;
    let level = state.catalog.access(&ctx, &record.id);
    let storage_options = state
        .vendor
        .options(&ctx, &record, level, req.vend_credentials.unwrap_or(true))
        .await?;
    Ok(Json(DeclareTableResponse {
        location: Some(record.location),
        storage_options: Some(storage_options),
        properties: Some(record.properties),
        managed_versioning: Some(state.catalog.managed_versioning()),
        ..Default::default()
    }))
}

pub async fn register(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<RegisterTableRequest>,
) -> Result<Json<RegisterTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    if req.location.trim().is_empty() {
        return Err(Error::invalid("register needs a location"));
    }
    let overwrite = match req
        .mode
        .as_deref()
        .map(|m| m.replace('_', "").to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("create") => false,
        Some("overwrite") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "unknown mode '{other}': use Create or Overwrite"
            )));
        }
    };
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let properties = req.properties.unwrap_or_default();
    let location = req.location;
    let record = detached(async move {
        catalog
            .register_table(&ctx, &id, &location, overwrite, properties)
            .await
    })
    .await?;
    Ok(Json(RegisterTableResponse {
        location: Some(record.location),
        properties: Some(record.properties),
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
pub struct DescribeQuery {
    with_table_uri: Option<bool>,
    load_detailed_metadata: Option<bool>,
    check_declared: Option<bool>,
    vend_credentials: Option<bool>,
}
fields!(DescribeQuery, "DescribeTable", served: [
    "with_table_uri", "load_detailed_metadata", "check_declared", "vend_credentials",
]);

pub async fn describe(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    QueryOf(q): QueryOf<DescribeQuery>,
    JsonBody(req): JsonBody<DescribeTableRequest>,
) -> Result<axum::response::Response> {
    target.check_body_id(req.id.as_ref())?;
    if req.tag.is_some() && (req.version.is_some() || req.branch.is_some()) {
        return Err(Error::invalid(
            "tag cannot be combined with version or branch",
        ));
    }
    let with_table_uri = flag(q.with_table_uri, req.with_table_uri, false);
    // LanceDB's remote client reads the version and schema from every describe.
    let detailed = flag(q.load_detailed_metadata, req.load_detailed_metadata, false)
        || dialect == Dialect::LanceDbRemote;
    let check_declared = flag(q.check_declared, req.check_declared, false);
    let vend = flag(q.vend_credentials, req.vend_credentials, true);
    let mut at = At::of(req.version, req.branch.as_deref())?;
    at.tag = req.tag.clone().filter(|t| !t.is_empty());

    let record = state.catalog.describe_table(&ctx, &target.id).await?;
    let level = state.catalog.access(&ctx, &record.id);
    let (table, namespace) = split(&record);
    let mut response = DescribeTableResponse {
        table: Some(table),
        namespace: Some(namespace),
        table_uri: with_table_uri.then(|| record.location.clone()),
        storage_options: Some(state.vendor.options(&ctx, &record, level, vend).await?),
        properties: Some(record.properties.clone()),
        managed_versioning: Some(state.catalog.managed_versioning()),
        location: Some(record.location.clone()),
        ..Default::default()
    };
    let at_ref = at.version.is_some() || at.branch.is_some() || at.tag.is_some();
    if check_declared || detailed || at_ref {
        let has_data = state.catalog.has_data(&record).await?;
        response.is_only_declared = Some(!has_data);
        if at_ref && !has_data {
            return Err(Error::new(
                crate::error::Code::TableVersionNotFound,
                "the table holds no versions yet",
            ));
        }
        if detailed && has_data {
            let details = if at_ref {
                let (datasets, location) =
                    (state.data.clone(), crate::data::TableData::of(&record));
                datasets
                    .runtime()
                    .clone()
                    .run(async move {
                        let dataset = datasets.open(&location, &at).await?;
                        crate::data::details(&dataset).await
                    })
                    .await?
            } else {
                state.catalog.dataset_details(&record).await?
            };
            response.version = Some(details.version);
            response.schema = details.schema.map(Box::new);
            response.stats = Some(Box::new(TableBasicStats {
                num_deleted_rows: details.num_deleted_rows as i32,
                num_fragments: details.num_fragments as i32,
            }));
            response.metadata = Some(details.metadata);
        }
    }
    if dialect == Dialect::LanceDbRemote {
        return remote_description(response);
    }
    if detailed {
        // What maintenance did to the table, beside the spec's fields (clients ignore
        // fields they do not know).
        let mut body = serde_json::to_value(&response)
            .map_err(|e| Error::internal("could not encode the description", e))?;
        if let Some(map) = body.as_object_mut() {
            map.insert(
                "maintenance".into(),
                maintenance_view(&state, &record).await?,
            );
        }
        return Ok(Json(body).into_response());
    }
    Ok(Json(response).into_response())
}

/// The table's maintenance as detailed describe shows it: its policy in force, who is
/// maintaining it now, and each task's last run.
async fn maintenance_view(
    state: &AppState,
    record: &crate::catalog::records::TableRecord,
) -> Result<serde_json::Value> {
    use crate::catalog::maintenance::Task;
    let (policy, upkeep) = tokio::join!(
        state.catalog.table_policy(record),
        state.catalog.upkeep(record)
    );
    let upkeep = upkeep?;
    let mut view = serde_json::Map::new();
    match policy {
        Ok(p) => {
            view.insert("enabled".into(), p.any().into());
            for (task, on) in [
                (Task::Compaction, p.compaction.enabled),
                (Task::Index, p.index.enabled),
                (Task::Cleanup, p.cleanup.enabled),
            ] {
                let last = upkeep.as_ref().and_then(|u| u.state.last_run(task));
                let mut entry = serde_json::json!({ "enabled": p.enabled && on });
                if let (Some(last), Some(map)) = (last, entry.as_object_mut()) {
                    map.insert(
                        "last_run_at".into(),
                        crate::audit::rfc3339(last.at_ms).into(),
                    );
                    map.insert(
                        "last_run".into(),
                        serde_json::to_value(last).unwrap_or_default(),
                    );
                }
                view.insert(task.name().into(), entry);
            }
        }
        Err(e) => {
            view.insert("enabled".into(), false.into());
            view.insert("error".into(), e.message.into());
        }
    }
    if let Some(holder) = upkeep.as_ref().and_then(|u| u.holder.as_ref())
        && !state.catalog.lapsed(holder)
    {
        view.insert("running_on".into(), holder.node.clone().into());
    }
    Ok(view.into())
}

/// LanceDB's remote client reads the schema in Lance's own JSON form (`string` where the
/// spec's form says `utf8`).
fn remote_description(response: DescribeTableResponse) -> Result<axum::response::Response> {
    let schema = match &response.schema {
        Some(json) => {
            let arrow = lance_namespace::schema::convert_json_arrow_schema(json)
                .map_err(|e| Error::internal("could not convert the schema", e))?;
            let lance = lance::arrow::json::JsonSchema::try_from(&arrow)
                .map_err(|e| Error::internal("could not convert the schema", e))?;
            Some(
                serde_json::to_value(lance)
                    .map_err(|e| Error::internal("could not convert the schema", e))?,
            )
        }
        None => None,
    };
    let mut body = serde_json::to_value(&response)
        .map_err(|e| Error::internal("could not encode the description", e))?;
    if let (Some(schema), Some(map)) = (schema, body.as_object_mut()) {
        map.insert("schema".into(), schema);
    }
    Ok(Json(body).into_response())
}

fn split(record: &TableRecord) -> (String, Vec<String>) {
    let (name, ns) = record
        .id
        .split_last()
        .map(|(n, ns)| (n.clone(), ns.to_vec()))
        .unwrap_or_default();
    (name, ns)
}

pub async fn exists(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TableExistsRequest>,
) -> Result<StatusCode> {
    target.check_body_id(req.id.as_ref())?;
    let record = state.catalog.describe_table(&ctx, &target.id).await?;
    // With a version: whether the table has it (a table that holds no data has none).
    if let Some(version) = req.version {
        let missing = || {
            Error::new(
                Code::TableNotFound,
                format!("table '{}' has no version {version}", target.show()),
            )
        };
        if !state.catalog.has_data(&record).await? {
            return Err(missing());
        }
        let at = At::of(Some(version), None)?;
        let (datasets, location) = (state.data.clone(), crate::data::TableData::of(&record));
        let found = datasets
            .runtime()
            .clone()
            .run(async move { datasets.open(&location, &at).await.map(|_| ()) })
            .await;
        match found {
            Err(e) if e.code == Code::TableVersionNotFound => return Err(missing()),
            other => other?,
        }
    }
    Ok(StatusCode::OK)
}

/// DropTable's extension: `?purge=true`, or the header `x-lance-gateway-purge: true`, deletes
/// the data at once instead of keeping the table for undrop. No client sends either by
/// itself: Spark's `DROP TABLE … PURGE` and LanceDB's `drop_table` send the same bare
/// DropTable (Spark's plain `DROP TABLE` is a DeregisterTable), but pylance's namespace
/// clients pass `context={"header.x-lance-gateway-purge": "true"}` on as the header.
#[derive(Deserialize, Default)]
pub struct DropQuery {
    purge: Option<bool>,
}
fields!(DropQuery, "DropTable", served: ["purge"]);

pub const PURGE_HEADER: &str = "x-lance-gateway-purge";

pub async fn drop(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    headers: axum::http::HeaderMap,
    QueryOf(q): QueryOf<DropQuery>,
    JsonBody(req): JsonBody<DropTableRequest>,
) -> Result<Json<DropTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let header = match headers
        .get(PURGE_HEADER)
        .map(|v| v.to_str().unwrap_or_default())
    {
        None => None,
        Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => Some(true),
        Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => Some(false),
        Some(v) => {
            return Err(Error::invalid(format!(
                "header {PURGE_HEADER}: '{v}' is not true or false"
            )));
        }
    };
    let purge = flag(q.purge, header, false);
    let (record, cleanup) =
        detached(async move { catalog.drop_table_later(&ctx, &id, purge).await }).await?;
    state.data.forget(&record.location);
    // The table is gone; its data is deleted after the answer, however large it is.
    if let Some(cleanup) = cleanup {
        let catalog = state.catalog.clone();
        tokio::spawn(async move { catalog.finish_cleanup(cleanup).await });
    }
    Ok(Json(DropTableResponse {
        id: Some(record.id),
        location: Some(record.location),
        properties: Some(record.properties),
        ..Default::default()
    }))
}

pub async fn deregister(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<DeregisterTableRequest>,
) -> Result<Json<DeregisterTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let record = detached(async move { catalog.drop_table(&ctx, &id, false).await }).await?;
    Ok(Json(DeregisterTableResponse {
        id: Some(record.id),
        location: Some(record.location),
        properties: Some(record.properties),
        ..Default::default()
    }))
}

/// RenameTable's body; `new_table_name` is required, so it is parsed here rather than
/// through the generated model (which would need a `Default` for an absent body).
/// LanceDB's remote client names the destination namespace `new_namespace`.
#[derive(Deserialize, Default)]
pub struct RenameBody {
    id: Option<Vec<String>>,
    new_table_name: Option<String>,
    new_namespace_id: Option<Vec<String>>,
    new_namespace: Option<Vec<String>>,
}
fields!(RenameBody, "RenameTable", served: ["new_table_name", "new_namespace_id", "new_namespace"]);

pub async fn rename(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<RenameBody>,
) -> Result<Json<RenameTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let name = req
        .new_table_name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::invalid("rename needs new_table_name"))?;
    crate::catalog::names::validate_name(&name)?;
    if let (Some(a), Some(b)) = (&req.new_namespace_id, &req.new_namespace)
        && a != b
    {
        return Err(Error::invalid(
            "new_namespace_id and new_namespace name different namespaces",
        ));
    }
    let mut new_id = match req.new_namespace_id.or(req.new_namespace) {
        Some(ns) => {
            crate::catalog::names::validate_id(&ns, &target.delimiter)?;
            ns
        }
        None => target.id[..target.id.len().saturating_sub(1)].to_vec(),
    };
    new_id.push(name);
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    detached(async move { catalog.rename_table(&ctx, &id, &new_id).await }).await?;
    Ok(Json(RenameTableResponse::default()))
}

/// The dropped tables of a namespace, kept for undrop (an extension: `GET
/// /v1/namespace/{id}/dropped_tables`, admin grant).
pub async fn list_dropped(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
) -> Result<Json<serde_json::Value>> {
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let dropped = detached(async move { catalog.list_dropped(&ctx, &id).await }).await?;
    Ok(Json(serde_json::json!({ "dropped": dropped })))
}

/// The body of UndropTable and PurgeDroppedTable (extensions).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct UndropRequest {
    /// Which drop of the name [default: the latest].
    drop_id: Option<String>,
    /// The id to undrop it under [default: its own].
    new_id: Option<Vec<String>>,
}
fields!(UndropRequest, "UndropTable", served: ["drop_id", "new_id"]);

/// UndropTable (an extension: `POST /v1/table/{id}/undrop`, admin grant, audited).
pub async fn undrop(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<UndropRequest>,
) -> Result<Json<serde_json::Value>> {
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let record = detached(async move {
        catalog
            .undrop_table(&ctx, &id, req.drop_id.as_deref(), req.new_id.as_deref())
            .await
    })
    .await?;
    Ok(Json(serde_json::json!({
        "id": record.id,
        "location": record.location,
        "properties": record.properties,
    })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    drop_id: Option<String>,
}
fields!(PurgeRequest, "PurgeDroppedTable", served: ["drop_id"]);

/// PurgeDroppedTable (an extension: `POST /v1/table/{id}/purge`, admin grant, audited):
/// deletes a dropped table's data now.
pub async fn purge(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<PurgeRequest>,
) -> Result<Json<serde_json::Value>> {
    let (catalog, id) = (state.catalog.clone(), target.id.clone());
    let purged = detached(async move {
        catalog
            .purge_dropped(&ctx, &id, req.drop_id.as_deref())
            .await
    })
    .await?;
    Ok(Json(serde_json::json!({
        "id": purged.table.id,
        "drop_id": purged.drop_id,
        "location": purged.table.location,
    })))
}
