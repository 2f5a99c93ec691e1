//! The S3 store, for any S3-compatible server that honours conditional requests
//! (`If-None-Match: *` and `If-Match` on PutObject, `If-Match` on DeleteObject): AWS S3,
//! SeaweedFS, MinIO and the like.
//!
//! Two modes: a fixed bucket with a key prefix (`s3://bucket/prefix`), or endpoint mode
//! (`s3://`), where the first segment of every key names the bucket.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use bytes::Bytes;

use super::s3_reads::{Reader, S3Access};
use super::{Condition, Object, Page, Store, StoreError, StoreResult};

/// Where this store keeps its objects.
#[derive(Clone, Debug)]
pub enum S3Root {
    /// One bucket; every key is prefixed with `prefix` (empty, or ending in `/`).
    Bucket { bucket: String, prefix: String },
    /// Every bucket the credentials reach; a key's first segment is its bucket.
    Endpoint,
}

pub struct S3Store {
    client: Client,
    root: S3Root,
    /// Single-object reads, when set (see `s3_reads`); else the SDK reads too.
    reader: Option<Reader>,
}

impl S3Store {
    pub fn new(client: Client, root: S3Root) -> Self {
        S3Store {
            client,
            root,
            reader: None,
        }
    }

    /// Reads single objects through `object_store` (see `s3_reads`), reaching the store as
    /// `access` says: the same endpoint, region, addressing and keys as `client`.
    pub fn reading_through(mut self, access: S3Access) -> Self {
        self.reader = Some(Reader::new(access));
        self
    }

    /// Splits a store key into (bucket, object key).
    fn locate(&self, key: &str) -> StoreResult<(String, String)> {
        match &self.root {
            S3Root::Bucket { bucket, prefix } => Ok((bucket.clone(), format!("{prefix}{key}"))),
            S3Root::Endpoint => match key.split_once('/') {
                Some((bucket, rest)) if !bucket.is_empty() => {
                    Ok((bucket.to_string(), rest.to_string()))
                }
                _ => Err(StoreError::Other(format!("key '{key}' names no bucket"))),
            },
        }
    }

    /// Turns an object key of `bucket` back into a store key.
    fn store_key(&self, bucket: &str, object_key: &str) -> String {
        match &self.root {
            S3Root::Bucket { prefix, .. } => object_key[prefix.len()..].to_string(),
            S3Root::Endpoint => format!("{bucket}/{object_key}"),
        }
    }
}

/// A configuration override that sends a request once.
fn no_retries() -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::config::Builder::default()
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
}

fn status<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

fn other<E: std::error::Error + Send + Sync + 'static, R: std::fmt::Debug>(
    err: SdkError<E, R>,
) -> StoreError {
    StoreError::Other(DisplayErrorContext(&err).to_string())
}

fn code_of<E: aws_sdk_s3::error::ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<String> {
    err.as_service_error()
        .and_then(|e| e.code())
        .map(str::to_string)
}

#[async_trait]
impl Store for S3Store {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        let (bucket, key) = self.locate(key)?;
        if let Some(read) = match &self.reader {
            Some(reader) => reader.get(&bucket, &key).await,
            None => None,
        } {
            return read;
        }
        match self
            .client
            .get_object()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
        {
            Ok(out) => {
                let etag = out.e_tag().unwrap_or_default().to_string();
                let body = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| StoreError::Other(format!("reading s3://{bucket}/{key}: {e}")))?
                    .into_bytes();
                Ok(Some(Object { body, etag }))
            }
            Err(err) if status(&err) == Some(404) => {
                if code_of(&err).as_deref() == Some("NoSuchBucket") {
                    return Err(StoreError::NoSuchBucket(bucket));
                }
                Ok(None)
            }
            Err(err) => Err(other(err)),
        }
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let (bucket, key) = self.locate(key)?;
        let mut req = self
            .client
            .put_object()
            .bucket(&bucket)
            .key(&key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        req = match &cond {
            Condition::None => req,
            Condition::IfAbsent => req.if_none_match("*"),
            Condition::IfMatch(etag) => req.if_match(etag),
        };
        let sent = if cond == Condition::None {
            req.send().await
        } else {
            // The SDK would resend a conditional write whose answer was lost, and a resend can
            // land after the object moved on (re-creating what was just deleted). The catalog
            // resolves a lost answer by reading the object back instead.
            req.customize().config_override(no_retries()).send().await
        };
        match sent {
            Ok(out) => Ok(out.e_tag().unwrap_or_default().to_string()),
            // 412: the condition failed; 409: a concurrent conditional write won the race.
            Err(err) if matches!(status(&err), Some(412) | Some(409)) => {
                Err(StoreError::PreconditionFailed)
            }
            Err(err) if matches!(&cond, Condition::IfMatch(_)) && status(&err) == Some(404) => {
                Err(StoreError::PreconditionFailed)
            }
            Err(err) if code_of(&err).as_deref() == Some("NoSuchBucket") => {
                Err(StoreError::NoSuchBucket(bucket))
            }
            Err(err) => Err(other(err)),
        }
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let (bucket, key) = self.locate(key)?;
        let mut req = self.client.delete_object().bucket(&bucket).key(&key);
        match &cond {
            Condition::None => {}
            Condition::IfMatch(etag) => req = req.if_match(etag),
            Condition::IfAbsent => {
                return Err(StoreError::Other("delete if absent makes no sense".into()));
            }
        }
        let sent = if cond == Condition::None {
            req.send().await
        } else {
            req.customize().config_override(no_retries()).send().await
        };
        match sent {
            Ok(_) => Ok(()),
            Err(err)
                if cond != Condition::None
                    && matches!(status(&err), Some(412) | Some(409) | Some(404)) =>
            {
                Err(StoreError::PreconditionFailed)
            }
            Err(err) if status(&err) == Some(404) => Ok(()),
            Err(err) => Err(other(err)),
        }
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let (bucket, object_prefix) = self.locate(prefix)?;
        let mut after = match start_after {
            Some(a) => Some(self.locate(a)?.1),
            None => None,
        };
        let mut page = Page::default();
        let mut token: Option<String> = None;
        loop {
            let want = (limit + 1 - page.keys.len()).clamp(1, 1000) as i32;
            let mut req = self
                .client
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(&object_prefix)
                .max_keys(want);
            if shallow {
                req = req.delimiter("/");
            }
            if let Some(t) = &token {
                req = req.continuation_token(t);
            } else if let Some(a) = &after {
                req = req.start_after(a);
            }
            let out = match req.send().await {
                Ok(out) => out,
                Err(err) if code_of(&err).as_deref() == Some("NoSuchBucket") => {
                    return Err(StoreError::NoSuchBucket(bucket));
                }
                Err(err) => return Err(other(err)),
            };
            for obj in out.contents() {
                let Some(k) = obj.key() else { continue };
                if after.as_deref().is_some_and(|a| k <= a) {
                    continue;
                }
                if page.keys.len() == limit {
                    page.more = true;
                    return Ok(page);
                }
                page.keys.push(self.store_key(&bucket, k));
                page.etags.push(obj.e_tag().unwrap_or_default().to_string());
            }
            if !out.is_truncated().unwrap_or(false) {
                return Ok(page);
            }
            token = out.next_continuation_token().map(str::to_string);
            if token.is_none() {
                // A server that truncates without a token: continue from the last key seen.
                token = None;
                after = out
                    .contents()
                    .last()
                    .and_then(|o| o.key())
                    .map(str::to_string);
                if after.is_none() {
                    return Ok(page);
                }
            }
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        super::delete_in_batches(self, prefix).await
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        let (bucket, object_prefix) = self.locate(prefix)?;
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(&object_prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(other)?;
            for o in out.contents() {
                n += 1;
                bytes += o.size().unwrap_or(0).max(0) as u64;
            }
            match out.next_continuation_token() {
                Some(t) if out.is_truncated().unwrap_or(false) => token = Some(t.to_string()),
                _ => return Ok(Some((n, bytes))),
            }
        }
    }

    async fn delete_batch(&self, prefix: &str, limit: usize) -> StoreResult<(u64, bool)> {
        let (bucket, object_prefix) = self.locate(prefix)?;
        let out = self
            .client
            .list_objects_v2()
            .bucket(&bucket)
            .prefix(&object_prefix)
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .await
            .map_err(other)?;
        let ids: Vec<ObjectIdentifier> = out
            .contents()
            .iter()
            .filter_map(|o| o.key())
            .filter_map(|k| ObjectIdentifier::builder().key(k).build().ok())
            .collect();
        if ids.is_empty() {
            return Ok((0, false));
        }
        let count = ids.len() as u64;
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let result = self
            .client
            .delete_objects()
            .bucket(&bucket)
            .delete(delete)
            .send()
            .await
            .map_err(other)?;
        if let Some(failed) = result.errors().first() {
            return Err(StoreError::Other(format!(
                "deleting {}: {}",
                failed.key().unwrap_or_default(),
                failed.message().unwrap_or_default()
            )));
        }
        Ok((count, out.is_truncated().unwrap_or(false)))
    }

    async fn check(&self) -> StoreResult<()> {
        match &self.root {
            S3Root::Bucket { bucket, .. } => {
                self.client
                    .head_bucket()
                    .bucket(bucket)
                    .send()
                    .await
                    .map_err(other)?;
            }
            S3Root::Endpoint => {
                self.client.list_buckets().send().await.map_err(other)?;
            }
        }
        Ok(())
    }

    async fn list_buckets(&self) -> StoreResult<Vec<String>> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = self.client.list_buckets();
            if let Some(t) = &token {
                req = req.continuation_token(t);
            }
            let out = req.send().await.map_err(other)?;
            names.extend(
                out.buckets()
                    .iter()
                    .filter_map(|b| b.name())
                    .map(str::to_string),
            );
            token = out.continuation_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn ensure_bucket(&self, bucket: &str) -> StoreResult<()> {
        match self.client.create_bucket().bucket(bucket).send().await {
            Ok(_) => Ok(()),
            Err(err)
                if matches!(
                    code_of(&err).as_deref(),
                    Some("BucketAlreadyOwnedByYou") | Some("BucketAlreadyExists")
                ) =>
            {
                Ok(())
            }
            Err(err) => Err(other(err)),
        }
    }

    async fn remove_bucket_if_empty(&self, bucket: &str) -> StoreResult<bool> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .max_keys(1)
            .send()
            .await
            .map_err(other)?;
        if !out.contents().is_empty() {
            return Ok(false);
        }
        match self.client.delete_bucket().bucket(bucket).send().await {
            Ok(_) => Ok(true),
            Err(err) if status(&err) == Some(409) => Ok(false),
            Err(err) if status(&err) == Some(404) => Ok(true),
            Err(err) => Err(other(err)),
        }
    }
}
