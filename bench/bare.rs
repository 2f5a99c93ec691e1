//! A bare catalog for the benchmarks: the metadata routes the benchmark drives (create a
//! namespace, declare, describe, list tables), answered by axum from memory, with no store,
//! authentication, grants, audit or middleware. What this machine gives an HTTP server that
//! does nothing else, so the gateway's figures can be read against it (`bench/ab.py`).
//!
//! `bare --listen 127.0.0.1:PORT`

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Default)]
struct Tables {
    /// Declared tables by their joined id, with their locations.
    by_id: RwLock<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct Body {
    id: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Page {
    limit: Option<usize>,
    page_token: Option<String>,
}

/// The id a request names: the body's, else the path's split at `$`.
fn id_of(path: &str, body: Option<Json<Body>>) -> Vec<String> {
    body.and_then(|b| b.0.id)
        .unwrap_or_else(|| path.split('$').map(str::to_string).collect())
}

async fn declare(
    State(t): State<Arc<Tables>>,
    Path(path): Path<String>,
    body: Option<Json<Body>>,
) -> Result<Json<Value>, (StatusCode, Json<Value>)> {
    let id = id_of(&path, body);
    let location = format!("file:///bench/{}.lance", id.join("/"));
    let mut by_id = t.by_id.write().expect("lock");
    if by_id.contains_key(&path) {
        return Err((
            StatusCode::CONFLICT,
            Json(json!({"error": "exists", "code": 5})),
        ));
    }
    by_id.insert(path, location.clone());
    Ok(Json(
        json!({"location": location, "storage_options": {}, "managed_versioning": false}),
    ))
}

async fn describe(
    State(t): State<Arc<Tables>>,
    Path(path): Path<String>,
    body: Option<Json<Body>>,
) -> Result<Json<Value>, (StatusCode, Json<Value>)> {
    let id = id_of(&path, body);
    let location = t.by_id.read().expect("lock").get(&path).cloned();
    match location {
        Some(location) => {
            let (name, namespace) = id
                .split_last()
                .map(|(n, ns)| (n.clone(), ns.to_vec()))
                .unwrap_or_default();
            Ok(Json(json!({
                "table": name, "namespace": namespace, "location": location,
                "storage_options": {}, "properties": {}, "managed_versioning": false,
            })))
        }
        None => Err((
            StatusCode::NOT_FOUND,
            Json(json!({"error": "not found", "code": 4})),
        )),
    }
}

async fn list_tables(
    State(t): State<Arc<Tables>>,
    Path(path): Path<String>,
    Query(page): Query<Page>,
) -> Json<Value> {
    let prefix = format!("{path}$");
    let by_id = t.by_id.read().expect("lock");
    let after = page.page_token.map(|p| format!("{prefix}{p}"));
    let limit = page.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut names: Vec<String> = by_id
        .range(after.clone().unwrap_or_else(|| prefix.clone())..)
        .filter(|(k, _)| Some(*k) != after.as_ref())
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| k[prefix.len()..].to_string())
        .take(limit.saturating_add(1))
        .collect();
    let next = (names.len() > limit).then(|| {
        names.truncate(limit);
        names.last().cloned()
    });
    Json(json!({"tables": names, "page_token": next.flatten()}))
}

async fn create_namespace() -> Json<Value> {
    Json(json!({"properties": {}}))
}

async fn list_namespaces() -> Json<Value> {
    Json(json!({"namespaces": []}))
}

#[tokio::main]
async fn main() {
    let listen = std::env::args()
        .skip_while(|a| a != "--listen")
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2444".to_string());
    let app = Router::new()
        .route("/v1/namespace/{id}/create", post(create_namespace))
        .route("/v1/namespace/{id}/list", get(list_namespaces))
        .route("/v1/namespace/{id}/table/list", get(list_tables))
        .route("/v1/table/{id}/declare", post(declare))
        .route("/v1/table/{id}/describe", post(describe))
        .with_state(Arc::new(Tables::default()));
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| panic!("cannot bind {listen}: {e}"));
    axum::serve(listener, app).await.expect("serve");
}
