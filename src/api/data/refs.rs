//! Versions, tags and branches: ListTableVersions, DescribeTableVersion, RestoreTable, the
//! tag routes and the branch routes. Lance keeps all of them with the data, so a table that
//! holds no data yet has none: lists are empty and what a request names is missing.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lance_namespace::models::{
    CreateTableBranchResponse, CreateTableTagResponse, DeleteTableBranchResponse,
    DeleteTableTagResponse, DescribeTableVersionResponse, GetTableTagVersionResponse,
    ListTableBranchesResponse, ListTableTagsResponse, ListTableVersionsResponse,
    RestoreTableResponse, UpdateTableTagResponse,
};
use serde::Deserialize;

use super::{absent, has_rows, on_branch, or_empty, table, table_with_data, with_dataset};
use crate::access::{Ctx, Level};
use crate::api::AppState;
use crate::api::extract::{Dialect, JsonBody, QueryOf, Target};
use crate::data::{At, refs};
use crate::error::{Error, Result};
use crate::fields;

/// A list route's paging, from the query (which wins) or the body: the spec puts it in the
/// query, and some clients send the request model as the body too.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct Paging {
    id: Option<Vec<String>>,
    page_token: Option<String>,
    limit: Option<usize>,
    descending: Option<bool>,
    branch: Option<String>,
}

impl Paging {
    fn or(self, body: Paging) -> Paging {
        Paging {
            id: body.id,
            page_token: self.page_token.or(body.page_token),
            limit: self.limit.or(body.limit),
            descending: self.descending.or(body.descending),
            branch: self.branch.or(body.branch),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct VersionPaging(Paging);
fields!(VersionPaging, "ListTableVersions", served: ["page_token", "limit", "descending", "branch"]);

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct NamePaging(Paging);
fields!(NamePaging, "ListTableTags", served: ["page_token", "limit"]);

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct BranchPaging(Paging);
fields!(BranchPaging, "ListTableBranches", served: ["page_token", "limit"]);

pub async fn list_versions(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    QueryOf(VersionPaging(q)): QueryOf<VersionPaging>,
    JsonBody(VersionPaging(body)): JsonBody<VersionPaging>,
) -> Result<Response> {
    target.check_body_id(body.id.as_ref())?;
    let q = q.or(body);
    let record = table(&state, &ctx, &target, Level::Read, "listing versions").await?;
    let at = At::of(None, q.branch.as_deref())?;
    let branch = at.branch.clone();
    let descending = q.descending.unwrap_or(false);
    // A table that holds no data yet has no versions (found by opening it, not by a listing
    // of its own: this is the read managed clients make before every commit).
    let read = || {
        let (token, limit) = (q.page_token.clone(), q.limit);
        with_dataset(&state, &record, at.clone(), move |dataset| async move {
            refs::list_versions(&dataset, descending, token.as_deref(), limit).await
        })
    };
    let (versions, next) = or_empty(
        after_log(&state, &record, branch.as_deref(), read, |(listed, _)| {
            listed.iter().map(|v| v.version as u64).max()
        })
        .await,
        Default::default,
    )?;
    if let Some(newest) = versions.iter().max_by_key(|v| v.version) {
        state.catalog.observe_version(
            &record,
            branch.as_deref(),
            newest.version as u64,
            newest.timestamp_millis,
        );
    }
    let answer = ListTableVersionsResponse {
        versions,
        page_token: next,
        ..Default::default()
    };
    if dialect == Dialect::LanceDbRemote {
        return Ok(Json(remote_versions(answer)?).into_response());
    }
    Ok(Json(answer).into_response())
}

/// `read`, after the table's commit log is settled (`catalog::log`), under managed
/// versioning: a version committed (alone or in a batch) but not yet at its final name is
/// published first, so the answer never names a manifest that is missing, and a batch is
/// seen whole or not at all. The log is read beside the dataset; only when settling it
/// published something is the dataset read again.
async fn after_log<T, F, Fut>(
    state: &AppState,
    record: &crate::catalog::records::TableRecord,
    branch: Option<&str>,
    read: F,
    newest: impl FnOnce(&T) -> Option<u64>,
) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    if !state.catalog.managed_versioning() {
        return read().await;
    }
    let (log, first) = state
        .catalog
        .settle_beside(record, branch, read(), |first| {
            first.as_ref().ok().and_then(newest)
        })
        .await;
    if log?.worked { read().await } else { first }
}

/// LanceDB's remote clients before 0.37.1 read each version's time as an RFC 3339
/// `timestamp` (newer ones take it or `timestamp_millis`).
fn remote_versions(answer: ListTableVersionsResponse) -> Result<serde_json::Value> {
    let mut body = serde_json::to_value(&answer)
        .map_err(|e| Error::internal("could not encode the versions", e))?;
    if let Some(versions) = body.get_mut("versions").and_then(|v| v.as_array_mut()) {
        for (entry, version) in versions.iter_mut().zip(&answer.versions) {
            let at = version
                .timestamp_millis
                .and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            if let (Some(at), Some(map)) = (at, entry.as_object_mut()) {
                map.insert("timestamp".into(), serde_json::Value::String(at));
            }
        }
    }
    Ok(body)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct VersionBody {
    id: Option<Vec<String>>,
    version: Option<i64>,
    branch: Option<String>,
}
fields!(VersionBody, "DescribeTableVersion", served: ["version", "branch"]);

pub async fn describe_version(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<VersionBody>,
) -> Result<Json<DescribeTableVersionResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let wanted = req.version;
    let record = table_with_data(
        (&state, &ctx, &target),
        (Level::Read, "describing a version"),
        || absent::version(wanted),
    )
    .await?;
    let at = At::of(req.version, req.branch.as_deref())?;
    let branch = at.branch.clone();
    let read = || {
        with_dataset(&state, &record, at.clone(), move |dataset| async move {
            Ok(refs::describe_version(&dataset))
        })
    };
    let version = after_log(&state, &record, branch.as_deref(), read, |v| {
        Some(v.version as u64)
    })
    .await?;
    Ok(Json(DescribeTableVersionResponse {
        version: Box::new(version),
        ..Default::default()
    }))
}

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct RestoreBody(VersionBody);
fields!(RestoreBody, "RestoreTable", served: ["version", "branch"]);

pub async fn restore(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(RestoreBody(req)): JsonBody<RestoreBody>,
) -> Result<Json<RestoreTableResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let version = req
        .version
        .ok_or_else(|| Error::invalid("restore needs a version"))?;
    let record = table_with_data((&state, &ctx, &target), (Level::Admin, "restoring"), || {
        absent::version(Some(version))
    })
    .await?;
    let at = At::of(Some(version), req.branch.as_deref())?;
    let branch = at.branch.clone();
    let made = with_dataset(&state, &record, at, refs::restore).await?;
    state
        .catalog
        .note_own_commit(&record, branch.as_deref(), made);
    Ok(Json(RestoreTableResponse::default()))
}

pub async fn list_tags(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    dialect: Dialect,
    QueryOf(NamePaging(q)): QueryOf<NamePaging>,
    JsonBody(NamePaging(body)): JsonBody<NamePaging>,
) -> Result<Response> {
    target.check_body_id(body.id.as_ref())?;
    let q = q.or(body);
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

/// A tag's name: GetTableTagVersion and DeleteTableTag.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TagName {
    id: Option<Vec<String>>,
    tag: Option<String>,
}
fields!(TagName, "GetTableTagVersion", served: ["tag"]);

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct TagDelete(TagName);
fields!(TagDelete, "DeleteTableTag", served: ["tag"]);

fn tag_of(tag: Option<String>) -> Result<String> {
    tag.filter(|t| !t.trim().is_empty())
        .ok_or_else(|| Error::invalid("the request needs a tag"))
}

pub async fn tag_version(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagName>,
) -> Result<Json<GetTableTagVersionResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let tag = tag_of(req.tag)?;
    let missing = tag.clone();
    let access = (Level::Read, "reading a tag");
    let contents = on_branch(
        (&state, &ctx, &target),
        access,
        None,
        || absent::tag(&missing),
        |ds| async move { refs::tag_version(&ds, &tag).await },
    )
    .await?;
    Ok(Json(GetTableTagVersionResponse {
        version: contents.version,
        branch: contents.branch,
        ..Default::default()
    }))
}

/// CreateTableTag and UpdateTableTag.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TagSet {
    id: Option<Vec<String>>,
    tag: Option<String>,
    version: Option<i64>,
    branch: Option<String>,
}
fields!(TagSet, "CreateTableTag", served: ["tag", "version", "branch"]);

#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct TagUpdate(TagSet);
fields!(TagUpdate, "UpdateTableTag", served: ["tag", "version", "branch"]);

async fn set_tag(
    (state, ctx, target): (AppState, Ctx, Target),
    req: TagSet,
    update: bool,
) -> Result<()> {
    target.check_body_id(req.id.as_ref())?;
    let tag = tag_of(req.tag)?;
    let version = req
        .version
        .ok_or_else(|| Error::invalid("the request needs a version"))?;
    let branch = req.branch;
    if state.catalog.managed_versioning()
        && let Ok(number) = u64::try_from(version)
    {
        let record = state.catalog.describe_table(&ctx, &target.id).await?;
        state
            .catalog
            .refuse_if_being_deleted(&record, branch.as_deref(), number)
            .await?;
    }
    let missing = tag.clone();
    on_branch(
        (&state, &ctx, &target),
        (Level::Write, "tagging"),
        None,
        // Moving a tag that cannot exist, or tagging a version that cannot.
        move || {
            if update {
                absent::tag(&missing)
            } else {
                absent::version(Some(version))
            }
        },
        move |ds| async move { refs::set_tag(&ds, &tag, version, branch.as_deref(), update).await },
    )
    .await
}

pub async fn create_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<TagSet>,
) -> Result<Json<CreateTableTagResponse>> {
    set_tag((state, ctx, target), req, false).await?;
    Ok(Json(CreateTableTagResponse::default()))
}

pub async fn update_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(TagUpdate(req)): JsonBody<TagUpdate>,
) -> Result<Json<UpdateTableTagResponse>> {
    set_tag((state, ctx, target), req, true).await?;
    Ok(Json(UpdateTableTagResponse::default()))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(TagDelete(req)): JsonBody<TagDelete>,
) -> Result<Json<DeleteTableTagResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let tag = tag_of(req.tag)?;
    let missing = tag.clone();
    let access = (Level::Admin, "deleting a tag");
    on_branch(
        (&state, &ctx, &target),
        access,
        None,
        || absent::tag(&missing),
        |ds| async move { refs::delete_tag(&ds, &tag).await },
    )
    .await?;
    Ok(Json(DeleteTableTagResponse::default()))
}

pub async fn list_branches(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    QueryOf(BranchPaging(q)): QueryOf<BranchPaging>,
    JsonBody(BranchPaging(body)): JsonBody<BranchPaging>,
) -> Result<Json<ListTableBranchesResponse>> {
    target.check_body_id(body.id.as_ref())?;
    let q = q.or(body);
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
pub struct BranchCreate {
    id: Option<Vec<String>>,
    name: Option<String>,
    from_branch: Option<String>,
    from_version: Option<i64>,
}
fields!(BranchCreate, "CreateTableBranch", served: ["name", "from_branch", "from_version"]);

fn branch_name(name: Option<String>) -> Result<String> {
    name.filter(|n| !n.trim().is_empty())
        .ok_or_else(|| Error::invalid("the request needs a branch name"))
}

pub async fn create_branch(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchCreate>,
) -> Result<Json<CreateTableBranchResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let name = branch_name(req.name)?;
    let (from, from_version) = (req.from_branch.clone(), req.from_version);
    // A branch starts at a version (or another branch's), and a table without data has none.
    let record = table_with_data(
        (&state, &ctx, &target),
        (Level::Write, "branching"),
        move || match from.filter(|b| !b.is_empty() && b != "main") {
            Some(branch) => absent::branch(&branch),
            None => absent::version(from_version),
        },
    )
    .await?;
    let at = At::of(None, req.from_branch.as_deref())?;
    let from_version = At::of(req.from_version, None)?.version;
    let from_branch = at.branch.clone();
    if state.catalog.managed_versioning()
        && let Some(number) = from_version
    {
        state
            .catalog
            .refuse_if_being_deleted(&record, from_branch.as_deref(), number)
            .await?;
    }
    with_dataset(&state, &record, at, move |dataset| async move {
        refs::create_branch(dataset, &name, from_branch.as_deref(), from_version).await
    })
    .await?;
    Ok(Json(CreateTableBranchResponse::default()))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct BranchDelete {
    id: Option<Vec<String>>,
    name: Option<String>,
}
fields!(BranchDelete, "DeleteTableBranch", served: ["name"]);

pub async fn delete_branch(
    State(state): State<AppState>,
    ctx: Ctx,
    target: Target,
    JsonBody(req): JsonBody<BranchDelete>,
) -> Result<Json<DeleteTableBranchResponse>> {
    target.check_body_id(req.id.as_ref())?;
    let name = branch_name(req.name)?;
    let missing = name.clone();
    let access = (Level::Admin, "deleting a branch");
    on_branch(
        (&state, &ctx, &target),
        access,
        None,
        || absent::branch(&missing),
        |ds| async move { refs::delete_branch(ds, &name).await },
    )
    .await?;
    Ok(Json(DeleteTableBranchResponse::default()))
}
