//! The storage under the catalog: a flat space of objects addressed by `/`-separated keys,
//! with the two conditional writes S3 offers (create-if-absent and replace-if-ETag-matches)
//! and a conditional delete. The catalog keeps all of its state in these objects, so the
//! guarantees a store must give are exactly the ones spelled out on each method, and
//! `tests/store_conformance.rs` checks every implementation against them.
//!
//! Keys are relative to the warehouse. In endpoint mode (`s3://` alone) the first segment of
//! every key is a bucket name.

pub mod azure;
pub mod fs;
pub mod gcs;
pub mod memory;
pub mod metered;
pub mod s3;
pub mod s3_reads;

use async_trait::async_trait;
use bytes::Bytes;

/// An object's content and its entity tag.
#[derive(Clone, Debug)]
pub struct Object {
    pub body: Bytes,
    pub etag: String,
}

/// The condition a write or delete is made under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Unconditional.
    None,
    /// Only if no object exists at the key (`If-None-Match: *`).
    IfAbsent,
    /// Only if the object exists and still has this ETag (`If-Match`).
    IfMatch(String),
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// Full keys, in ascending byte order.
    pub keys: Vec<String>,
    /// True when keys after the last one returned may exist.
    pub more: bool,
    /// Each key's ETag, in the same order, where the listing gives them (`list_with_etags`
    /// always does; a plain `list` where they cost nothing); else empty.
    pub etags: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write's or delete's condition did not hold.
    #[error("precondition failed")]
    PreconditionFailed,
    /// `publish`: the staged object is gone or no longer at the given ETag.
    #[error("the staged object changed")]
    StagedChanged,
    /// The bucket (endpoint mode) does not exist.
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    /// The store refused the credentials, or what they may do (401, 403).
    #[error("access denied: {0}")]
    Denied(String),
    /// Anything else: I/O, network, a malformed answer.
    #[error("{0}")]
    Other(String),
}

pub type StoreResult<T> = std::result::Result<T, StoreError>;

impl From<StoreError> for crate::error::Error {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::PreconditionFailed | StoreError::StagedChanged => {
                crate::error::Error::conflict("the catalog changed during the request; retry")
            }
            other => crate::error::Error::unavailable("the warehouse store failed")
                .with_detail(other.to_string()),
        }
    }
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads an object; `Ok(None)` when it does not exist.
    async fn get(&self, key: &str) -> StoreResult<Option<Object>>;

    /// Writes an object under `cond` and returns its new ETag. A failed condition is
    /// `PreconditionFailed` and leaves the object as it was.
    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String>;

    /// Deletes an object. `Condition::IfMatch` deletes only that exact version
    /// (`PreconditionFailed` otherwise, including when it is gone); `Condition::None` deletes
    /// whatever is there and succeeds when nothing is.
    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()>;

    /// Whether `publish` is served: the store can move an object into place in one step,
    /// conditional on the source and the target at once.
    fn atomic_publish(&self) -> bool {
        false
    }

    /// Moves `staged` to `key` in one step, if `staged` is still at `staged_etag` and nothing
    /// is at `key`; returns the ETag of `key`. `PreconditionFailed` when `key` exists,
    /// `StagedChanged` when `staged` is gone or was replaced; either way nothing changes.
    /// Only stores whose `atomic_publish` is true serve it.
    async fn publish(&self, _staged: &str, _staged_etag: &str, _key: &str) -> StoreResult<String> {
        Err(StoreError::Other("this store cannot move objects".into()))
    }

    /// Removes what writers of this store left behind when they were killed (temporary
    /// files older than `older_than`), if the store makes any; returns how many.
    async fn remove_leftovers(&self, _older_than: std::time::Duration) -> StoreResult<u64> {
        Ok(0)
    }

    /// Removes the folders below `prefix`'s folder that are empty and unchanged for
    /// `older_than`, where the store keeps folders apart from keys (a local directory does;
    /// a key store has none); how many.
    async fn prune_folders(
        &self,
        _prefix: &str,
        _older_than: std::time::Duration,
    ) -> StoreResult<u64> {
        Ok(0)
    }

    /// Lists keys that start with `prefix` and sort after `start_after`, at most `limit`.
    /// With `shallow`, only keys with no further `/` after the prefix are returned (the
    /// direct children of a folder); deeper keys are skipped, not counted.
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page>;

    /// Deletes every object under `prefix` (which should end in `/`); returns how many.
    /// `list`, with each key's ETag (the one `get` would give) in `Page::etags`.
    async fn list_with_etags(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let page = self.list(prefix, start_after, limit, shallow).await?;
        if page.etags.len() != page.keys.len() {
            return Err(StoreError::Other("this store lists no ETags".into()));
        }
        Ok(page)
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64>;

    /// Deletes up to about `limit` objects under `prefix`; returns how many, and whether
    /// more may be left. For deletions long enough that their driver must show it is alive
    /// in between. A store that deletes a folder in one step deletes it all.
    async fn delete_batch(&self, prefix: &str, _limit: usize) -> StoreResult<(u64, bool)> {
        Ok((self.delete_prefix(prefix).await?, false))
    }

    /// Answers whether the store is reachable and usable.
    async fn check(&self) -> StoreResult<()>;

    /// The objects under `prefix` and their bytes in all (what a dropped table holds).
    /// `None` from a store that cannot say.
    async fn bytes_under(&self, _prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        Ok(None)
    }

    /// Endpoint mode only: the buckets, in name order.
    async fn list_buckets(&self) -> StoreResult<Vec<String>> {
        Err(StoreError::Other("this store has no buckets".into()))
    }

    /// Endpoint mode only: creates the bucket unless it exists.
    async fn ensure_bucket(&self, _bucket: &str) -> StoreResult<()> {
        Err(StoreError::Other("this store has no buckets".into()))
    }

    /// Endpoint mode only: deletes the bucket when it holds no objects; `Ok(false)` when it
    /// still does (it is then left alone).
    async fn remove_bucket_if_empty(&self, _bucket: &str) -> StoreResult<bool> {
        Err(StoreError::Other("this store has no buckets".into()))
    }
}

/// `delete_prefix` for a store whose `delete_batch` does the work: batches of 1 000 until
/// none is left.
pub(crate) async fn delete_in_batches<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
) -> StoreResult<u64> {
    let mut deleted = 0u64;
    loop {
        let (n, more) = store.delete_batch(prefix, 1000).await?;
        deleted += n;
        if !more {
            return Ok(deleted);
        }
    }
}

/// `delete_batch` for a store that deletes one object per request: a page of keys, sixteen
/// deletes at a time.
pub(crate) async fn delete_listed<S: Store + ?Sized>(
    store: &S,
    prefix: &str,
    limit: usize,
) -> StoreResult<(u64, bool)> {
    use futures::{StreamExt, TryStreamExt};
    let page = store.list(prefix, None, limit.max(1), false).await?;
    let n = page.keys.len() as u64;
    futures::stream::iter(page.keys)
        .map(|k| async move { store.delete(&k, Condition::None).await })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok((n, page.more))
}

/// Whether `key` is a direct child of `prefix` (no `/` after it).
pub(crate) fn is_shallow(prefix: &str, key: &str) -> bool {
    !key[prefix.len()..].contains('/')
}
