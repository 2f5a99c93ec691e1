//! An in-memory store with the same conditional semantics as S3. It backs the unit tests of
//! the catalog's rules; it is never the proof that a real store works.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use super::{Condition, Object, Page, Store, StoreError, StoreResult, is_shallow};

#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Object>>,
    counter: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Object>> {
        // A panic while holding the lock cannot leave a half-written map: every mutation
        // below is a single insert or remove.
        self.objects
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn check(cond: &Condition, current: Option<&Object>) -> StoreResult<()> {
    match (cond, current) {
        (Condition::None, _) => Ok(()),
        (Condition::IfAbsent, None) => Ok(()),
        (Condition::IfMatch(etag), Some(obj)) if &obj.etag == etag => Ok(()),
        _ => Err(StoreError::PreconditionFailed),
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        Ok(self.lock().get(key).cloned())
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let mut objects = self.lock();
        check(&cond, objects.get(key))?;
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let etag = format!("\"m{n}\"");
        objects.insert(
            key.to_string(),
            Object {
                body,
                etag: etag.clone(),
            },
        );
        Ok(etag)
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let mut objects = self.lock();
        if cond != Condition::None {
            check(&cond, objects.get(key))?;
        }
        objects.remove(key);
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let objects = self.lock();
        let lower = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        let mut page = Page::default();
        for (key, object) in objects.range((lower, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            if shallow && !is_shallow(prefix, key) {
                continue;
            }
            if page.keys.len() == limit {
                page.more = true;
                break;
            }
            page.keys.push(key.clone());
            page.etags.push(object.etag.clone());
        }
        Ok(page)
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        let objects = self.lock();
        let under = objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix));
        let (n, bytes) = under.fold((0, 0), |(n, b), (_, o)| (n + 1, b + o.body.len() as u64));
        Ok(Some((n, bytes)))
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        let mut objects = self.lock();
        let doomed: Vec<String> = objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        for key in &doomed {
            objects.remove(key);
        }
        Ok(doomed.len() as u64)
    }

    async fn check(&self) -> StoreResult<()> {
        Ok(())
    }
}
