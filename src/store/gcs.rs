//! The Google Cloud Storage store, over the JSON API: `gs://bucket/prefix`.
//!
//! Conditional requests are made with generation preconditions, and an object's "ETag" in
//! this store is its generation (a number GCS raises on every write):
//! - create-if-absent is an upload with `ifGenerationMatch=0`;
//! - replace-if-unchanged is an upload with `ifGenerationMatch=<generation>`;
//! - delete-if-unchanged names the generation twice, as `ifGenerationMatch` (the
//!   precondition GCS checks) and as `generation` (which fake-gcs-server, the emulator the
//!   suites run against, checks instead: it ignores preconditions on deletes).
//!
//! Why the JSON API and not object_store's GCS client (which speaks the XML API): the XML
//! API has no conditional delete, and fake-gcs-server honours preconditions only on JSON
//! uploads. The gateway's credentials still come from object_store (a service account
//! key, application default credentials or the metadata server, as its builder finds
//! them): this module only makes the requests.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::gcp::GcpCredentialProvider;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;

use super::{Condition, Object, Page, Store, StoreError, StoreResult};

/// Everything but the unreserved characters: an object name is one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Google's endpoint, used unless another (an emulator's) is configured.
pub const DEFAULT_BASE_URL: &str = "https://storage.googleapis.com";

/// How the gateway signs its requests.
#[derive(Clone)]
pub enum GcsAuth {
    /// No `Authorization` header: for an emulator.
    Anonymous,
    /// A bearer token from object_store's credential chain.
    Provider(GcpCredentialProvider),
}

impl GcsAuth {
    /// The token requests are sent with, or `None` for an anonymous store.
    pub async fn token(&self) -> StoreResult<Option<String>> {
        match self {
            GcsAuth::Anonymous => Ok(None),
            GcsAuth::Provider(p) => p
                .get_credential()
                .await
                .map(|c| Some(c.bearer.clone()))
                .map_err(|e| StoreError::Other(format!("the GCS credentials failed: {e}"))),
        }
    }
}

pub struct GcsStore {
    http: reqwest::Client,
    base: String,
    bucket: String,
    /// Empty, or ending in `/`.
    prefix: String,
    auth: GcsAuth,
}

#[derive(Deserialize)]
struct Item {
    name: String,
    #[serde(default)]
    generation: Option<String>,
    #[serde(default)]
    size: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listing {
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct Uploaded {
    generation: serde_json::Value,
}

/// `base` with `query` appended, each pair form-encoded.
fn with_query(base: &str, query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return base.to_string();
    }
    let pairs: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    format!("{base}?{pairs}")
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(body).map_err(|e| StoreError::Other(format!("GCS {what}: {e}")))
}

/// How many times a request that may be sent again is sent, at most.
const ATTEMPTS: u32 = 3;

impl GcsStore {
    pub fn new(base: &str, bucket: &str, prefix: &str, auth: GcsAuth) -> StoreResult<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| StoreError::Other(format!("the HTTP client: {e}")))?;
        Ok(GcsStore {
            http,
            base: base.trim_end_matches('/').to_string(),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            auth,
        })
    }

    fn object_url(&self, key: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base,
            self.bucket,
            utf8_percent_encode(&format!("{}{key}", self.prefix), SEGMENT)
        )
    }

    fn name_of(&self, object: &str) -> Option<String> {
        object.strip_prefix(&self.prefix).map(str::to_string)
    }

    /// Sends the request `make` builds, signed; again on a network error or a 5xx/429 when
    /// `idempotent` (a conditional write is sent once: the catalog reads a lost answer back).
    async fn send(
        &self,
        idempotent: bool,
        make: impl Fn() -> RequestBuilder,
    ) -> StoreResult<Response> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = make();
            if let Some(token) = self.auth.token().await? {
                req = req.bearer_auth(token);
            }
            let retry = match req.send().await {
                Ok(resp)
                    if idempotent
                        && attempt < ATTEMPTS
                        && (resp.status().is_server_error()
                            || resp.status() == StatusCode::TOO_MANY_REQUESTS) =>
                {
                    format!("{}", resp.status())
                }
                Ok(resp) => return Ok(resp),
                Err(e) if idempotent && attempt < ATTEMPTS => e.to_string(),
                Err(e) => return Err(StoreError::Other(format!("GCS: {e}"))),
            };
            tracing::debug!(attempt, %retry, "GCS request retried");
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
    }

    async fn failed(what: &str, resp: Response) -> StoreError {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        let message = format!(
            "GCS {what}: {status}: {}",
            body.chars().take(300).collect::<String>()
        );
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            StoreError::Denied(message)
        } else {
            StoreError::Other(message)
        }
    }

    /// One page of the bucket's listing under `prefix` (a store key prefix).
    async fn list_page(
        &self,
        prefix: &str,
        start_offset: Option<&str>,
        token: Option<&str>,
        max: usize,
        shallow: bool,
    ) -> StoreResult<Listing> {
        let object_prefix = format!("{}{prefix}", self.prefix);
        let url = format!("{}/storage/v1/b/{}/o", self.base, self.bucket);
        let mut query: Vec<(&str, String)> = vec![
            ("prefix", object_prefix),
            ("maxResults", max.clamp(1, 1000).to_string()),
        ];
        if shallow {
            query.push(("delimiter", "/".into()));
        }
        match (token, start_offset) {
            (Some(t), _) => query.push(("pageToken", t.to_string())),
            (None, Some(o)) => query.push(("startOffset", format!("{}{o}", self.prefix))),
            _ => {}
        }
        let url = with_query(&url, &query);
        let resp = self.send(true, || self.http.get(&url)).await?;
        match resp.status() {
            s if s.is_success() => {
                let body = resp
                    .bytes()
                    .await
                    .map_err(|e| StoreError::Other(format!("GCS listing: {e}")))?;
                parse("listing", &body)
            }
            StatusCode::NOT_FOUND => Err(StoreError::NoSuchBucket(self.bucket.clone())),
            _ => Err(Self::failed("list", resp).await),
        }
    }
}

#[async_trait]
impl Store for GcsStore {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        let url = with_query(&self.object_url(key), &[("alt", "media".to_string())]);
        let resp = self.send(true, || self.http.get(&url)).await?;
        match resp.status() {
            StatusCode::OK => {
                let generation = resp
                    .headers()
                    .get("x-goog-generation")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
                    .ok_or_else(|| {
                        StoreError::Other(format!("GCS gave {key} without its generation"))
                    })?;
                let body = resp
                    .bytes()
                    .await
                    .map_err(|e| StoreError::Other(format!("reading {key}: {e}")))?;
                Ok(Some(Object {
                    body,
                    etag: generation,
                }))
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(Self::failed("read", resp).await),
        }
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let url = format!("{}/upload/storage/v1/b/{}/o", self.base, self.bucket);
        let mut query = vec![
            ("uploadType", "media".to_string()),
            ("name", format!("{}{key}", self.prefix)),
        ];
        match &cond {
            Condition::None => {}
            Condition::IfAbsent => query.push(("ifGenerationMatch", "0".into())),
            Condition::IfMatch(generation) => {
                if generation.parse::<u64>().is_err() {
                    // Not a generation this store gave: it cannot match.
                    return Err(StoreError::PreconditionFailed);
                }
                query.push(("ifGenerationMatch", generation.clone()))
            }
        }
        let url = with_query(&url, &query);
        let resp = self
            .send(cond == Condition::None, || {
                self.http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
            })
            .await?;
        match resp.status() {
            s if s.is_success() => {
                let answer = resp
                    .bytes()
                    .await
                    .map_err(|e| StoreError::Other(format!("GCS upload answer: {e}")))?;
                let up: Uploaded = parse("upload answer", &answer)?;
                match up.generation {
                    serde_json::Value::String(g) => Ok(g),
                    serde_json::Value::Number(n) => Ok(n.to_string()),
                    other => Err(StoreError::Other(format!(
                        "GCS upload answer has no generation: {other}"
                    ))),
                }
            }
            StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => {
                Err(StoreError::PreconditionFailed)
            }
            StatusCode::NOT_FOUND if matches!(cond, Condition::IfMatch(_)) => {
                Err(StoreError::PreconditionFailed)
            }
            StatusCode::NOT_FOUND => Err(StoreError::NoSuchBucket(self.bucket.clone())),
            _ => Err(Self::failed("write", resp).await),
        }
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let url = self.object_url(key);
        let query: Vec<(&str, String)> = match &cond {
            Condition::None => vec![],
            Condition::IfMatch(generation) => {
                if generation.parse::<u64>().is_err() {
                    return Err(StoreError::PreconditionFailed);
                }
                vec![
                    ("ifGenerationMatch", generation.clone()),
                    ("generation", generation.clone()),
                ]
            }
            Condition::IfAbsent => {
                return Err(StoreError::Other("delete if absent makes no sense".into()));
            }
        };
        let url = with_query(&url, &query);
        let resp = self
            .send(cond == Condition::None, || {
                self.http.request(Method::DELETE, &url)
            })
            .await?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND if cond == Condition::None => Ok(()),
            StatusCode::NOT_FOUND | StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => {
                Err(StoreError::PreconditionFailed)
            }
            _ => Err(Self::failed("delete", resp).await),
        }
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let mut page = Page::default();
        let mut token: Option<String> = None;
        loop {
            let want = limit + 2 - page.keys.len();
            let listing = self
                .list_page(prefix, start_after, token.as_deref(), want, shallow)
                .await?;
            for item in listing.items {
                let Some(key) = self.name_of(&item.name) else {
                    continue;
                };
                if start_after.is_some_and(|a| key.as_str() <= a) || !key.starts_with(prefix) {
                    continue;
                }
                if shallow && !super::is_shallow(prefix, &key) {
                    continue;
                }
                if page.keys.len() == limit {
                    page.more = true;
                    return Ok(page);
                }
                page.keys.push(key);
                page.etags.push(item.generation.unwrap_or_default());
            }
            match listing.next_page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(page),
            }
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        super::delete_in_batches(self, prefix).await
    }

    async fn delete_batch(&self, prefix: &str, limit: usize) -> StoreResult<(u64, bool)> {
        super::delete_listed(self, prefix, limit).await
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut token: Option<String> = None;
        loop {
            let listing = self
                .list_page(prefix, None, token.as_deref(), 1000, false)
                .await?;
            for item in &listing.items {
                n += 1;
                bytes += item
                    .size
                    .as_deref()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            match listing.next_page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(Some((n, bytes))),
            }
        }
    }

    async fn check(&self) -> StoreResult<()> {
        let url = format!("{}/storage/v1/b/{}", self.base, self.bucket);
        let resp = self.send(true, || self.http.get(&url)).await?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND => Err(StoreError::NoSuchBucket(self.bucket.clone())),
            _ => Err(Self::failed("bucket check", resp).await),
        }
    }
}
