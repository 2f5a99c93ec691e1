//! One conformance suite, run against every store: memory, the local directory, and a real
//! S3-compatible server (SeaweedFS). The catalog's guarantees rest on exactly these
//! behaviours.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::DynStore;
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::s3::{S3Root, S3Store};
use lance_gateway::store::{Condition, Store, StoreError};

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

/// Writes a staged object (a pending entry) and returns its ETag.
async fn stage(store: &DynStore, key: &str, body: &str) -> String {
    store.put(key, b(body), Condition::IfAbsent).await.unwrap()
}

/// `publish`, for stores that move objects: a staged object moves to a free key in one
/// step; a taken key or a staged object that changed leaves everything as it was.
async fn publish_conforms(store: &DynStore) {
    let staged = stage(store, "p/pending/t.json", "rec").await;
    let etag = store
        .publish("p/pending/t.json", &staged, "p/tables/t.json")
        .await
        .unwrap();
    let got = store.get("p/tables/t.json").await.unwrap().unwrap();
    assert_eq!(got.body, b("rec"));
    assert_eq!(got.etag, etag);
    assert!(store.get("p/pending/t.json").await.unwrap().is_none());
    let staged = stage(store, "p/pending/t.json", "other").await;
    let err = store
        .publish("p/pending/t.json", &staged, "p/tables/t.json")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err}");
    assert_eq!(
        store.get("p/tables/t.json").await.unwrap().unwrap().body,
        b("rec")
    );
    assert_eq!(
        store.get("p/pending/t.json").await.unwrap().unwrap().body,
        b("other")
    );
    // the published object is an ordinary object: replaceable by its tag
    store
        .put("p/tables/t.json", b("rec2"), Condition::IfMatch(etag))
        .await
        .unwrap();
    // a staged object replaced or removed since it was staged is not moved
    let old = stage(store, "p/pending/u.json", "mine").await;
    store
        .put(
            "p/pending/u.json",
            b("theirs"),
            Condition::IfMatch(old.clone()),
        )
        .await
        .unwrap();
    let err = store
        .publish("p/pending/u.json", &old, "p/tables/u.json")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::StagedChanged), "{err}");
    assert!(store.get("p/tables/u.json").await.unwrap().is_none());
    assert_eq!(
        store.get("p/pending/u.json").await.unwrap().unwrap().body,
        b("theirs")
    );
    let gone = stage(store, "p/pending/v.json", "v").await;
    store
        .delete("p/pending/v.json", Condition::None)
        .await
        .unwrap();
    let err = store
        .publish("p/pending/v.json", &gone, "p/tables/v.json")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::StagedChanged), "{err}");
    // a publish racing a conditional delete of the staged object: exactly one happens
    for i in 0..20 {
        let staged_key = format!("p/pending/d{i}.json");
        let etag = stage(store, &staged_key, "d").await;
        let (a, b2) = (store.clone(), store.clone());
        let (k1, k2, e1, e2) = (staged_key.clone(), staged_key.clone(), etag.clone(), etag);
        let target = format!("p/tables/d{i}.json");
        let t = target.clone();
        let publish = tokio::spawn(async move { a.publish(&k1, &e1, &t).await.is_ok() });
        let delete =
            tokio::spawn(async move { b2.delete(&k2, Condition::IfMatch(e2)).await.is_ok() });
        let (published, deleted) = (publish.await.unwrap(), delete.await.unwrap());
        assert!(
            published != deleted,
            "round {i}: published {published}, deleted {deleted}"
        );
        assert_eq!(store.get(&target).await.unwrap().is_some(), published);
    }
    // racing publishes of different staged objects to one key: exactly one wins, and the
    // losers keep their staged objects
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (staged, body) = (format!("p/pending/r{i}.json"), format!("r{i}"));
            let etag = stage(&store, &staged, &body).await;
            store.publish(&staged, &etag, "p/tables/r.json").await
        }));
    }
    let mut winners = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(_) => winners.push(i),
            Err(StoreError::PreconditionFailed) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(
        store.get("p/tables/r.json").await.unwrap().unwrap().body,
        b(&format!("r{}", winners[0]))
    );
    for i in (0..8).filter(|i| !winners.contains(i)) {
        let kept = store.get(&format!("p/pending/r{i}.json")).await.unwrap();
        assert_eq!(kept.map(|o| o.body), Some(b(&format!("r{i}"))), "loser {i}");
    }
    store.delete_prefix("p/").await.unwrap();
}

async fn conformance(store: DynStore) {
    // get of a missing object
    assert!(store.get("a/missing.json").await.unwrap().is_none());

    // create-if-absent: first wins, second fails and leaves the first intact
    let e1 = store
        .put("a/x.json", b("one"), Condition::IfAbsent)
        .await
        .unwrap();
    let err = store
        .put("a/x.json", b("two"), Condition::IfAbsent)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed), "{err}");
    let got = store.get("a/x.json").await.unwrap().unwrap();
    assert_eq!(got.body, b("one"));
    assert_eq!(got.etag, e1);

    // replace-if-match: right tag succeeds and changes the tag; stale tag fails
    let e2 = store
        .put("a/x.json", b("three"), Condition::IfMatch(e1.clone()))
        .await
        .unwrap();
    assert_ne!(e1, e2);
    let err = store
        .put("a/x.json", b("four"), Condition::IfMatch(e1.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed));
    assert_eq!(
        store.get("a/x.json").await.unwrap().unwrap().body,
        b("three")
    );
    // (S3 tags are content hashes, so rewriting identical bytes may keep the tag; the
    // catalog never depends on a tag changing without a content change.)
    let e3 = store
        .put("a/x.json", b("three!"), Condition::IfMatch(e2.clone()))
        .await
        .unwrap();
    assert_ne!(e2, e3);
    // if-match on a missing object fails
    let err = store
        .put("a/none.json", b("x"), Condition::IfMatch(e3.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed));
    assert!(store.get("a/none.json").await.unwrap().is_none());

    // conditional delete: stale tag refused, right tag deletes
    let err = store
        .delete("a/x.json", Condition::IfMatch(e2.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PreconditionFailed));
    assert!(store.get("a/x.json").await.unwrap().is_some());
    store
        .delete("a/x.json", Condition::IfMatch(e3))
        .await
        .unwrap();
    assert!(store.get("a/x.json").await.unwrap().is_none());
    // unconditional delete of nothing succeeds
    store.delete("a/x.json", Condition::None).await.unwrap();

    if store.atomic_publish() {
        publish_conforms(&store).await;
    } else {
        let staged = stage(&store, "p/pending/t.json", "rec").await;
        let err = store
            .publish("p/pending/t.json", &staged, "p/tables/t.json")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Other(_)), "{err}");
        assert!(store.get("p/tables/t.json").await.unwrap().is_none());
        store.delete_prefix("p/").await.unwrap();
    }

    // listing: order, start-after, limit, shallow vs deep
    for key in [
        "l/b.json",
        "l/a.json",
        "l/c.json",
        "l/sub/d.json",
        "l/sub/e.json",
        "m/z.json",
    ] {
        store.put(key, b(key), Condition::None).await.unwrap();
    }
    let page = store.list("l/", None, 10, true).await.unwrap();
    assert_eq!(page.keys, vec!["l/a.json", "l/b.json", "l/c.json"]);
    assert!(!page.more);
    let page = store.list("l/", None, 10, false).await.unwrap();
    assert_eq!(
        page.keys,
        vec![
            "l/a.json",
            "l/b.json",
            "l/c.json",
            "l/sub/d.json",
            "l/sub/e.json"
        ]
    );
    let page = store.list("l/", None, 2, true).await.unwrap();
    assert_eq!(page.keys, vec!["l/a.json", "l/b.json"]);
    assert!(page.more);
    let page = store.list("l/", Some("l/b.json"), 2, true).await.unwrap();
    assert_eq!(page.keys, vec!["l/c.json"]);
    assert!(!page.more);
    let page = store.list("l/", Some("l/c.json"), 10, false).await.unwrap();
    assert_eq!(page.keys, vec!["l/sub/d.json", "l/sub/e.json"]);
    let page = store.list("nothing/", None, 10, false).await.unwrap();
    assert!(page.keys.is_empty() && !page.more);

    // a walk with limit 1 sees every key exactly once
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list("l/", after.as_deref(), 1, false).await.unwrap();
        seen.extend(page.keys.clone());
        after = page.keys.last().cloned();
        if !page.more {
            break;
        }
    }
    assert_eq!(seen.len(), 5);

    // a listing with ETags gives each key the ETag a read gives, and a new one once the
    // object is replaced
    let page = store.list_with_etags("l/", None, 10, false).await.unwrap();
    assert_eq!(page.keys.len(), 5);
    assert_eq!(page.etags.len(), 5);
    for (key, etag) in page.keys.iter().zip(&page.etags) {
        assert_eq!(&store.get(key).await.unwrap().unwrap().etag, etag, "{key}");
    }
    store
        .put("l/a.json", b("replaced, longer"), Condition::None)
        .await
        .unwrap();
    let again = store.list_with_etags("l/", None, 1, true).await.unwrap();
    assert_eq!(again.keys, vec!["l/a.json"]);
    assert_ne!(again.etags[0], page.etags[0]);
    assert_eq!(
        again.etags[0],
        store.get("l/a.json").await.unwrap().unwrap().etag
    );

    // delete_prefix removes everything below, nothing beside
    let n = store.delete_prefix("l/").await.unwrap();
    assert_eq!(n, 5);
    assert!(
        store
            .list("l/", None, 10, false)
            .await
            .unwrap()
            .keys
            .is_empty()
    );
    assert!(store.get("m/z.json").await.unwrap().is_some());

    // byte order of whole keys, whatever the folders: '-' and '.' sort before '/', '0'
    // after it; a prefix may end inside a name; a walk page by page from any key gives
    // what one listing gives
    let keys = [
        "o/sub/d.json",
        "o/sub-x.json",
        "o/sub.json",
        "o/sub0.json",
        "o/sub/deep/f.json",
        "o/su.json",
        "o/t.json",
    ];
    for key in keys {
        store.put(key, b(key), Condition::None).await.unwrap();
    }
    let mut sorted: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    sorted.sort();
    let all = store.list("o/", None, 100, false).await.unwrap();
    assert_eq!(all.keys, sorted);
    let sub: Vec<String> = sorted
        .iter()
        .filter(|k| k.starts_with("o/sub"))
        .cloned()
        .collect();
    assert_eq!(
        store.list("o/sub", None, 100, false).await.unwrap().keys,
        sub
    );
    for (i, after) in sorted.iter().enumerate() {
        for limit in [1, 2, 100] {
            let page = store.list("o/", Some(after), limit, false).await.unwrap();
            let rest = &sorted[i + 1..];
            assert_eq!(
                page.keys,
                rest[..rest.len().min(limit)],
                "after {after}, {limit}"
            );
            assert_eq!(page.more, rest.len() > limit, "after {after}, {limit}");
        }
    }
    // `after` need not be a key: between keys, and inside a folder's range
    let page = store.list("o/", Some("o/sub/a"), 100, false).await.unwrap();
    assert_eq!(page.keys[0], "o/sub/d.json");
    let page = store.list("o/", Some("o/sub/e"), 100, false).await.unwrap();
    assert_eq!(page.keys[0], "o/sub0.json");
    store.delete_prefix("o/").await.unwrap();

    // concurrent create-if-absent: exactly one winner
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .put("race/k.json", b(&i.to_string()), Condition::IfAbsent)
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::PreconditionFailed) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(wins, 1);

    // concurrent replace-if-match from one tag: exactly one winner
    let tag = store.get("race/k.json").await.unwrap().unwrap().etag;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            store
                .put("race/k.json", b(&format!("r{i}")), Condition::IfMatch(tag))
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1);
    store.check().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_conforms() {
    conformance(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    conformance(Arc::new(FsStore::open(dir.path()).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_without_sync_conforms() {
    // Without fs_sync the store works on the calling task instead of the blocking pool.
    let dir = tempfile::tempdir().unwrap();
    conformance(Arc::new(
        FsStore::open_with_sync(dir.path(), false).unwrap(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_without_hard_links_conforms() {
    // As on a file system that refuses hard links: no publish.
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open_with_sync(dir.path(), false).unwrap();
    conformance(Arc::new(store.without_hard_links())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_moves_objects_where_links_work() {
    let dir = tempfile::tempdir().unwrap();
    assert!(FsStore::open(dir.path()).unwrap().atomic_publish());
    let store = FsStore::open(dir.path()).unwrap().without_hard_links();
    assert!(!store.atomic_publish());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_tags_never_repeat() {
    // Rewrites of identical bytes, and deletes followed by creates that reuse the freed
    // inode, all within one kernel timer tick: every tag is new, so a stale IfMatch fails.
    let dir = tempfile::tempdir().unwrap();
    let store: DynStore = Arc::new(FsStore::open_with_sync(dir.path(), false).unwrap());
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let etag = store
            .put("t/k.json", b("same"), Condition::None)
            .await
            .unwrap();
        assert!(seen.insert(etag.clone()), "tag {etag} repeated");
        store
            .delete("t/k.json", Condition::IfMatch(etag.clone()))
            .await
            .unwrap();
        let again = store
            .put("t/k.json", b("same"), Condition::IfAbsent)
            .await
            .unwrap();
        assert!(
            seen.insert(again.clone()),
            "tag {again} repeated after a delete"
        );
        let err = store
            .delete("t/k.json", Condition::IfMatch(etag))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::PreconditionFailed));
        store.delete("t/k.json", Condition::None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_removes_temporary_files_of_killed_writers() {
    let dir = tempfile::tempdir().unwrap();
    drop(FsStore::open(dir.path()).unwrap());
    let tmp = dir.path().join(".lance-gateway/tmp");
    let legacy_dir = dir.path().join(".lance-gateway/tables/ns");
    std::fs::create_dir_all(&legacy_dir).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let make = |path: std::path::PathBuf, modified: std::time::SystemTime| {
        let f = std::fs::File::create(&path).unwrap();
        f.set_modified(modified).unwrap();
        path
    };
    let stale = make(tmp.join("abandoned"), old);
    let legacy = make(legacy_dir.join(".tmp-abandoned"), old);
    let fresh = make(tmp.join("in-flight"), std::time::SystemTime::now());
    let store = FsStore::open(dir.path()).unwrap();
    assert!(
        !stale.exists() && !legacy.exists(),
        "old temporary files are removed at open"
    );
    assert!(fresh.exists(), "a write in flight keeps its file");
    let stale = make(tmp.join("abandoned-later"), old);
    let store: DynStore = Arc::new(store);
    assert_eq!(
        store
            .remove_leftovers(std::time::Duration::from_secs(60))
            .await
            .unwrap(),
        1
    );
    assert!(!stale.exists() && fresh.exists());
    // Temporary files are never listed, and no key can name one.
    assert!(
        store
            .list(".lance-gateway/", None, 10, false)
            .await
            .unwrap()
            .keys
            .is_empty()
    );
    assert!(store.get(".lance-gateway/tmp/in-flight").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_reads_every_write_of_the_same_size_whoever_wrote_it() {
    // A body read before is answered again only while the file's tag is the one it was
    // read at: rewrites of the same length, here or by another process, are read anew.
    let dir = tempfile::tempdir().unwrap();
    let a: DynStore = Arc::new(FsStore::open_with_sync(dir.path(), false).unwrap());
    let other: DynStore = Arc::new(FsStore::open_with_sync(dir.path(), false).unwrap());
    let mut etag = a
        .put("r.json", b("aaaa"), Condition::IfAbsent)
        .await
        .unwrap();
    for (i, (writer, body)) in [
        (&a, "bbbb"),
        (&other, "cccc"),
        (&a, "dddd"),
        (&other, "eeee"),
    ]
    .into_iter()
    .enumerate()
    {
        let read = a.get("r.json").await.unwrap().unwrap();
        assert_eq!(read.etag, etag, "round {i}");
        etag = writer
            .put("r.json", b(body), Condition::IfMatch(etag))
            .await
            .unwrap();
        let read = a.get("r.json").await.unwrap().unwrap();
        assert_eq!((read.body, &read.etag), (b(body), &etag), "round {i}");
    }
    other.delete("r.json", Condition::None).await.unwrap();
    assert!(a.get("r.json").await.unwrap().is_none());
}

/// Every key under `prefix`, walked in pages of `limit`.
async fn walk(store: &DynStore, prefix: &str, limit: usize) -> Vec<String> {
    let (mut keys, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = store
            .list(prefix, after.as_deref(), limit, false)
            .await
            .unwrap();
        after = page.keys.last().cloned();
        keys.extend(page.keys);
        if !page.more {
            return keys;
        }
    }
}

/// Backdates a folder's modification time, as if nothing had changed in it for a minute.
fn settle(dir: &std::path::Path) {
    let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(minute_ago)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_lists_a_large_settled_folder_exactly_across_handles() {
    // A folder of thousands of entries, unchanged for a while, is listed page by page from
    // its sorted entries kept in memory: every change, by this handle or another process,
    // shows in the next listing.
    let dir = tempfile::tempdir().unwrap();
    let a: DynStore = Arc::new(FsStore::open_with_sync(dir.path(), false).unwrap());
    let other: DynStore = Arc::new(FsStore::open_with_sync(dir.path(), false).unwrap());
    let mut expected: Vec<String> = (0..3000).map(|i| format!("big/t{i:05}.json")).collect();
    // A folder among the files sorts as its keys do ("t01500-x.json" < "t01500.json" <
    // "t01500/x.json" < "t01501.json").
    expected.extend(["big/t01500/x.json".into(), "big/t01500-x.json".into()]);
    for key in &expected {
        a.put(key, b(key), Condition::None).await.unwrap();
    }
    expected.sort();
    settle(&dir.path().join("big"));
    for limit in [1000, 100, 7] {
        assert_eq!(walk(&a, "big/", limit).await, expected, "pages of {limit}");
    }
    // From the middle, and with a narrower prefix.
    let page = a.list("big/", Some("big/t01500/"), 3, false).await.unwrap();
    assert_eq!(
        page.keys,
        ["big/t01500/x.json", "big/t01501.json", "big/t01502.json"]
    );
    let page = a
        .list("big/", Some("big/t01499.json"), 4, false)
        .await
        .unwrap();
    assert_eq!(
        page.keys,
        [
            "big/t01500-x.json",
            "big/t01500.json",
            "big/t01500/x.json",
            "big/t01501.json"
        ]
    );
    let page = a.list("big/t0299", None, 100, false).await.unwrap();
    assert_eq!(page.keys.len(), 10);
    assert!(!page.more);

    // Another process adds and removes entries: the next listing has them.
    other
        .put("big/t00042a.json", b("x"), Condition::None)
        .await
        .unwrap();
    other
        .delete("big/t00007.json", Condition::None)
        .await
        .unwrap();
    expected.push("big/t00042a.json".into());
    expected.retain(|k| k != "big/t00007.json");
    expected.sort();
    assert_eq!(walk(&a, "big/", 100).await, expected);
    // Settled again, and changed by this handle.
    settle(&dir.path().join("big"));
    assert_eq!(walk(&a, "big/", 100).await, expected);
    a.delete("big/t02999.json", Condition::None).await.unwrap();
    expected.retain(|k| k != "big/t02999.json");
    assert_eq!(walk(&other, "big/", 100).await, expected);
    assert_eq!(walk(&a, "big/", 100).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_is_consistent_across_two_handles() {
    // Two handles on one folder stand in for two processes: the lock is a file lock.
    let dir = tempfile::tempdir().unwrap();
    let a: DynStore = Arc::new(FsStore::open(dir.path()).unwrap());
    let b2: DynStore = Arc::new(FsStore::open(dir.path()).unwrap());
    let mut tasks = Vec::new();
    for i in 0..20 {
        let s = if i % 2 == 0 { a.clone() } else { b2.clone() };
        tasks.push(tokio::spawn(async move {
            s.put("k.json", b("v"), Condition::IfAbsent).await.is_ok()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += t.await.unwrap() as i32;
    }
    assert_eq!(wins, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_store_conforms() {
    let env = common::s3_env();
    let client = common::s3_client(&env).await;
    let bucket = common::fresh_bucket(&client, "conf").await;
    // The SDK alone, and as the gateway runs it (single-object reads through object_store).
    conformance(Arc::new(S3Store::new(
        client.clone(),
        S3Root::Bucket {
            bucket: bucket.clone(),
            prefix: "wh/".into(),
        },
    )))
    .await;
    let read_bucket = common::fresh_bucket(&client, "confr").await;
    conformance(Arc::new(common::s3_store(
        &env,
        client.clone(),
        S3Root::Bucket {
            bucket: read_bucket,
            prefix: "wh/".into(),
        },
    )))
    .await;
    // Endpoint mode: the first key segment is the bucket.
    let store: DynStore = Arc::new(common::s3_store(&env, client.clone(), S3Root::Endpoint));
    let key = format!("{bucket}/ep/x.json");
    let etag = store
        .put(&key, b("e"), Condition::IfAbsent)
        .await
        .unwrap_or_else(|e| panic!("writing {key}: {e}"));
    let read = store
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("reading {key}: {e}"))
        .unwrap_or_else(|| panic!("{key} reads as missing right after its write"));
    assert_eq!((read.body, read.etag), (b("e"), etag));
    assert!(
        store
            .get(&format!("{bucket}/ep/none.json"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        matches!(
            store.get("lg-no-such-bucket-here/x.json").await,
            Err(StoreError::NoSuchBucket(b)) if b == "lg-no-such-bucket-here"
        ),
        "a read in a missing bucket says so"
    );
    // Keys object_store cannot name as they are are read all the same (by the SDK).
    for odd in ["odd//double.json", "odd/tab\tkey.json", "odd/trailing/"] {
        let odd = format!("{bucket}/{odd}");
        store
            .put(&odd, b("odd"), Condition::None)
            .await
            .unwrap_or_else(|e| panic!("writing {odd:?}: {e}"));
        assert_eq!(
            store.get(&odd).await.unwrap().unwrap().body,
            b("odd"),
            "{odd}"
        );
    }
    assert_eq!(
        store
            .list(&format!("{bucket}/ep/"), None, 5, true)
            .await
            .unwrap()
            .keys,
        vec![key.clone()]
    );
    let other = common::fresh_bucket(&client, "ep").await;
    assert!(store.list_buckets().await.unwrap().contains(&other));
    assert!(store.remove_bucket_if_empty(&other).await.unwrap());
    assert!(
        !store.remove_bucket_if_empty(&bucket).await.unwrap(),
        "a bucket with objects is kept"
    );
    store.ensure_bucket(&bucket).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_store_prunes_empty_folders_without_losing_a_write() {
    // Folders emptied by deletes are pruned (only below the prefix's own folder, only when
    // empty), while other handles keep writing and publishing into folders that come and
    // go: every write lands and every key written and not deleted is listed.
    let dir = tempfile::tempdir().expect("a scratch folder");
    let store: DynStore = Arc::new(FsStore::open(dir.path()).expect("the local store opens"));
    store
        .put("p/a/x.json", b("x"), Condition::None)
        .await
        .expect("the write lands");
    store
        .put("p/b/c/y.json", b("y"), Condition::None)
        .await
        .expect("the write lands");
    store
        .put("p/d/e/z.json", b("z"), Condition::None)
        .await
        .expect("the write lands");
    store
        .delete("p/a/x.json", Condition::None)
        .await
        .expect("the delete lands");
    store
        .delete("p/d/e/z.json", Condition::None)
        .await
        .expect("the delete lands");
    let minute = std::time::Duration::from_secs(60);
    assert_eq!(
        store
            .prune_folders("p/", minute / 2)
            .await
            .expect("the prune runs"),
        0,
        "emptied just now: kept for the grace period"
    );
    for folder in ["p/a", "p/d/e", "p/d"] {
        settle(&dir.path().join(folder));
    }
    assert_eq!(
        store
            .prune_folders("p/", minute / 2)
            .await
            .expect("the prune runs"),
        2,
        "p/a and p/d/e (p/d changed as p/d/e went)"
    );
    assert_eq!(
        store
            .prune_folders("p/", std::time::Duration::ZERO)
            .await
            .expect("the prune runs"),
        1,
        "p/d"
    );
    assert!(!dir.path().join("p/a").exists() && !dir.path().join("p/d").exists());
    assert!(
        dir.path().join("p").is_dir(),
        "the prefix's own folder stays"
    );
    assert_eq!(
        walk(&store, "p/", 10).await,
        vec!["p/b/c/y.json".to_string()]
    );
    store
        .put("p/a/x.json", b("again"), Condition::IfAbsent)
        .await
        .expect("the write lands");
    assert_eq!(
        store
            .get("p/a/x.json")
            .await
            .expect("read")
            .expect("written again")
            .body,
        b("again")
    );

    let writers: Vec<DynStore> = (0..2)
        .map(|_| Arc::new(FsStore::open(dir.path()).expect("the local store opens")) as DynStore)
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pruner = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut pruned = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pruned += store
                    .prune_folders("q/", std::time::Duration::ZERO)
                    .await
                    .expect("the prune runs");
                tokio::task::yield_now().await;
            }
            pruned
        })
    };
    let mut kept = Vec::new();
    let mut tasks = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        for i in 0..150 {
            let writer = writer.clone();
            // Each key in a folder of its own, made by its write: many folders made while
            // the pruner runs.
            let (folder, key) = (format!("q/n{}/{w}-{i}", i % 7), format!("w{w}-{i}.json"));
            if i % 3 != 0 {
                kept.push(format!("{folder}/{key}"));
            }
            tasks.push(tokio::spawn(async move {
                let target = format!("{folder}/{key}");
                if i % 2 == 0 {
                    writer
                        .put(&target, b("v"), Condition::IfAbsent)
                        .await
                        .expect("the write lands");
                } else {
                    let staged = format!("q/staged/n{}/{i}/{key}", i % 5);
                    let etag = writer
                        .put(&staged, b("v"), Condition::IfAbsent)
                        .await
                        .expect("the write lands");
                    writer
                        .publish(&staged, &etag, &target)
                        .await
                        .expect("the publish lands");
                }
                if i % 3 == 0 {
                    writer
                        .delete(&target, Condition::None)
                        .await
                        .expect("the delete lands");
                }
            }));
        }
    }
    for task in tasks {
        task.await
            .expect("every write and publish lands while folders are pruned");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let pruned = pruner.await.expect("the pruner ends")
        + store
            .prune_folders("q/", std::time::Duration::ZERO)
            .await
            .expect("the prune runs");
    let mut listed = walk(&store, "q/", 100).await;
    listed.sort();
    kept.sort();
    assert_eq!(listed, kept, "every key written and not deleted is there");
    assert!(
        pruned >= 6 && !dir.path().join("q/staged").exists(),
        "the staged folders, emptied by the publishes, are gone ({pruned} pruned)"
    );
}

/// Deletes and replaces racing from one tag: exactly one of them wins, and what is left is
/// what the winner did (on GCS the delete's precondition is a generation, on Azure an ETag).
async fn conditional_delete_races(store: DynStore) {
    for round in 0..4 {
        let key = format!("dr/{round}.json");
        let tag = store.put(&key, b("v0"), Condition::IfAbsent).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (store, key, tag) = (store.clone(), key.clone(), tag.clone());
            tasks.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    store
                        .delete(&key, Condition::IfMatch(tag))
                        .await
                        .map(|_| None)
                } else {
                    store
                        .put(&key, b(&format!("r{i}")), Condition::IfMatch(tag))
                        .await
                        .map(|_| Some(format!("r{i}")))
                }
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(w) => winners.push(w),
                Err(StoreError::PreconditionFailed) => {}
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let left = store.get(&key).await.unwrap().map(|o| o.body);
        assert_eq!(left, winners[0].as_deref().map(b), "round {round}");
    }
    store.delete_prefix("dr/").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gcs_store_conforms() {
    let (store, _) = common::gcs_store("conf");
    let store: DynStore = Arc::new(store);
    conformance(store.clone()).await;
    conditional_delete_races(store).await;
    // A bucket that is not there is said so at the check a gateway makes at start.
    let env = common::cloud_env();
    let missing = lance_gateway::store::gcs::GcsStore::new(
        &env.gcs_endpoint,
        "lg-no-such-bucket",
        "",
        lance_gateway::store::gcs::GcsAuth::Anonymous,
    )
    .unwrap();
    assert!(matches!(
        missing.check().await,
        Err(StoreError::NoSuchBucket(b)) if b == "lg-no-such-bucket"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_conforms() {
    let (store, _) = common::azure_store("conf");
    let store: DynStore = Arc::new(store);
    conformance(store.clone()).await;
    conditional_delete_races(store).await;
    let env = common::cloud_env();
    let missing = lance_gateway::store::azure::AzureStore::connect(
        &env.azure_account,
        Some(&env.azure_key),
        Some(&env.azure_endpoint),
        "lg-no-such-container",
        "",
    )
    .unwrap();
    assert!(matches!(
        missing.check().await,
        Err(StoreError::NoSuchBucket(b)) if b == "lg-no-such-container"
    ));
    // A key that signs nothing Azurite accepts is refused, not taken for a missing object.
    let wrong = lance_gateway::store::azure::AzureStore::connect(
        &env.azure_account,
        Some("d3Jvbmcga2V5"),
        Some(&env.azure_endpoint),
        &env.bucket,
        "",
    )
    .unwrap();
    assert!(matches!(wrong.check().await, Err(StoreError::Denied(_))));
    assert!(matches!(
        wrong.get("x.json").await,
        Err(StoreError::Denied(_))
    ));
    assert!(matches!(
        wrong.put("x.json", b("x"), Condition::IfAbsent).await,
        Err(StoreError::Denied(_))
    ));
}
