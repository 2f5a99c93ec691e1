//! The S3 store's reads of single objects, through Apache Arrow's `object_store` (the client
//! Lance reads and writes table data with, so it is in the binary already).
//!
//! Why a second client: a GET is most of what the catalog asks of the store (every describe,
//! every record, head and entry it reads), and the AWS SDK spends 2–3× the CPU of
//! `object_store` on one (`bench/s3_get.rs`: 267–377 against 113–137 µs a GET on SeaweedFS,
//! 2026-12-02), in its orchestrator, interceptors and per-request configuration. On a host the
//! gateway shares with its store, that CPU is taken from the store. Writes, deletes and
//! listings stay on the SDK: their conditions (`If-Match` on DeleteObject) and the crash and
//! fault suites' findings are tied to it, and they are not on the hot path.
//!
//! The reader signs with the gateway's own keys as the SDK resolves them (the whole AWS chain:
//! environment, profiles, SSO, process, web identity), cached until five minutes before they
//! expire.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsCredential};
use object_store::path::Path;
use object_store::{BackoffConfig, CredentialProvider, ObjectStoreExt, RetryConfig};

use super::{Object, StoreError, StoreResult};

/// How the store is reached: what the SDK client was configured with.
#[derive(Clone, Debug)]
pub struct S3Access {
    /// The endpoint URL; none for AWS itself (then from the region).
    pub endpoint: Option<String>,
    pub region: String,
    /// Path-style addressing (`endpoint/bucket/key`), else virtual-hosted.
    pub path_style: bool,
    /// The gateway's own keys; none sends unsigned requests.
    pub credentials: Option<SharedCredentialsProvider>,
}

/// The locks below guard plain caches (clients, keys) that a panic elsewhere cannot leave
/// half-written, so a poisoned lock is used as it stands rather than failing every read.
///
/// The most per-bucket clients kept at once.
const MAX_BUCKETS: usize = 256;

/// GETs of single objects, one `object_store` client per bucket.
pub struct Reader {
    access: S3Access,
    credentials: Option<Arc<SdkCredentials>>,
    buckets: RwLock<HashMap<String, Arc<AmazonS3>>>,
}

impl Reader {
    pub fn new(access: S3Access) -> Self {
        let credentials = access
            .credentials
            .clone()
            .map(|provider| Arc::new(SdkCredentials::new(provider)));
        Reader {
            access,
            credentials,
            buckets: RwLock::new(HashMap::new()),
        }
    }

    /// The client for `bucket`, made on first use.
    fn client(&self, bucket: &str) -> StoreResult<Arc<AmazonS3>> {
        if let Some(c) = self
            .buckets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(bucket)
        {
            return Ok(c.clone());
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&self.access.region)
            .with_virtual_hosted_style_request(!self.access.path_style)
            .with_allow_http(true)
            // A read is safe to resend; the SDK tried a GET three times, so does this.
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 2,
                retry_timeout: Duration::from_secs(10),
            });
        if let Some(endpoint) = &self.access.endpoint {
            builder =
                builder.with_endpoint(bucket_endpoint(endpoint, bucket, self.access.path_style)?);
        }
        builder = match &self.credentials {
            Some(c) => builder.with_credentials(c.clone()),
            None => builder.with_skip_signature(true),
        };
        let client = Arc::new(
            builder
                .build()
                .map_err(|e| StoreError::Other(format!("S3 reader for '{bucket}': {e}")))?,
        );
        let mut buckets = self.buckets.write().unwrap_or_else(PoisonError::into_inner);
        // Bucket names come from requests (endpoint mode): the map is kept small whatever
        // names callers send, and a missing bucket's client is dropped (in `get`).
        if buckets.len() >= MAX_BUCKETS {
            buckets.clear();
        }
        buckets.insert(bucket.to_string(), client.clone());
        Ok(client)
    }

    /// The object at `key` of `bucket`. `None` when `object_store` cannot name the key as it is
    /// (an empty segment, `.` or `..`, a control character, a slash at either end): the caller
    /// then reads it with the SDK.
    pub async fn get(&self, bucket: &str, key: &str) -> Option<StoreResult<Option<Object>>> {
        let path = Path::parse(key).ok().filter(|p| p.as_ref() == key)?;
        let client = match self.client(bucket) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let read = async {
            let got = client.get(&path).await?;
            let etag = got.meta.e_tag.clone().unwrap_or_default();
            let body = got.bytes().await?;
            Ok::<_, object_store::Error>(Object { body, etag })
        };
        Some(match read.await {
            Ok(object) => Ok(Some(object)),
            Err(object_store::Error::NotFound { source, .. }) => {
                // The body of a 404 names its S3 error code.
                if source.to_string().contains("<Code>NoSuchBucket</Code>") {
                    self.buckets
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(bucket);
                    Err(StoreError::NoSuchBucket(bucket.to_string()))
                } else {
                    Ok(None)
                }
            }
            Err(e) => Err(StoreError::Other(format!(
                "reading s3://{bucket}/{key}: {e}"
            ))),
        })
    }
}

/// The endpoint `object_store` is given for `bucket`: with virtual-hosted addressing, the
/// bucket's own host.
fn bucket_endpoint(endpoint: &str, bucket: &str, path_style: bool) -> StoreResult<String> {
    if path_style {
        return Ok(endpoint.to_string());
    }
    let bad = |e: url::ParseError| StoreError::Other(format!("S3 endpoint '{endpoint}': {e}"));
    let mut url = url::Url::parse(endpoint).map_err(bad)?;
    let host = url.host_str().unwrap_or_default().to_string();
    url.set_host(Some(&format!("{bucket}.{host}")))
        .map_err(bad)?;
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// The SDK's credential chain, seen by `object_store`: resolved once, then again when the keys
/// are five minutes from expiring.
#[derive(Debug)]
struct SdkCredentials {
    provider: SharedCredentialsProvider,
    current: RwLock<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

/// How long before their expiry keys are renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(300);

impl SdkCredentials {
    fn new(provider: SharedCredentialsProvider) -> Self {
        SdkCredentials {
            provider,
            current: RwLock::new(None),
        }
    }
}

#[async_trait]
impl CredentialProvider for SdkCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        if let Some((keys, expiry)) = &*self.current.read().unwrap_or_else(PoisonError::into_inner)
            && expiry.is_none_or(|at| SystemTime::now() + RENEW_BEFORE < at)
        {
            return Ok(keys.clone());
        }
        let resolved = self.provider.provide_credentials().await.map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }
        })?;
        let keys = Arc::new(AwsCredential {
            key_id: resolved.access_key_id().to_string(),
            secret_key: resolved.secret_access_key().to_string(),
            token: resolved.session_token().map(str::to_string),
        });
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            Some((keys.clone(), resolved.expiry()));
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_BUCKETS, Reader, S3Access, bucket_endpoint};

    #[test]
    fn the_clients_kept_stay_few_whatever_bucket_names_requests_bring() {
        let reader = Reader::new(S3Access {
            endpoint: Some("http://127.0.0.1:9".into()),
            region: "us-east-1".into(),
            path_style: true,
            credentials: None,
        });
        for i in 0..3 * MAX_BUCKETS {
            let name = format!("made-up-{i}");
            reader
                .client(&name)
                .unwrap_or_else(|e| panic!("a client for '{name}': {e}"));
            assert!(reader.buckets.read().unwrap().len() <= MAX_BUCKETS);
        }
        // A bucket read again is served by the client kept for it.
        let (a, b) = (
            reader.client("kept").unwrap(),
            reader.client("kept").unwrap(),
        );
        assert!(std::sync::Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn virtual_hosted_endpoints_name_the_bucket_in_the_host() {
        let at = |e, style| bucket_endpoint(e, "b1", style).unwrap();
        assert_eq!(at("http://127.0.0.1:8333", true), "http://127.0.0.1:8333");
        assert_eq!(
            at("https://s3.example.com", false),
            "https://b1.s3.example.com"
        );
        assert_eq!(
            at("https://s3.example.com:9000/", false),
            "https://b1.s3.example.com:9000"
        );
        assert!(bucket_endpoint("not a url", "b1", false).is_err());
    }
}
