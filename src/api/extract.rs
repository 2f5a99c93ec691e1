//! Extractors for what every route takes: the `{id}` path segment with its delimiter, the
//! query string, and a JSON body that clients may send absent, as `null` or as an object.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::request::Parts;

use super::fields::Request as Fields;
use crate::catalog::names::{self, DEFAULT_DELIMITER, Id};
use crate::error::{Error, Result};

/// The object a request names: its id (from the path) and the delimiter it was written with.
#[derive(Clone, Debug)]
pub struct Target {
    pub id: Id,
    pub delimiter: String,
}

impl Target {
    pub fn show(&self) -> String {
        names::join(&self.id, &self.delimiter)
    }

    /// Checks a body's `id` against the path's: the spec wants 400 when they differ. A body
    /// id whose parts joined with the delimiter spell the path's id names the same object:
    /// DuckDB's Lance extension (1.5.5) sends `["ml$docs"]`, one part holding the
    /// delimiter, for the path `ml%24docs`.
    pub fn check_body_id(&self, body_id: Option<&Vec<String>>) -> Result<()> {
        match body_id {
            Some(id)
                if *id != self.id
                    && names::join(id, &self.delimiter)
                        != names::join(&self.id, &self.delimiter) =>
            {
                Err(Error::invalid(format!(
                    "the body names {:?} but the path names {:?}",
                    id, self.id
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The `delimiter` query parameter, default `$`.
pub fn delimiter_of(query: Option<&str>) -> Result<String> {
    let delimiter = query
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "delimiter")
                .map(|(_, v)| v.into_owned())
        })
        .unwrap_or_else(|| DEFAULT_DELIMITER.to_string());
    if delimiter.is_empty() {
        return Err(Error::invalid(
            "the delimiter query parameter must not be empty",
        ));
    }
    Ok(delimiter)
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        // Every route with an {id} is `/v1/<object>/{id}/...`. The segment is read from the
        // raw path, still percent-encoded: a `+` must become a space *before* decoding, or a
        // literal `+` (sent as `%2B`) could not be told from a space.
        let raw = parts
            .uri
            .path()
            .split('/')
            .nth(3)
            .map(str::to_string)
            .ok_or_else(|| Error::invalid("the route has no {id}"))?;
        let delimiter = delimiter_of(parts.uri.query())?;
        let id = names::parse_path_id(&raw, &delimiter)?;
        Ok(Target { id, delimiter })
    }
}

/// The `{index_name}` segment of `/v1/table/{id}/index/{index_name}/...`, decoded as the id
/// is (the Lance client encodes both alike: a space as `+`). A name that does not decode is
/// InvalidInput, as JSON, like every other refusal.
pub struct IndexName(pub String);

impl<S: Send + Sync> FromRequestParts<S> for IndexName {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        let raw = parts
            .uri
            .path()
            .split('/')
            .nth(5)
            .ok_or_else(|| Error::invalid("the route has no {index_name}"))?;
        let name = names::decode_path_segment(raw)?;
        if name.is_empty() {
            return Err(Error::invalid("the index name must not be empty"));
        }
        Ok(IndexName(name))
    }
}

/// The `{id}` of `/v1/transaction/{id}/...`: one decoded segment (a transaction id is not
/// split on the delimiter).
pub struct TransactionId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for TransactionId {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        let raw = parts
            .uri
            .path()
            .split('/')
            .nth(3)
            .ok_or_else(|| Error::invalid("the route has no transaction {id}"))?;
        Ok(TransactionId(names::decode_percent(raw)?))
    }
}

/// Query parameters: a field the operation does not serve is refused (`api::fields`),
/// unknown keys are tolerated; a bad value is InvalidInput.
pub struct QueryOf<T>(pub T);

impl<S: Send + Sync, T: Fields> FromRequestParts<S> for QueryOf<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        T::FIELDS.check_query(parts.uri.query())?;
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query)
            .map(QueryOf)
            .map_err(|e| Error::invalid(format!("bad query string: {e}")))
    }
}

/// A JSON body; an absent body or a literal `null` reads as the default value. A field the
/// operation does not serve is refused (`api::fields`).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: Fields> FromRequest<S> for JsonBody<T> {
    type Rejection = Error;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            Error::invalid("the request body could not be read").with_detail(e.body_text())
        })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| Error::invalid("the request body is not UTF-8"))?
            .trim();
        if text.is_empty() || text == "null" {
            return Ok(JsonBody(T::default()));
        }
        T::FIELDS.check_json(text)?;
        serde_json::from_str(text).map(JsonBody).map_err(|e| {
            Error::invalid("the request body is not the JSON this operation takes")
                .with_detail(e.to_string())
        })
    }
}

/// Reads a boolean flag that may arrive in the query (which wins) or in the body.
pub fn flag(query: Option<bool>, body: Option<bool>, default: bool) -> bool {
    query.or(body).unwrap_or(default)
}

/// Which client family a request comes from, where the two answer differently: LanceDB's
/// remote client (`lancedb.connect("db://...", host_override=...)`, which names its database
/// in `x-lancedb-database`) reads a few answers in its own shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Spec,
    LanceDbRemote,
}

/// The header LanceDB's remote client names its database in.
pub const LANCEDB_DATABASE: &str = "x-lancedb-database";

impl Dialect {
    pub fn of(headers: &axum::http::HeaderMap) -> Self {
        if headers.contains_key(LANCEDB_DATABASE) {
            Dialect::LanceDbRemote
        } else {
            Dialect::Spec
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Dialect {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        Ok(Dialect::of(&parts.headers))
    }
}

/// The `Idempotency-Key` header of a commit (`catalog::idempotency`): the name a client gives
/// a commit so that a retry answers the first attempt's outcome. Checked when the route pairs
/// it with its request (`Idempotency::key`).
#[derive(Clone, Debug, Default)]
pub struct Idempotency(pub Option<String>);

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

impl<S: Send + Sync> FromRequestParts<S> for Idempotency {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self> {
        match parts.headers.get(IDEMPOTENCY_KEY) {
            None => Ok(Idempotency(None)),
            Some(value) => value
                .to_str()
                .map(|v| Idempotency(Some(v.to_string())))
                .map_err(|_| Error::invalid("the Idempotency-Key header must be visible ASCII")),
        }
    }
}

impl Idempotency {
    /// The key, checked, with the fingerprint of `request` (what the route does, `op`).
    pub fn key<T: serde::Serialize>(
        &self,
        op: &str,
        request: &T,
    ) -> Result<Option<crate::catalog::idempotency::Key>> {
        self.0
            .as_deref()
            .map(|name| {
                crate::catalog::idempotency::Key::new(
                    name,
                    crate::catalog::idempotency::fingerprint(op, request),
                )
            })
            .transpose()
    }
}
