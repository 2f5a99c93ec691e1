//! A store that counts and times every call it passes on (see `telemetry`): the store's
//! health and its contention (refused conditional writes) as the gateway sees them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use super::{Condition, Object, Page, Store, StoreError, StoreResult};
use crate::telemetry;

pub struct Metered {
    inner: Arc<dyn Store>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Metered { inner }
    }
}

fn outcome<T>(result: &StoreResult<T>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(StoreError::PreconditionFailed | StoreError::StagedChanged) => "conflict",
        // Endpoint mode asks about buckets that may not exist: an answer, not a failure.
        Err(StoreError::NoSuchBucket(_)) => "missing",
        Err(_) => "error",
    }
}

/// Runs one call, then records it under `op`.
async fn timed<T>(op: &'static str, call: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
    let started = Instant::now();
    let result = call.await;
    telemetry::store_op(op, outcome(&result), started.elapsed());
    result
}

#[async_trait]
impl Store for Metered {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        timed("get", self.inner.get(key)).await
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let op = match cond {
            Condition::None => "put",
            Condition::IfAbsent => "put_if_absent",
            Condition::IfMatch(_) => "put_if_match",
        };
        timed(op, self.inner.put(key, body, cond)).await
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let op = match cond {
            Condition::IfMatch(_) => "delete_if_match",
            _ => "delete",
        };
        timed(op, self.inner.delete(key, cond)).await
    }

    fn atomic_publish(&self) -> bool {
        self.inner.atomic_publish()
    }

    async fn publish(&self, staged: &str, staged_etag: &str, key: &str) -> StoreResult<String> {
        timed("publish", self.inner.publish(staged, staged_etag, key)).await
    }

    async fn remove_leftovers(&self, older_than: Duration) -> StoreResult<u64> {
        timed("remove_leftovers", self.inner.remove_leftovers(older_than)).await
    }

    /// Not counted: a local folder's upkeep, never a request to a store.
    async fn prune_folders(&self, prefix: &str, older_than: Duration) -> StoreResult<u64> {
        self.inner.prune_folders(prefix, older_than).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        timed("list", self.inner.list(prefix, start_after, limit, shallow)).await
    }

    async fn list_with_etags(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        timed(
            "list",
            self.inner
                .list_with_etags(prefix, start_after, limit, shallow),
        )
        .await
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        timed("delete_prefix", self.inner.delete_prefix(prefix)).await
    }

    async fn delete_batch(&self, prefix: &str, limit: usize) -> StoreResult<(u64, bool)> {
        timed("delete_batch", self.inner.delete_batch(prefix, limit)).await
    }

    async fn check(&self) -> StoreResult<()> {
        timed("check", self.inner.check()).await
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        timed("list", self.inner.bytes_under(prefix)).await
    }

    async fn list_buckets(&self) -> StoreResult<Vec<String>> {
        timed("list_buckets", self.inner.list_buckets()).await
    }

    async fn ensure_bucket(&self, bucket: &str) -> StoreResult<()> {
        timed("ensure_bucket", self.inner.ensure_bucket(bucket)).await
    }

    async fn remove_bucket_if_empty(&self, bucket: &str) -> StoreResult<bool> {
        timed(
            "remove_bucket_if_empty",
            self.inner.remove_bucket_if_empty(bucket),
        )
        .await
    }
}
