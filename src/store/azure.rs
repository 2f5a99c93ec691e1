//! The Azure Blob store: `az://container/prefix`, over object_store's Azure client.
//!
//! Azure's conditional requests are ETag-based, as S3's are: create-if-absent is a Put
//! Blob with `If-None-Match: *`, replace-if-unchanged one with `If-Match`, both through
//! object_store's `put_opts`. object_store has no conditional delete, so that one request
//! (Delete Blob with `If-Match`) is made here, signed by object_store's own authorizer with
//! the store's credentials.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::azure::{AzureAuthorizer, MicrosoftAzure};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use reqwest::StatusCode;

use super::{Condition, Object, Page, Store, StoreError, StoreResult};

pub struct AzureStore {
    store: Arc<MicrosoftAzure>,
    account: String,
    /// The blob service's URL, up to and including the account in an emulator's path-style
    /// URL (`http://127.0.0.1:10000/devstoreaccount1`).
    service: url::Url,
    container: String,
    /// Empty, or ending in `/`.
    prefix: String,
    http: reqwest::Client,
}

fn quoted(etag: String) -> String {
    if etag.starts_with('"') || etag.is_empty() {
        etag
    } else {
        format!("\"{etag}\"")
    }
}

fn path(key: &str) -> StoreResult<Path> {
    Path::parse(key).map_err(|e| StoreError::Other(format!("'{key}' names no blob: {e}")))
}

impl AzureStore {
    /// The store as the gateway opens it: the account, its key (else object_store's chain:
    /// AZURE_* variables, a managed identity, the Azure CLI), and the blob endpoint (else
    /// Azure's for the account).
    pub fn connect(
        account: &str,
        key: Option<&str>,
        endpoint: Option<&str>,
        container: &str,
        prefix: &str,
    ) -> StoreResult<Self> {
        let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_account(account)
            .with_container_name(container);
        if let Some(key) = key {
            builder = builder.with_access_key(key);
        }
        if let Some(endpoint) = endpoint {
            builder = builder
                .with_endpoint(endpoint.trim_end_matches('/').to_string())
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let client = builder
            .build()
            .map_err(|e| StoreError::Other(format!("the Azure client: {e}")))?;
        let service = endpoint
            .map(|e| e.trim_end_matches('/').to_string())
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
        Self::new(Arc::new(client), account, &service, container, prefix)
    }

    pub fn new(
        store: Arc<MicrosoftAzure>,
        account: &str,
        service: &str,
        container: &str,
        prefix: &str,
    ) -> StoreResult<Self> {
        let service = url::Url::parse(service)
            .map_err(|e| StoreError::Other(format!("'{service}' is not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| StoreError::Other(format!("the HTTP client: {e}")))?;
        Ok(AzureStore {
            store,
            account: account.to_string(),
            service,
            container: container.to_string(),
            prefix: prefix.to_string(),
            http,
        })
    }

    fn blob(&self, key: &str) -> StoreResult<Path> {
        path(&format!("{}{key}", self.prefix))
    }

    fn error(&self, what: &str, err: object_store::Error) -> StoreError {
        match &err {
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => StoreError::PreconditionFailed,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => {
                StoreError::Denied(format!("Azure {what}: {err}"))
            }
            // Listings come back as generic errors that name Azure's code.
            other
                if [
                    "AuthenticationFailed",
                    "AuthorizationFailure",
                    "403 Forbidden",
                ]
                .iter()
                .any(|code| other.to_string().contains(code)) =>
            {
                StoreError::Denied(format!("Azure {what}: {other}"))
            }
            other => StoreError::Other(format!("Azure {what}: {other}")),
        }
    }

    /// Delete Blob with `If-Match`, which object_store does not make.
    async fn delete_if_match(&self, key: &str, etag: &str) -> StoreResult<()> {
        let mut url = self.service.clone();
        url.path_segments_mut()
            .map_err(|_| StoreError::Other("the Azure endpoint cannot take a path".into()))?
            .pop_if_empty()
            .push(&self.container)
            .extend(format!("{}{key}", self.prefix).split('/'));
        let mut request = axum::http::Request::builder()
            .method(axum::http::Method::DELETE)
            .uri(url.as_str())
            .header(axum::http::header::IF_MATCH, etag)
            .header(axum::http::header::CONTENT_LENGTH, "0")
            .body(object_store::client::HttpRequestBody::empty())
            .map_err(|e| StoreError::Other(format!("Azure delete: {e}")))?;
        let credential = self
            .store
            .credentials()
            .get_credential()
            .await
            .map_err(|e| StoreError::Other(format!("the Azure credentials failed: {e}")))?;
        AzureAuthorizer::new(&credential, &self.account)
            .try_authorize(&mut request)
            .map_err(|e| StoreError::Other(format!("signing an Azure delete: {e}")))?;
        let mut send = self.http.delete(request.uri().to_string());
        for (name, value) in request.headers() {
            send = send.header(name.as_str(), value.as_bytes());
        }
        let resp = send
            .send()
            .await
            .map_err(|e| StoreError::Other(format!("Azure delete: {e}")))?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND | StatusCode::PRECONDITION_FAILED | StatusCode::CONFLICT => {
                Err(StoreError::PreconditionFailed)
            }
            status => Err(StoreError::Other(format!(
                "Azure delete: {status}: {}",
                resp.text()
                    .await
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect::<String>()
            ))),
        }
    }

    /// One page of the container's listing.
    async fn list_page(
        &self,
        prefix: &str,
        offset: Option<&str>,
        token: Option<String>,
        max: usize,
        shallow: bool,
    ) -> StoreResult<object_store::list::PaginatedListResult> {
        let mut opts = PaginatedListOptions::default();
        opts.max_keys = Some(max.clamp(1, 5000));
        opts.page_token = token;
        opts.offset = offset.map(|o| format!("{}{o}", self.prefix));
        if shallow {
            opts.delimiter = Some("/".into());
        }
        let object_prefix = format!("{}{prefix}", self.prefix);
        self.store
            .list_paginated(Some(&object_prefix), opts)
            .await
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => {
                    StoreError::NoSuchBucket(self.container.clone())
                }
                // A listing's 404 comes back as a generic error naming Azure's code.
                other if other.to_string().contains("ContainerNotFound") => {
                    StoreError::NoSuchBucket(self.container.clone())
                }
                other => self.error("list", other),
            })
    }
}

#[async_trait]
impl Store for AzureStore {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        let blob = self.blob(key)?;
        match self.store.get(&blob).await {
            Ok(got) => {
                let etag = got.meta.e_tag.clone().unwrap_or_default();
                let body = got
                    .bytes()
                    .await
                    .map_err(|e| self.error(&format!("reading {key}"), e))?;
                Ok(Some(Object { body, etag }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("read", e)),
        }
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let blob = self.blob(key)?;
        let mode = match &cond {
            Condition::None => PutMode::Overwrite,
            Condition::IfAbsent => PutMode::Create,
            Condition::IfMatch(etag) => PutMode::Update(UpdateVersion {
                e_tag: Some(etag.clone()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&blob, PutPayload::from_bytes(body), opts)
            .await
        {
            Ok(done) => Ok(done.e_tag.unwrap_or_default()),
            Err(object_store::Error::NotFound { .. }) if matches!(cond, Condition::IfMatch(_)) => {
                Err(StoreError::PreconditionFailed)
            }
            Err(object_store::Error::NotFound { .. }) => {
                Err(StoreError::NoSuchBucket(self.container.clone()))
            }
            Err(e) => Err(self.error("write", e)),
        }
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        match &cond {
            Condition::None => match self.store.delete(&self.blob(key)?).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.error("delete", e)),
            },
            Condition::IfMatch(etag) => self.delete_if_match(key, etag).await,
            Condition::IfAbsent => Err(StoreError::Other("delete if absent makes no sense".into())),
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
            let got = self
                .list_page(prefix, start_after, token.take(), want, shallow)
                .await?;
            for meta in got.result.objects {
                let Some(key) = meta.location.as_ref().strip_prefix(&self.prefix) else {
                    continue;
                };
                if start_after.is_some_and(|a| key <= a) || !key.starts_with(prefix) {
                    continue;
                }
                if shallow && !super::is_shallow(prefix, key) {
                    continue;
                }
                if page.keys.len() == limit {
                    page.more = true;
                    return Ok(page);
                }
                page.keys.push(key.to_string());
                // A listing gives the ETag bare, a read or write quoted (as the header is):
                // the store's tags are the quoted form everywhere.
                page.etags.push(quoted(meta.e_tag.unwrap_or_default()));
            }
            match got.page_token {
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
            let got = self
                .list_page(prefix, None, token.take(), 5000, false)
                .await?;
            for meta in &got.result.objects {
                n += 1;
                bytes += meta.size;
            }
            match got.page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(Some((n, bytes))),
            }
        }
    }

    async fn check(&self) -> StoreResult<()> {
        self.list_page("", None, None, 1, true).await.map(|_| ())
    }
}
