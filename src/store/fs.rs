//! The local-directory store: the embedded default. Objects are files under a root folder.
//!
//! Guarantees, on one machine and across processes sharing the folder:
//! - a write lands whole or not at all (temporary file, `sync_data` unless turned off with
//!   `fs_sync = false`, then `rename`);
//! - conditional writes and deletes are atomic: the check and the act run under an exclusive
//!   `flock` on `<root>/.lance-gateway.lock` (plus an in-process mutex, since `flock` is held
//!   per open file description);
//! - the ETag changes on every write: it is built from the new file's inode, size and
//!   modification time, so a rewrite with identical bytes still gets a new tag.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;

use super::{Condition, Object, Page, Store, StoreError, StoreResult};

const LOCK_FILE: &str = ".lance-gateway.lock";
const TMP_PREFIX: &str = ".tmp-";

pub struct FsStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    lock: Mutex<File>,
    /// `sync_data` every write before it is published (survives power loss, not only crashes).
    sync: bool,
}

impl FsStore {
    /// Opens (creating it if needed) the warehouse folder `root`, syncing every write.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        Self::open_with_sync(root, true)
    }

    /// Like `open`; with `sync` false, writes are still atomic and crash-safe for the
    /// process but may be lost, whole, on power loss.
    pub fn open_with_sync(root: &Path, sync: bool) -> std::io::Result<Self> {
        fs::create_dir_all(root)?;
        let root = root.canonicalize()?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(LOCK_FILE))?;
        Ok(FsStore {
            inner: Arc::new(Inner {
                root,
                lock: Mutex::new(lock),
                sync,
            }),
        })
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Other(format!("store task failed: {e}")))?
    }
}

fn io(err: std::io::Error) -> StoreError {
    StoreError::Other(err.to_string())
}

fn etag_of(meta: &fs::Metadata) -> String {
    format!(
        "\"{:x}-{:x}-{:x}.{:x}\"",
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    )
}

impl Inner {
    fn path(&self, key: &str) -> StoreResult<PathBuf> {
        let valid = !key.is_empty()
            && !key.starts_with('/')
            && key
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != "..");
        if !valid {
            return Err(StoreError::Other(format!("invalid object key '{key}'")));
        }
        Ok(self.root.join(key))
    }

    fn read(&self, path: &Path) -> StoreResult<Option<Object>> {
        match File::open(path) {
            Ok(mut file) => {
                let meta = file.metadata().map_err(io)?;
                if meta.is_dir() {
                    return Ok(None);
                }
                let mut body = Vec::with_capacity(meta.len() as usize);
                std::io::Read::read_to_end(&mut file, &mut body).map_err(io)?;
                Ok(Some(Object {
                    body: Bytes::from(body),
                    etag: etag_of(&meta),
                }))
            }
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                Ok(None)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn current_etag(&self, path: &Path) -> StoreResult<Option<String>> {
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => Ok(Some(etag_of(&meta))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                Ok(None)
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Runs `f` holding the cross-process lock.
    fn locked<T>(&self, f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
        let file = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        file.lock().map_err(io)?;
        let out = f();
        let _ = file.unlock();
        out
    }

    fn check(&self, path: &Path, cond: &Condition) -> StoreResult<()> {
        let current = self.current_etag(path)?;
        match (cond, current) {
            (Condition::None, _) | (Condition::IfAbsent, None) => Ok(()),
            (Condition::IfMatch(want), Some(have)) if *want == have => Ok(()),
            _ => Err(StoreError::PreconditionFailed),
        }
    }

    fn put(&self, key: &str, body: &[u8], cond: &Condition) -> StoreResult<String> {
        let path = self.path(key)?;
        let dir = path
            .parent()
            .ok_or_else(|| StoreError::Other("key has no folder".into()))?;
        fs::create_dir_all(dir).map_err(io)?;
        let tmp = dir.join(format!("{TMP_PREFIX}{}", uuid::Uuid::new_v4().simple()));
        let write = || -> std::io::Result<()> {
            let mut file = File::create(&tmp)?;
            file.write_all(body)?;
            if self.sync { file.sync_data() } else { Ok(()) }
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io(e));
        }
        let result = self.locked(|| {
            self.check(&path, cond)?;
            fs::rename(&tmp, &path).map_err(io)?;
            let meta = fs::metadata(&path).map_err(io)?;
            Ok(etag_of(&meta))
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    fn delete(&self, key: &str, cond: &Condition) -> StoreResult<()> {
        let path = self.path(key)?;
        let remove = || match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(e)),
        };
        if *cond == Condition::None {
            return remove();
        }
        self.locked(|| {
            self.check(&path, cond)?;
            remove()
        })
    }

    /// Collects the keys under `dir` (recursively unless `shallow`) into `out`.
    fn walk(
        &self,
        dir: &Path,
        key_prefix: &str,
        shallow: bool,
        out: &mut Vec<String>,
    ) -> StoreResult<()> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(());
            }
            Err(e) => return Err(io(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with(TMP_PREFIX) || name == LOCK_FILE {
                continue;
            }
            let kind = entry.file_type().map_err(io)?;
            let key = format!("{key_prefix}{name}");
            if kind.is_dir() {
                if !shallow {
                    self.walk(&entry.path(), &format!("{key}/"), shallow, out)?;
                }
            } else {
                out.push(key);
            }
        }
        Ok(())
    }

    fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        // Split the prefix into the folder to read and a name prefix within it.
        let (folder, _) = prefix
            .rsplit_once('/')
            .map(|(d, n)| (format!("{d}/"), n))
            .unwrap_or((String::new(), prefix));
        let dir = if folder.is_empty() {
            self.root.clone()
        } else {
            self.path(folder.trim_end_matches('/'))?
        };
        let mut keys = Vec::new();
        self.walk(&dir, &folder, shallow, &mut keys)?;
        keys.retain(|k| {
            k.starts_with(prefix) && start_after.is_none_or(|after| k.as_str() > after)
        });
        keys.sort_unstable();
        let more = keys.len() > limit;
        keys.truncate(limit);
        Ok(Page { keys, more })
    }

    fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        let trimmed = prefix.trim_end_matches('/');
        let path = self.path(trimmed)?;
        let mut keys = Vec::new();
        self.walk(&path, prefix, false, &mut keys)?;
        match fs::remove_dir_all(&path) {
            Ok(()) => Ok(keys.len() as u64),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io(e)),
        }
    }
}

#[async_trait]
impl Store for FsStore {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        let key = key.to_string();
        self.blocking(move |inner| {
            let path = inner.path(&key)?;
            inner.read(&path)
        })
        .await
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let key = key.to_string();
        self.blocking(move |inner| inner.put(&key, &body, &cond))
            .await
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let key = key.to_string();
        self.blocking(move |inner| inner.delete(&key, &cond)).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let prefix = prefix.to_string();
        let start_after = start_after.map(str::to_string);
        self.blocking(move |inner| inner.list(&prefix, start_after.as_deref(), limit, shallow))
            .await
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        let prefix = prefix.to_string();
        self.blocking(move |inner| inner.delete_prefix(&prefix))
            .await
    }

    async fn check(&self) -> StoreResult<()> {
        self.blocking(|inner| {
            let meta = fs::metadata(&inner.root).map_err(io)?;
            if meta.permissions().readonly() {
                return Err(StoreError::Other("warehouse folder is read-only".into()));
            }
            Ok(())
        })
        .await
    }
}
