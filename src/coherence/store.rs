//! The store as the catalog sees it when answers may come from memory: reads of catalog
//! records and listings of their folders are answered by the read cache where it holds
//! them, and every write of a catalog key first pins that key on every gateway that caches
//! (`Peers::pin`), so no gateway answers an old value once the write may have landed.
//!
//! Only the keys whose values decide what describe, exists and the listings answer are
//! cached: table, namespace and pending records, and the cell record. Everything else
//! (intents under `drops/`, the commit log, leases, transactions) passes through, as do all
//! data folders, which clients write without the gateway.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::cache::{ListArgs, ReadCache};
use super::peers::Peers;
use crate::catalog::layout::CATALOG_DIR;
use crate::store::{Condition, Object, Page, Store, StoreError, StoreResult};
use crate::telemetry;

/// Whether reads of `key` (an object, or a folder ending in `/`) may be cached.
pub fn cacheable(key: &str) -> bool {
    let Some(rest) = key
        .strip_prefix(CATALOG_DIR)
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    rest == "catalog.json"
        || rest.starts_with("tables/")
        || rest.starts_with("ns/")
        || rest.starts_with("pending/")
}

/// Whether a deletion of everything under `prefix` may touch a cached key.
fn covers_cached(prefix: &str) -> bool {
    cacheable(prefix) || format!("{CATALOG_DIR}/").starts_with(prefix)
}

pub struct Cached {
    inner: Arc<dyn Store>,
    cache: Option<Arc<ReadCache>>,
    peers: Arc<Peers>,
}

impl Cached {
    /// `inner` seen through `cache` (none: this process only writes, as `admin` does),
    /// with writes pinned on the gateways `peers` knows.
    pub fn new(inner: Arc<dyn Store>, cache: Option<Arc<ReadCache>>, peers: Arc<Peers>) -> Self {
        Cached {
            inner,
            cache,
            peers,
        }
    }

    /// Runs a write of `keys` under their pins. The pins are let go only after an answer
    /// that says what the store did; after a failure that leaves it open (a timeout, a
    /// dropped connection) or a cancelled call, they are kept until they expire, since the
    /// write may still land.
    async fn pinned<T>(
        &self,
        keys: &[&str],
        everything: bool,
        write: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let mut pin = self.peers.pin(keys, everything).await?;
        let result = write.await;
        pin.answered(matches!(
            result,
            Ok(_)
                | Err(StoreError::PreconditionFailed
                    | StoreError::StagedChanged
                    | StoreError::NoSuchBucket(_))
        ));
        result
    }

    /// The cache, where reads of `key` may use it.
    fn cache_for(&self, key: &str) -> Option<&ReadCache> {
        self.cache.as_deref().filter(|_| cacheable(key))
    }

    async fn listed(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
        etags: bool,
    ) -> StoreResult<Page> {
        let call = || async {
            if etags {
                self.inner
                    .list_with_etags(prefix, start_after, limit, shallow)
                    .await
            } else {
                self.inner.list(prefix, start_after, limit, shallow).await
            }
        };
        let Some(cache) = self.cache_for(prefix).filter(|_| prefix.ends_with('/')) else {
            return call().await;
        };
        let args = ListArgs {
            start_after: start_after.map(str::to_string),
            limit,
            shallow,
            etags,
        };
        if let Some(page) = cache.list(prefix, &args) {
            telemetry::read_cache("list", true);
            return Ok(page);
        }
        telemetry::read_cache("list", false);
        let ticket = cache.ticket(prefix);
        let page = call().await?;
        if let Some(ticket) = ticket {
            cache.install_list(ticket, prefix, args, page.clone());
        }
        Ok(page)
    }
}

#[async_trait]
impl Store for Cached {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        let Some(cache) = self.cache_for(key) else {
            return self.inner.get(key).await;
        };
        if let Some(value) = cache.object(key) {
            telemetry::read_cache("get", true);
            return Ok(value);
        }
        telemetry::read_cache("get", false);
        let ticket = cache.ticket(key);
        let value = self.inner.get(key).await?;
        if let Some(ticket) = ticket {
            cache.install_object(ticket, key, value.clone());
        }
        Ok(value)
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        if !cacheable(key) {
            return self.inner.put(key, body, cond).await;
        }
        self.pinned(&[key], false, self.inner.put(key, body, cond))
            .await
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        if !cacheable(key) {
            return self.inner.delete(key, cond).await;
        }
        self.pinned(&[key], false, self.inner.delete(key, cond))
            .await
    }

    fn atomic_publish(&self) -> bool {
        self.inner.atomic_publish()
    }

    async fn publish(&self, staged: &str, staged_etag: &str, key: &str) -> StoreResult<String> {
        let keys: Vec<&str> = [staged, key].into_iter().filter(|k| cacheable(k)).collect();
        let publish = self.inner.publish(staged, staged_etag, key);
        match keys.is_empty() {
            true => publish.await,
            false => self.pinned(&keys, false, publish).await,
        }
    }

    async fn remove_leftovers(&self, older_than: Duration) -> StoreResult<u64> {
        self.inner.remove_leftovers(older_than).await
    }

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
        self.listed(prefix, start_after, limit, shallow, false)
            .await
    }

    async fn list_with_etags(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        self.listed(prefix, start_after, limit, shallow, true).await
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        let delete = self.inner.delete_prefix(prefix);
        match covers_cached(prefix) {
            true => self.pinned(&[], true, delete).await,
            false => delete.await,
        }
    }

    async fn delete_batch(&self, prefix: &str, limit: usize) -> StoreResult<(u64, bool)> {
        let delete = self.inner.delete_batch(prefix, limit);
        match covers_cached(prefix) {
            true => self.pinned(&[], true, delete).await,
            false => delete.await,
        }
    }

    async fn check(&self) -> StoreResult<()> {
        self.inner.check().await
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        self.inner.bytes_under(prefix).await
    }

    async fn list_buckets(&self) -> StoreResult<Vec<String>> {
        self.inner.list_buckets().await
    }

    async fn ensure_bucket(&self, bucket: &str) -> StoreResult<()> {
        self.inner.ensure_bucket(bucket).await
    }

    async fn remove_bucket_if_empty(&self, bucket: &str) -> StoreResult<bool> {
        self.inner.remove_bucket_if_empty(bucket).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_records_readers_depend_on_are_cached() {
        assert!(cacheable(".lance-gateway/tables/a/t.json"));
        assert!(cacheable(".lance-gateway/ns/a.json"));
        assert!(cacheable(".lance-gateway/pending/a/"));
        assert!(cacheable(".lance-gateway/catalog.json"));
        assert!(!cacheable(".lance-gateway/gateways/n.json"));
        assert!(!cacheable(".lance-gateway/drops/x.json"));
        assert!(!cacheable(
            ".lance-gateway/commits/a/t.lance/main/head.json"
        ));
        assert!(!cacheable("a/t.lance/_versions/1.manifest"));
        assert!(covers_cached(""));
        assert!(covers_cached(".lance-gateway/"));
        assert!(covers_cached(".lance-gateway/tables/a/"));
        assert!(!covers_cached("a/t.lance/"));
        assert!(!covers_cached(".lance-gateway/transactions/"));
    }
}
