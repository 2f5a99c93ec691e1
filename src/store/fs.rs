//! The local-directory store: the embedded default. Objects are files under a root folder.
//!
//! Guarantees, on one machine and across processes sharing the folder:
//! - a write lands whole or not at all: a temporary file in `.lance-gateway/tmp/`, then a
//!   `rename` into place. A writer killed half-way leaves only a temporary file, which
//!   `remove_leftovers` (run at open and by every recovery sweep) deletes once it is old;
//! - with `fs_sync` (the default) a write or delete is durable when it returns: the file's
//!   data is synced before it is published and its folder after, so an acknowledged change
//!   survives a power loss. (Readers take no lock, so another request may see a change a
//!   moment before its folder sync returns.) Without it, changes are still atomic and
//!   survive a crash of the process, as Lance's own writes to a local directory do, but a
//!   power loss may drop the latest ones;
//! - every write and delete is atomic with respect to its condition: the check and the act
//!   run under an exclusive `flock` on `<root>/.lance-gateway.lock` (plus an in-process mutex,
//!   since `flock` is held per open file description);
//! - folders come and go as on a key store: a writer makes the folder it writes into under
//!   that lock, and `prune_folders` (run by the catalog over its pending entries each
//!   recovery sweep) removes a folder only when empty, unchanged for the grace period and
//!   only under it, so a listing need not open the folders of every namespace that ever
//!   had a create in flight;
//! - the ETag changes on every write: it is built from the new file's inode, size and
//!   modification time, and every write sets that time itself to a clock reading in
//!   nanoseconds that this process never hands out twice. (The kernel's own stamps are only
//!   as fine as its timer tick, and a freed inode is soon reused: a rewrite within one tick
//!   could otherwise get the tag of the file it replaced, and a stale `IfMatch` pass.)
//!
//! Reads are served from the page cache with as few system calls as a read can take: a file
//! read before, whose tag (one `statx` of its path) has not changed since, is answered with
//! the bytes read then; any other is opened, measured and read in one `read` (files are
//! never changed in place, only replaced, so the size measured is the size read). The tag
//! changes on every write, so a remembered body is never trusted over the file.
//!
//! Where the work runs: reading, writing or removing one small record is a handful of
//! system calls against the page cache (tens of microseconds), less than handing it to
//! another thread costs, so those run on the calling task. What can take long runs on
//! tokio's blocking pool: every synced write or delete (an fsync is about half a millisecond
//! on an SSD), listing a folder, and deleting a table's data. The lock is only ever held for
//! a check and a rename or link, never across an `.await`. `publish` (a hard link, then the
//! staged name removed, all under the lock) is served only where the file system has hard
//! links, which `open` finds out once.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;

use super::{Condition, Object, Page, Store, StoreError, StoreResult};

const LOCK_FILE: &str = ".lance-gateway.lock";
/// Where writes are prepared before they are renamed into place. No catalog key lives here.
const TMP_DIR: &str = ".lance-gateway/tmp";
/// How a temporary file was named before `TMP_DIR` (format version 1): one beside each key.
const LEGACY_TMP_PREFIX: &str = ".tmp-";
/// At open, a temporary file older than this belongs to a writer that is gone: a write holds
/// one for the time of a write and a sync. (Sweeps use the recovery grace period.)
const LEFTOVER_AGE: Duration = Duration::from_secs(60);

/// How a hard link for `publish` went.
enum Linked {
    Done(String),
    NoFolder,
}

pub struct FsStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    lock: Mutex<File>,
    /// Sync every write and delete before returning (survives power loss, not only crashes).
    sync: bool,
    /// Whether the file system makes hard links, so `publish` is served.
    links: bool,
    /// The last modification time (ns since the epoch) this process gave a file.
    last_stamp: AtomicU64,
    /// Bodies read lately, by path, with the stamp and tag they were read at.
    recent: RwLock<HashMap<PathBuf, (Stamp, String, Bytes)>>,
    /// Large folders' entries in key order, kept while the folder is unchanged.
    folders: Mutex<Folders>,
}

/// A folder's entries in key order: each name, and whether it is a folder (which sorts as
/// `name/`, as the keys under it do).
type Sorted = Arc<[(Box<str>, bool)]>;

/// The sorted entries of folders of `BIG_FOLDER` entries or more, each with the folder's
/// modification time when read, so a page of a listing through a namespace of 100 000
/// tables reads one `stat` and its own entries, not the whole folder again.
///
/// A folder is known by its device, inode and status-change time: every entry added or
/// removed moves that time, as does any change of the folder's other times, and a folder
/// renamed into its place (or restored by a copy that keeps modification times) has
/// another inode or time; no call sets it.
///
/// Kept only when that time was over `SETTLED` old when the folder was read: the kernel
/// stamps a folder with a clock that may tick only every few milliseconds, so a change right
/// after a read might leave the time as it was; past `SETTLED`, any change moves it. And
/// only on file systems known to keep folder times so (`keeps_folder_times`): a FUSE mount
/// of a bucket or a network file system may not, and there every listing reads the folder.
#[derive(Default)]
struct Folders {
    by_path: HashMap<PathBuf, (FolderStamp, Sorted)>,
    names: usize,
    /// Whether the warehouse's file system keeps folder times (else nothing is kept).
    keep: bool,
}

type FolderStamp = (u64, u64, i64, i64);

fn folder_stamp(meta: &fs::Metadata) -> FolderStamp {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

/// Whether `stamp`'s time is over `SETTLED` ago.
fn settled(stamp: &FolderStamp) -> bool {
    let (Ok(secs), Ok(nanos)) = (u64::try_from(stamp.2), u32::try_from(stamp.3)) else {
        return false;
    };
    let at = std::time::UNIX_EPOCH + Duration::new(secs, nanos);
    SystemTime::now()
        .duration_since(at)
        .is_ok_and(|age| age > SETTLED)
}

/// File systems whose folders' status-change times move with every entry added or removed,
/// as `Folders` relies on (Linux's local ones; not FUSE, NFS or SMB).
const KEEPS_FOLDER_TIMES: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay", "bcachefs", "ramfs",
];

/// Whether `root` lies on one of `KEEPS_FOLDER_TIMES`, by the mount that holds it in
/// `/proc/self/mountinfo` (false where that cannot be read).
fn keeps_folder_times(root: &Path) -> bool {
    let Ok(table) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let mut best: Option<(usize, &str)> = None;
    for line in table.lines() {
        // id parent dev root mount-point options [optional...] - fstype source super-options
        let mut fields = line.split(' ');
        let Some(point) = fields.nth(4) else { continue };
        let Some(fstype) = fields.skip_while(|f| *f != "-").nth(1) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if root.starts_with(&point) && best.is_none_or(|(len, _)| point.len() >= len) {
            best = Some((point.len(), fstype));
        }
    }
    best.is_some_and(|(_, fstype)| KEEPS_FOLDER_TIMES.contains(&fstype))
}

const BIG_FOLDER: usize = 2048;
const FOLDER_NAMES_AT_MOST: usize = 400_000;
const SETTLED: Duration = Duration::from_secs(2);

/// What a file's tag is made of: inode, size, modification time (s, ns).
type Stamp = (u64, u64, i64, i64);

fn stamp_of(meta: &fs::Metadata) -> Stamp {
    (meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// How many bodies `recent` keeps (catalog records are a few hundred bytes each); when full
/// it starts over.
const RECENT_AT_MOST: usize = 1024;

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
        fs::create_dir_all(root.join(TMP_DIR))?;
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(LOCK_FILE))?;
        let links = links_work(&root.join(TMP_DIR));
        let keep = keeps_folder_times(&root);
        if !links {
            tracing::info!(
                "the warehouse folder refuses hard links: creates commit through an intent"
            );
        }
        let store = FsStore {
            inner: Arc::new(Inner {
                root,
                lock: Mutex::new(lock),
                sync,
                links,
                last_stamp: AtomicU64::new(0),
                recent: RwLock::new(HashMap::new()),
                folders: Mutex::new(Folders {
                    keep,
                    ..Folders::default()
                }),
            }),
        };
        let removed = store
            .inner
            .remove_leftovers(LEFTOVER_AGE, true)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if removed > 0 {
            tracing::info!(
                removed,
                "removed temporary files left by writers that were killed"
            );
        }
        Ok(store)
    }

    /// Opens an existing warehouse folder only to read it: nothing is created, probed or
    /// cleaned up (for `admin` checks, which must change nothing). Writes are not expected.
    pub fn open_read_only(root: &Path) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        let keep = keeps_folder_times(&root);
        let lock = fs::File::open(root.join(LOCK_FILE)).or_else(|_| fs::File::open(&root))?;
        Ok(FsStore {
            inner: Arc::new(Inner {
                root,
                lock: Mutex::new(lock),
                sync: true,
                links: true,
                last_stamp: AtomicU64::new(0),
                recent: RwLock::new(HashMap::new()),
                folders: Mutex::new(Folders {
                    keep,
                    ..Folders::default()
                }),
            }),
        })
    }

    /// Serves no `publish`, as on a file system without hard links.
    pub fn without_hard_links(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.links = false;
        }
        self
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Runs `f` on tokio's blocking pool: for work that may take milliseconds.
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

    /// Runs a write or delete: on the calling task, or on the blocking pool when it syncs.
    async fn mutation<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> StoreResult<T> + Send + 'static,
    {
        if self.inner.sync {
            self.blocking(f).await
        } else {
            f(&self.inner)
        }
    }
}

fn io(err: std::io::Error) -> StoreError {
    StoreError::Other(err.to_string())
}

/// Whether `dir`'s file system makes hard links (tried once, with a scratch file).
fn links_work(dir: &Path) -> bool {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (a, b) = (
        dir.join(format!("probe-{id}")),
        dir.join(format!("probe-{id}-link")),
    );
    let worked = File::create(&a).is_ok() && fs::hard_link(&a, &b).is_ok();
    let _ = fs::remove_file(&a);
    let _ = fs::remove_file(&b);
    worked
}

fn etag_of(meta: &fs::Metadata) -> String {
    let (ino, size, s, ns) = stamp_of(meta);
    format!("\"{ino:x}-{size:x}-{s:x}.{ns:x}\"")
}

/// What a listing asks for (`Inner::walk_in_order`).
struct Want<'a> {
    prefix: &'a str,
    after: Option<&'a str>,
    shallow: bool,
    /// How many keys it wants at most.
    count: usize,
}

impl Inner {
    fn path(&self, key: &str) -> StoreResult<PathBuf> {
        let valid = !key.is_empty()
            && !key.starts_with('/')
            && key
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != "..")
            && !key.starts_with(&format!("{TMP_DIR}/"));
        if !valid {
            return Err(StoreError::Other(format!("invalid object key '{key}'")));
        }
        Ok(self.root.join(key))
    }

    fn read(&self, path: &Path) -> StoreResult<Option<Object>> {
        // The file as it is now: its stamp (the parts of its tag) names the bytes it holds.
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => {
                let now = stamp_of(&meta);
                let recent = self.recent.read().unwrap_or_else(|p| p.into_inner());
                if let Some((stamp, etag, body)) = recent.get(path)
                    && *stamp == now
                {
                    return Ok(Some(Object {
                        body: body.clone(),
                        etag: etag.clone(),
                    }));
                }
            }
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(None);
            }
            Err(e) => return Err(io(e)),
        }
        let (stamp, object) = match File::open(path) {
            Ok(mut file) => {
                let meta = file.metadata().map_err(io)?;
                if meta.is_dir() {
                    return Ok(None);
                }
                // The size measured is the size written (files are only ever replaced), so
                // one read takes it all and no second one is needed to find the end.
                let mut body = vec![0; meta.len() as usize];
                let mut filled = 0;
                while filled < body.len() {
                    match std::io::Read::read(&mut file, &mut body[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(io(e)),
                    }
                }
                body.truncate(filled);
                (
                    stamp_of(&meta),
                    Object {
                        body: Bytes::from(body),
                        etag: etag_of(&meta),
                    },
                )
            }
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(None);
            }
            Err(e) => return Err(io(e)),
        };
        let mut recent = self.recent.write().unwrap_or_else(|p| p.into_inner());
        if recent.len() >= RECENT_AT_MOST {
            recent.clear();
        }
        recent.insert(
            path.to_path_buf(),
            (stamp, object.etag.clone(), object.body.clone()),
        );
        Ok(Some(object))
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
        if *cond == Condition::None {
            return Ok(());
        }
        let current = self.current_etag(path)?;
        match (cond, current) {
            (Condition::None, _) | (Condition::IfAbsent, None) => Ok(()),
            (Condition::IfMatch(want), Some(have)) if *want == have => Ok(()),
            _ => Err(StoreError::PreconditionFailed),
        }
    }

    /// Creates `dir` and any missing folders above it; when syncing, each new folder's
    /// entry is made durable in its parent.
    fn make_dirs(&self, dir: &Path) -> StoreResult<()> {
        if dir.is_dir() {
            return Ok(());
        }
        let mut missing = vec![dir];
        while let Some(parent) = missing.last().and_then(|d| d.parent()) {
            if parent.is_dir() || parent == self.root {
                break;
            }
            missing.push(parent);
        }
        for created in missing.into_iter().rev() {
            match fs::create_dir(created) {
                Ok(()) => {}
                // Another writer made it first.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(e)),
            }
            if let Some(parent) = created.parent() {
                self.sync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// Makes the entries of `dir` (a rename into it, a removal) durable, when syncing. A
    /// folder gone meanwhile (emptied and pruned) is gone from the nearest folder left,
    /// which is synced instead.
    fn sync_dir(&self, dir: &Path) -> StoreResult<()> {
        if !self.sync {
            return Ok(());
        }
        let mut at = dir;
        loop {
            match File::open(at).and_then(|d| d.sync_all()) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound && at != self.root => match at.parent() {
                    Some(parent) => at = parent,
                    None => return Ok(()),
                },
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Removes the folders below `prefix`'s folder that are empty and unchanged for
    /// `older_than`, deepest first; how many. A key store has no empty folders, but here a
    /// folder stays after its last file goes, and a recursive listing opens every folder it
    /// meets. Each removal takes the lock, and every writer makes its folder and fills it
    /// under the lock, so none loses the folder it just made; and the folder's age is read
    /// under the lock too, so a delete that emptied it (which moves its modification time)
    /// has long synced it, even a delete by a release that does not expect folders to go.
    fn prune_folders(&self, prefix: &str, older_than: Duration) -> StoreResult<u64> {
        let top = self.path(prefix.trim_end_matches('/'))?;
        let mut removed = 0;
        self.prune_below(&top, older_than, &mut removed)?;
        Ok(removed)
    }

    /// Prunes the folders in `dir`; whether it is left empty.
    fn prune_below(
        &self,
        dir: &Path,
        older_than: Duration,
        removed: &mut u64,
    ) -> StoreResult<bool> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(false);
            }
            Err(e) => return Err(io(e)),
        };
        let mut empty = true;
        for entry in entries {
            let entry = entry.map_err(io)?;
            let path = entry.path();
            if !entry.file_type().map_err(io)?.is_dir() || path == self.root.join(TMP_DIR) {
                empty = false;
                continue;
            }
            if !self.prune_below(&path, older_than, removed)? {
                empty = false;
                continue;
            }
            let gone = self.locked(|| {
                let settled = fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= older_than);
                if !settled {
                    return Ok(false);
                }
                match fs::remove_dir(&path) {
                    Ok(()) => Ok(true),
                    // Filled or removed since it was read.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::DirectoryNotEmpty | ErrorKind::NotFound
                        ) =>
                    {
                        Ok(false)
                    }
                    Err(e) => Err(io(e)),
                }
            })?;
            if gone {
                *removed += 1;
            } else {
                empty = false;
            }
        }
        Ok(empty)
    }

    /// Runs `f` (which creates an entry in `dir`), creating `dir` first if `f` finds it
    /// missing: folders are made only when needed, without a check on every write.
    fn in_dir<T>(&self, dir: &Path, f: impl Fn() -> std::io::Result<T>) -> StoreResult<T> {
        match f() {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.make_dirs(dir)?;
                f().map_err(io)
            }
            other => other.map_err(io),
        }
    }

    /// A modification time no earlier write of this process got.
    fn stamp(&self) -> SystemTime {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut last = self.last_stamp.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self.last_stamp.compare_exchange_weak(
                last,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return UNIX_EPOCH + Duration::from_nanos(next),
                Err(seen) => last = seen,
            }
        }
    }

    fn put(&self, key: &str, body: &[u8], cond: &Condition) -> StoreResult<String> {
        let path = self.path(key)?;
        let dir = path
            .parent()
            .ok_or_else(|| StoreError::Other("key has no folder".into()))?;
        let tmp = self
            .root
            .join(TMP_DIR)
            .join(uuid::Uuid::new_v4().simple().to_string());
        let written = self
            .in_dir(&self.root.join(TMP_DIR), || File::create(&tmp))
            .and_then(|mut file| {
                file.write_all(body).map_err(io)?;
                file.set_modified(self.stamp()).map_err(io)?;
                if self.sync {
                    file.sync_data().map_err(io)?;
                }
                Ok(())
            });
        let result = written.and_then(|()| {
            self.locked(|| {
                self.check(&path, cond)?;
                match fs::rename(&tmp, &path) {
                    Ok(()) => {}
                    // The first object in a folder: the folder is made here.
                    Err(e) if e.kind() == ErrorKind::NotFound && !dir.is_dir() => {
                        self.make_dirs(dir)?;
                        fs::rename(&tmp, &path).map_err(io)?;
                    }
                    Err(e) => return Err(io(e)),
                }
                Ok(etag_of(&fs::metadata(&path).map_err(io)?))
            })
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        let etag = result?;
        self.sync_dir(dir)?;
        Ok(etag)
    }

    /// Moves `staged` (still at `staged_etag`) to `key` if `key` is free: a hard link, then
    /// the staged name removed, so no file is created or freed.
    fn publish(&self, staged: &str, staged_etag: &str, key: &str) -> StoreResult<String> {
        let from = self.path(staged)?;
        let to = self.path(key)?;
        let dir = to
            .parent()
            .ok_or_else(|| StoreError::Other("key has no folder".into()))?;
        // The folder is made under the lock, as a prune removes one only under it.
        let link = |make_folder: bool| {
            self.locked(|| {
                if make_folder {
                    self.make_dirs(dir)?;
                }
                if self.current_etag(&from)?.as_deref() != Some(staged_etag) {
                    return Err(StoreError::StagedChanged);
                }
                match fs::hard_link(&from, &to) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        return Err(StoreError::PreconditionFailed);
                    }
                    // `from` is there, so it is the folder of `key` that is missing.
                    Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Linked::NoFolder),
                    Err(e) => return Err(io(e)),
                }
                if let Err(e) = fs::remove_file(&from) {
                    // The record is published; the staged name beside it is a leftover
                    // that recovery removes.
                    tracing::warn!(staged, error = %e, "could not remove a published staged record");
                }
                Ok(Linked::Done(etag_of(&fs::metadata(&to).map_err(io)?)))
            })
        };
        let mut linked = link(false)?;
        if let Linked::NoFolder = linked {
            // The first record of a namespace: its folder is made here.
            linked = link(true)?;
        }
        match linked {
            Linked::Done(etag) => {
                // The staged name's removal is not synced: if a power loss brings it back,
                // it is a leftover beside its published record, which recovery removes.
                self.sync_dir(dir)?;
                Ok(etag)
            }
            Linked::NoFolder => Err(StoreError::Other(format!(
                "the folder of '{key}' disappeared while publishing"
            ))),
        }
    }

    /// Removes temporary files older than `older_than`; with `legacy`, also those an older
    /// version left beside catalog keys.
    fn remove_leftovers(&self, older_than: Duration, legacy: bool) -> StoreResult<u64> {
        let mut removed = 0;
        let old = |path: &Path| {
            fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > older_than)
        };
        if let Ok(entries) = fs::read_dir(self.root.join(TMP_DIR)) {
            for entry in entries.flatten() {
                if old(&entry.path()) && fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        if legacy {
            let mut stack = vec![self.root.join(".lance-gateway")];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        if path != self.root.join(TMP_DIR) {
                            stack.push(path);
                        }
                    } else if entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with(LEGACY_TMP_PREFIX)
                        && old(&path)
                        && fs::remove_file(&path).is_ok()
                    {
                        removed += 1;
                    }
                }
            }
        }
        Ok(removed)
    }

    fn delete(&self, key: &str, cond: &Condition) -> StoreResult<()> {
        let path = self.path(key)?;
        // Unconditional deletes take the lock too, so none lands between another
        // operation's check and its act.
        let removed = self.locked(|| {
            self.check(&path, cond)?;
            match fs::remove_file(&path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
                Err(e) => Err(io(e)),
            }
        })?;
        if removed && let Some(dir) = path.parent() {
            self.sync_dir(dir)?;
        }
        Ok(())
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
            if name.starts_with(LEGACY_TMP_PREFIX) || name == LOCK_FILE {
                continue;
            }
            let kind = entry.file_type().map_err(io)?;
            let key = format!("{key_prefix}{name}");
            if key == TMP_DIR {
                continue;
            }
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

    /// The folder a listing of `prefix` reads, and its key prefix (empty or ending in `/`).
    fn list_folder(&self, prefix: &str) -> StoreResult<(PathBuf, String)> {
        let folder = prefix
            .rsplit_once('/')
            .map(|(d, _)| format!("{d}/"))
            .unwrap_or_default();
        let dir = if folder.is_empty() {
            self.root.clone()
        } else {
            self.path(folder.trim_end_matches('/'))?
        };
        Ok((dir, folder))
    }

    fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let (dir, folder) = self.list_folder(prefix)?;
        let mut keys = Vec::new();
        let want = Want {
            prefix,
            after: start_after,
            shallow,
            count: limit.saturating_add(1),
        };
        self.walk_in_order(&dir, &folder, &want, &mut keys)?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        Ok(Page {
            keys,
            more,
            etags: Vec::new(),
        })
    }

    /// The entries of `dir` in key order (empty when it does not exist), from `folders`
    /// while the folder is unchanged.
    fn sorted_entries(&self, dir: &Path, key_prefix: &str) -> StoreResult<Sorted> {
        let stamp = match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => folder_stamp(&meta),
            Ok(_) => return Ok(Arc::from(Vec::new())),
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(Arc::from(Vec::new()));
            }
            Err(e) => return Err(io(e)),
        };
        {
            let folders = self.folders.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((seen, sorted)) = folders.by_path.get(dir)
                && *seen == stamp
            {
                return Ok(sorted.clone());
            }
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                return Ok(Arc::from(Vec::new()));
            }
            Err(e) => return Err(io(e)),
        };
        let mut found: Vec<(Box<str>, bool)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io)?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with(LEGACY_TMP_PREFIX) || name == LOCK_FILE {
                continue;
            }
            if key_prefix.len() + name.len() == TMP_DIR.len()
                && format!("{key_prefix}{name}") == TMP_DIR
            {
                continue;
            }
            let is_dir = entry.file_type().map_err(io)?.is_dir();
            found.push((name.into_boxed_str(), is_dir));
        }
        // A folder sorts as `name/`: "a-b" before "a/x" ('-' is below '/').
        found.sort_unstable_by(|(a, a_dir), (b, b_dir)| {
            let a = a.bytes().chain(a_dir.then_some(b'/'));
            let b = b.bytes().chain(b_dir.then_some(b'/'));
            a.cmp(b)
        });
        let sorted: Sorted = Arc::from(found);
        // Unchanged since before the read, and settled: kept.
        if sorted.len() >= BIG_FOLDER
            && settled(&stamp)
            && fs::metadata(dir).ok().map(|m| folder_stamp(&m)) == Some(stamp)
        {
            let mut folders = self.folders.lock().unwrap_or_else(|p| p.into_inner());
            if !folders.keep {
                return Ok(sorted);
            }
            if let Some((_, old)) = folders.by_path.remove(dir) {
                folders.names -= old.len();
            }
            if folders.names + sorted.len() > FOLDER_NAMES_AT_MOST {
                folders.by_path.clear();
                folders.names = 0;
            }
            folders.names += sorted.len();
            folders
                .by_path
                .insert(dir.to_path_buf(), (stamp, sorted.clone()));
        }
        Ok(sorted)
    }

    /// Collects into `out`, in key order, the keys under `dir` (whose keys begin
    /// `key_prefix`) that `want` asks for, and stops once it has `want.count`. A folder none
    /// of whose keys can be wanted (all before `after`, or outside `prefix`) is not read, so
    /// a page costs the folders on its way and the keys it holds, not the whole warehouse:
    /// a walk over a listing page by page is linear in what it lists.
    fn walk_in_order(
        &self,
        dir: &Path,
        key_prefix: &str,
        want: &Want,
        out: &mut Vec<String>,
    ) -> StoreResult<()> {
        let sorted = self.sorted_entries(dir, key_prefix)?;
        // Where the page starts: past every entry wholly before `after`, but at the last of
        // them if it is the folder `after` is in (only it can be an ancestor of `after`).
        let key_of = |(name, is_dir): &(Box<str>, bool)| {
            let mut key = format!("{key_prefix}{name}");
            if *is_dir {
                key.push('/');
            }
            key
        };
        let start = match want.after {
            Some(a) => {
                let past = sorted.partition_point(|e| key_of(e).as_str() <= a);
                match past.checked_sub(1).map(|i| (i, &sorted[i])) {
                    Some((i, e)) if e.1 && a.starts_with(key_of(e).as_str()) => i,
                    _ => past,
                }
            }
            None => 0,
        };
        for entry in &sorted[start..] {
            if out.len() >= want.count {
                break;
            }
            let key = key_of(entry);
            let is_dir = entry.1;
            if is_dir {
                if want.shallow {
                    continue;
                }
                // Keys under it begin with `key`: wanted only if that agrees with the
                // prefix, and some of them may come after `after`.
                let in_prefix =
                    key.starts_with(want.prefix) || want.prefix.starts_with(key.as_str());
                let past = want
                    .after
                    .is_none_or(|a| key.as_str() > a || a.starts_with(key.as_str()));
                if in_prefix && past {
                    let path = dir.join(&*entry.0);
                    self.walk_in_order(&path, &key, want, out)?;
                } else if !in_prefix && key.as_str() > want.prefix {
                    break;
                }
            } else if key.starts_with(want.prefix) && want.after.is_none_or(|a| key.as_str() > a) {
                out.push(key);
            } else if key.as_str() > want.prefix && !key.starts_with(want.prefix) {
                break;
            }
        }
        Ok(())
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
        let inner = &self.inner;
        inner.read(&inner.path(key)?)
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        let key = key.to_string();
        self.mutation(move |inner| inner.put(&key, &body, &cond))
            .await
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        let key = key.to_string();
        self.mutation(move |inner| inner.delete(&key, &cond)).await
    }

    fn atomic_publish(&self) -> bool {
        self.inner.links
    }

    async fn publish(&self, staged: &str, staged_etag: &str, key: &str) -> StoreResult<String> {
        if !self.inner.links {
            return Err(StoreError::Other(
                "the warehouse folder makes no hard links".into(),
            ));
        }
        let (staged, staged_etag, key) =
            (staged.to_string(), staged_etag.to_string(), key.to_string());
        self.mutation(move |inner| inner.publish(&staged, &staged_etag, &key))
            .await
    }

    async fn prune_folders(&self, prefix: &str, older_than: Duration) -> StoreResult<u64> {
        let prefix = prefix.to_string();
        self.blocking(move |inner| inner.prune_folders(&prefix, older_than))
            .await
    }

    async fn remove_leftovers(&self, older_than: Duration) -> StoreResult<u64> {
        self.blocking(move |inner| inner.remove_leftovers(older_than, false))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        // Many listings ask about a folder that does not exist (say, the claims below a new
        // table's data folder): one `stat` answers those here.
        let (dir, _) = self.inner.list_folder(prefix)?;
        if !dir.is_dir() {
            return Ok(Page::default());
        }
        let prefix = prefix.to_string();
        let start_after = start_after.map(str::to_string);
        self.blocking(move |inner| inner.list(&prefix, start_after.as_deref(), limit, shallow))
            .await
    }

    async fn list_with_etags(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        let mut page = self.list(prefix, start_after, limit, shallow).await?;
        let keys = page.keys.clone();
        // A key removed since the walk lists with an ETag no object has: harmless to the
        // callers, which compare ETags to find what changed.
        page.etags = self
            .blocking(move |inner| {
                Ok(keys
                    .iter()
                    .map(|k| {
                        inner
                            .path(k)
                            .ok()
                            .and_then(|p| fs::metadata(p).ok())
                            .map(|m| etag_of(&m))
                            .unwrap_or_default()
                    })
                    .collect())
            })
            .await?;
        Ok(page)
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        let prefix = prefix.to_string();
        self.blocking(move |inner| inner.delete_prefix(&prefix))
            .await
    }

    async fn bytes_under(&self, prefix: &str) -> StoreResult<Option<(u64, u64)>> {
        let prefix = prefix.to_string();
        self.blocking(move |inner| {
            let path = inner.path(prefix.trim_end_matches('/'))?;
            let mut keys = Vec::new();
            inner.walk(&path, &prefix, false, &mut keys)?;
            let bytes = keys
                .iter()
                .filter_map(|k| inner.path(k).ok())
                .filter_map(|p| fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            Ok(Some((keys.len() as u64, bytes)))
        })
        .await
    }

    async fn check(&self) -> StoreResult<()> {
        let meta = fs::metadata(&self.inner.root).map_err(io)?;
        if meta.permissions().readonly() {
            return Err(StoreError::Other("warehouse folder is read-only".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_times_are_trusted_only_on_local_file_systems() {
        // proc's folders are made up as they are read.
        assert!(!keeps_folder_times(Path::new("/proc/self")));
        assert!(!keeps_folder_times(Path::new("/sys/kernel")));
    }
}
