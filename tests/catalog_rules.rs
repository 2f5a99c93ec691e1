//! The catalog's rules, run against every store: the memory store, the local directory and
//! SeaweedFS over S3 (bucket-prefix and endpoint modes).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::{
    Catalog, CreateMode, DatasetDetails, DatasetReader, DropBehavior, DropMode, recovery,
};
use lance_gateway::error::{Code, Result};
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::s3::{S3Root, S3Store};
use lance_gateway::store::{Condition, Store};

/// The rules never read datasets; describing one is the data plane's job.
struct NoDatasets;

#[async_trait]
impl DatasetReader for NoDatasets {
    async fn describe(&self, _location: &str) -> Result<DatasetDetails> {
        Ok(DatasetDetails::default())
    }
}

fn id(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

async fn open(store: Arc<dyn Store>, warehouse: Warehouse, grace: Duration) -> Arc<Catalog> {
    Arc::new(
        Catalog::open(store, Layout::new(warehouse), Arc::new(NoDatasets), grace)
            .await
            .unwrap(),
    )
}

/// A new namespace with a unique name under `base`, for one scenario.
async fn scratch_namespace(cat: &Catalog, base: &[String], tag: &str) -> Vec<String> {
    let mut ns = base.to_vec();
    ns.push(common::unique(tag));
    cat.create_namespace(&ns, CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    ns
}

/// Drops a scenario's namespace with everything in it; it must succeed.
async fn remove_namespace(cat: &Catalog, ns: &[String]) {
    cat.drop_namespace(ns, DropMode::Fail, DropBehavior::Cascade)
        .await
        .unwrap();
}

/// The rules, given a catalog and the id prefix every id must start with (a bucket in
/// endpoint mode, nothing otherwise).
async fn rules(cat: Arc<Catalog>, base: Vec<String>) {
    let with = |rest: &[&str]| {
        let mut v = base.clone();
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let props: HashMap<String, String> = [("owner".to_string(), "ml".to_string())].into();

    // namespaces: create, modes, nesting, describe
    cat.create_namespace(&with(&["ml"]), CreateMode::Create, props.clone())
        .await
        .unwrap();
    let err = cat
        .create_namespace(&with(&["ml"]), CreateMode::Create, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceAlreadyExists);
    let kept = cat
        .create_namespace(&with(&["ml"]), CreateMode::ExistOk, HashMap::new())
        .await
        .unwrap();
    assert_eq!(kept, props, "ExistOk returns the existing properties");
    assert_eq!(cat.describe_namespace(&with(&["ml"])).await.unwrap(), props);
    cat.create_namespace(&with(&["ml", "deep"]), CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    cat.create_namespace(
        &with(&["ml", "deep", "er"]),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    let err = cat
        .create_namespace(
            &with(&["nope", "child"]),
            CreateMode::Create,
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound, "parent must exist");
    assert_eq!(
        cat.list_namespaces(&with(&["ml"]), None, None)
            .await
            .unwrap()
            .items,
        vec!["deep"]
    );

    // tables: declare, duplicate, describe, list
    let t = cat
        .declare_table(&with(&["ml", "emb"]), None, HashMap::new())
        .await
        .unwrap();
    assert!(t.location.ends_with("ml/emb.lance"), "{}", t.location);
    let err = cat
        .declare_table(&with(&["ml", "emb"]), None, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::TableAlreadyExists);
    let err = cat
        .declare_table(&with(&["gone", "t"]), None, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound);
    // ...and leaves nothing behind: once the namespace exists, the same declare gets the
    // plain folder (the failed one's claim on it was released).
    cat.create_namespace(&with(&["gone"]), CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    let t2 = cat
        .declare_table(&with(&["gone", "t"]), None, HashMap::new())
        .await
        .unwrap();
    assert!(t2.location.ends_with("gone/t.lance"), "{}", t2.location);
    cat.drop_namespace(&with(&["gone"]), DropMode::Fail, DropBehavior::Cascade)
        .await
        .unwrap();
    assert_eq!(
        cat.describe_table(&with(&["ml", "emb"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    assert_eq!(
        cat.describe_table(&with(&["ml", "x"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    assert_eq!(
        cat.describe_table(&with(&["zz", "x"]))
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    assert!(
        !cat.has_data(&t).await.unwrap(),
        "a declared table holds no data yet"
    );

    // client locations: inside the warehouse, no overlap with another table
    let cell = base.first().map(|b| format!("{b}/")).unwrap_or_default();
    let loc = cat.layout().uri_of(&format!("{cell}custom/place.lance"));
    let c = cat
        .declare_table(&with(&["ml", "custom"]), Some(&loc), HashMap::new())
        .await
        .unwrap();
    assert_eq!(c.location, loc);
    let nested = format!("{loc}/inner");
    let err = cat
        .declare_table(&with(&["ml", "nested"]), Some(&nested), HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput, "{err}");
    let err = cat
        .declare_table(&with(&["ml", "same"]), Some(&loc), HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    let err = cat
        .declare_table(
            &with(&["ml", "esc"]),
            Some("s3://elsewhere/x/../y"),
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    assert_eq!(
        cat.describe_table(&with(&["ml", "nested"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound,
        "a refused declare leaves nothing"
    );

    // pagination: every name exactly once, whatever the limit
    for i in 0..7 {
        cat.declare_table(&with(&["ml", &format!("p{i}")]), None, HashMap::new())
            .await
            .unwrap();
    }
    let all = cat
        .list_tables(&with(&["ml"]), None, None, true)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 9);
    assert!(all.next.is_none());
    for limit in [1, 2, 3, 8, 9, 50] {
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = cat
                .list_tables(&with(&["ml"]), token.as_deref(), Some(limit), true)
                .await
                .unwrap();
            assert!(page.items.len() <= limit);
            seen.extend(page.items);
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(seen, all.items, "limit {limit}");
    }
    let declared_only = cat
        .list_tables(&with(&["ml"]), None, None, false)
        .await
        .unwrap();
    assert!(
        declared_only.items.is_empty(),
        "include_declared=false hides tables without data"
    );
    let everything = cat.list_all_tables("$", None, None, true).await.unwrap();
    assert!(everything.items.contains(&with(&["ml", "emb"]).join("$")));

    // rename within and across namespaces; the location does not move
    cat.rename_table(&with(&["ml", "emb"]), &with(&["ml", "emb2"]))
        .await
        .unwrap();
    assert_eq!(
        cat.describe_table(&with(&["ml", "emb"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    assert_eq!(
        cat.describe_table(&with(&["ml", "emb2"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    cat.rename_table(&with(&["ml", "emb2"]), &with(&["ml", "deep", "emb3"]))
        .await
        .unwrap();
    assert_eq!(
        cat.describe_table(&with(&["ml", "deep", "emb3"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    let err = cat
        .rename_table(&with(&["ml", "p0"]), &with(&["ml", "p1"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::TableAlreadyExists);
    let err = cat
        .rename_table(&with(&["ml", "p0"]), &with(&["nowhere", "p0"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound);
    // the old name can be declared again, and gets a folder of its own
    let again = cat
        .declare_table(&with(&["ml", "emb"]), None, HashMap::new())
        .await
        .unwrap();
    assert_ne!(again.location, t.location);

    // drop namespace: restrict refuses, skip tolerates, cascade empties
    let err = cat
        .drop_namespace(&with(&["ml"]), DropMode::Fail, DropBehavior::Restrict)
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotEmpty);
    assert_eq!(
        cat.drop_namespace(&with(&["none"]), DropMode::Fail, DropBehavior::Restrict)
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    cat.drop_namespace(&with(&["none"]), DropMode::Skip, DropBehavior::Restrict)
        .await
        .unwrap();
    // deregister keeps data; drop deletes it
    let dereg = cat.drop_table(&with(&["ml", "p0"]), false).await.unwrap();
    assert_eq!(
        cat.describe_table(&with(&["ml", "p0"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    let _ = dereg;
    cat.drop_namespace(&with(&["ml"]), DropMode::Fail, DropBehavior::Cascade)
        .await
        .unwrap();
    assert_eq!(
        cat.describe_namespace(&with(&["ml"]))
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    assert_eq!(
        cat.describe_table(&with(&["ml", "deep", "emb3"]))
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    assert!(
        cat.list_all_tables("$", None, None, true)
            .await
            .unwrap()
            .items
            .iter()
            .all(|t| !t.starts_with(&with(&["ml"]).join("$")))
    );

    // Overwrite: replaces properties of an empty namespace, refuses a non-empty one
    cat.create_namespace(&with(&["ow"]), CreateMode::Create, props.clone())
        .await
        .unwrap();
    let fresh: HashMap<String, String> = [("k".to_string(), "v".to_string())].into();
    assert_eq!(
        cat.create_namespace(&with(&["ow"]), CreateMode::Overwrite, fresh.clone())
            .await
            .unwrap(),
        fresh
    );
    assert_eq!(cat.describe_namespace(&with(&["ow"])).await.unwrap(), fresh);
    cat.declare_table(&with(&["ow", "t"]), None, HashMap::new())
        .await
        .unwrap();
    assert_eq!(
        cat.create_namespace(&with(&["ow"]), CreateMode::Overwrite, HashMap::new())
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotEmpty
    );
    cat.drop_namespace(&with(&["ow"]), DropMode::Fail, DropBehavior::Cascade)
        .await
        .unwrap();
}

/// 32 concurrent declares of one name: exactly one success, every other a TableAlreadyExists.
async fn declare_race(cat: Arc<Catalog>, base: Vec<String>) {
    let ns = scratch_namespace(&cat, &base, "race").await;
    let mut table = ns.clone();
    table.push("t".into());
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let cat = cat.clone();
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            cat.declare_table(&table, None, HashMap::new()).await
        }));
    }
    let (mut ok, mut exists) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) if e.code == Code::TableAlreadyExists => exists += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!((ok, exists), (1, 31));
}

/// Creates racing a namespace drop: afterwards no table is left under a missing namespace.
async fn create_drop_race(cat: Arc<Catalog>, base: Vec<String>) {
    for round in 0..8 {
        let mut ns = base.clone();
        ns.push(format!("{}{round}", common::unique("cd")));
        cat.create_namespace(&ns, CreateMode::Create, HashMap::new())
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for i in 0..6 {
            let cat = cat.clone();
            let mut t = ns.clone();
            t.push(format!("t{i}"));
            tasks.push(tokio::spawn(async move {
                let _ = cat.declare_table(&t, None, HashMap::new()).await;
            }));
        }
        let dropper = {
            let cat = cat.clone();
            let ns = ns.clone();
            tokio::spawn(async move {
                cat.drop_namespace(&ns, DropMode::Fail, DropBehavior::Restrict)
                    .await
            })
        };
        for t in tasks {
            t.await.unwrap();
        }
        let dropped = dropper.await.unwrap().is_ok();
        let listed = cat
            .list_all_tables("$", None, None, true)
            .await
            .unwrap()
            .items;
        let prefix = format!("{}$", ns.join("$"));
        let under: Vec<_> = listed.iter().filter(|t| t.starts_with(&prefix)).collect();
        if dropped {
            assert!(
                under.is_empty(),
                "tables {under:?} left under dropped namespace"
            );
        } else {
            assert!(cat.namespace_exists(&ns).await.is_ok());
        }
    }
}

/// A crash between steps: intents left behind are settled by recovery once stale.
async fn recovery_settles(cat: Arc<Catalog>, base: Vec<String>) {
    let ns = scratch_namespace(&cat, &base, "rec").await;
    let mut t = ns.clone();
    t.push("t".into());
    let rec = cat.declare_table(&t, None, HashMap::new()).await.unwrap();
    // Simulate a drop that crashed right after deleting the table record: the drop intent and
    // the location claim are left behind.
    let store = cat.store().clone();
    let cell = base.first().map(|b| format!("{b}/")).unwrap_or_default();

    let intent =
        serde_json::json!({"format_version": 1, "op": "drop", "started_at_ms": 1, "table": rec});
    store
        .put(
            &Layout::drop_key(&cell, &rec.uid),
            bytes::Bytes::from(intent.to_string()),
            Condition::None,
        )
        .await
        .unwrap();
    store
        .put(
            &format!("{}/_versions/1.manifest", rec.data_key),
            bytes::Bytes::from_static(b"m"),
            Condition::None,
        )
        .await
        .unwrap();
    let key = cat.table_key(&t).unwrap();
    store.delete(&key, Condition::None).await.unwrap();
    // A declare at the same place is refused while the claim is held...
    let err = cat
        .declare_table(&t, Some(&rec.location), HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    recovery::sweep(&cat).await.unwrap();
    // ...and accepted once recovery has finished the drop (data deleted, claim released).
    assert!(
        store
            .list(&format!("{}/", rec.data_key), None, 10, false)
            .await
            .unwrap()
            .keys
            .is_empty()
    );
    cat.declare_table(&t, Some(&rec.location), HashMap::new())
        .await
        .unwrap();
    remove_namespace(&cat, &ns).await;
}

/// Declares that stopped at each step (a crash, a lost connection to the store) leave nothing
/// visible, and recovery or the next declare of the name settles what they left: a staged
/// record with its data-folder claim, or a staged entry beside the record it had already
/// published. An entry in the older `PendingRecord` shape settles the same way.
async fn crashed_declares_settle(cat: Arc<Catalog>, base: Vec<String>) {
    let ns = scratch_namespace(&cat, &base, "crash").await;
    let store = cat.store().clone();
    let placed = cat.layout().place(&ns).unwrap();
    let cell = placed.cell.clone();
    let table = |name: &str| {
        let mut t = ns.clone();
        t.push(name.to_string());
        t
    };
    let data_key = |name: &str| Layout::default_data_key(&placed, name, "");
    let claim_key = |name: &str| Layout::location_claim_key(&cell, &data_key(name));
    let pending_key = |name: &str| Layout::pending_table_key(&placed, name);
    // What a declare stages: the record it will publish, here started long ago.
    let staged = |name: &str| {
        serde_json::json!({
            "format_version": 1, "id": table(name), "uid": format!("crashed{name}"),
            "data_key": data_key(name), "location": cat.layout().uri_of(&data_key(name)),
            "created_at_ms": 1, "properties": {}, "origin": "declare",
        })
    };
    let put = |key: String, value: serde_json::Value| {
        let store = store.clone();
        async move {
            store
                .put(&key, bytes::Bytes::from(value.to_string()), Condition::None)
                .await
                .unwrap();
        }
    };
    let claim = |name: &str| serde_json::json!({"format_version": 1, "uid": format!("crashed{name}"), "table": table(name)});
    let exists = |key: String| {
        let store = store.clone();
        async move { store.get(&key).await.unwrap().is_some() }
    };

    // a: staged and claimed, never published; b: the same, found by the next declare of the
    // name; c: published, the staged entry left beside it; d: the older entry shape.
    for name in ["a", "b", "c", "d"] {
        put(claim_key(name), claim(name)).await;
    }
    put(pending_key("a"), staged("a")).await;
    put(pending_key("b"), staged("b")).await;
    put(pending_key("c"), staged("c")).await;
    put(cat.table_key(&table("c")).unwrap(), staged("c")).await;
    put(
        pending_key("d"),
        serde_json::json!({"format_version": 1, "op": "declare", "uid": "crashedd",
            "started_at_ms": 1, "table": staged("d")}),
    )
    .await;

    // Nothing half-made is visible.
    for name in ["a", "b", "d"] {
        let err = cat.describe_table(&table(name)).await.unwrap_err();
        assert_eq!(err.code, Code::TableNotFound, "{name}");
    }
    let listed = cat.list_tables(&ns, None, None, true).await.unwrap().items;
    assert_eq!(listed, vec!["c".to_string()]);

    // The next declare of b settles its leftovers and gets the plain folder.
    let b = cat
        .declare_table(&table("b"), None, HashMap::new())
        .await
        .unwrap();
    assert_eq!(b.data_key, data_key("b"));
    assert!(!exists(pending_key("b")).await);

    // r: published with its staged entry left beside it, then renamed away (it keeps its
    // folder); e: arrived by a rename whose entry was left behind, then dropped. Neither
    // leftover may cost a table its folder or bring a dropped table back.
    put(claim_key("r"), claim("r")).await;
    put(pending_key("r"), staged("r")).await;
    put(cat.table_key(&table("r")).unwrap(), staged("r")).await;
    cat.rename_table(&table("r"), &table("r_moved"))
        .await
        .unwrap();
    put(claim_key("e"), claim("e")).await;
    put(
        pending_key("e"),
        serde_json::json!({"format_version": 1, "op": "rename", "uid": "crashede",
            "started_at_ms": 1, "table": staged("e"), "rename_from": table("e_old")}),
    )
    .await;
    put(cat.table_key(&table("e")).unwrap(), staged("e")).await;
    cat.drop_table(&table("e"), true).await.unwrap();
    // An entry no gateway can read is reported, and does not stop recovery of the others.
    put(pending_key("0bad"), serde_json::json!("not a record")).await;

    assert!(recovery::sweep(&cat).await.is_err());
    for name in ["a", "d"] {
        assert!(!exists(pending_key(name)).await, "{name}: entry left");
        assert!(!exists(claim_key(name)).await, "{name}: claim left");
    }
    // c was published: it keeps its record and its claim; only the entry goes.
    assert!(!exists(pending_key("c")).await);
    assert!(exists(claim_key("c")).await);
    assert_eq!(
        cat.describe_table(&table("c")).await.unwrap().uid,
        "crashedc"
    );
    let err = cat
        .declare_table(
            &table("c2"),
            Some(&cat.layout().uri_of(&data_key("c"))),
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    assert!(!exists(pending_key("r")).await);
    assert!(
        exists(claim_key("r")).await,
        "the renamed table lost its folder claim"
    );
    assert_eq!(
        cat.describe_table(&table("r_moved"))
            .await
            .unwrap()
            .data_key,
        data_key("r")
    );
    let r = cat
        .declare_table(&table("r"), None, HashMap::new())
        .await
        .unwrap();
    assert_ne!(r.data_key, data_key("r"), "two tables on one folder");
    assert_eq!(
        cat.describe_table(&table("e")).await.unwrap_err().code,
        Code::TableNotFound,
        "a dropped table came back"
    );
    assert!(!exists(pending_key("e")).await);
    store
        .delete(&pending_key("0bad"), Condition::None)
        .await
        .unwrap();
    recovery::sweep(&cat).await.unwrap();
    // a's name and folder are free again.
    let a = cat
        .declare_table(&table("a"), None, HashMap::new())
        .await
        .unwrap();
    assert_eq!(a.data_key, data_key("a"));
    remove_namespace(&cat, &ns).await;
}

/// A paginated walk while other names are being created: every name that existed before
/// the walk is returned exactly once, and nothing twice.
async fn walk_during_creates(cat: Arc<Catalog>, base: Vec<String>) {
    let ns = scratch_namespace(&cat, &base, "walk").await;
    let mut before = Vec::new();
    for i in 0..20 {
        let name = format!("b{i:02}");
        let mut t = ns.clone();
        t.push(name.clone());
        cat.declare_table(&t, None, HashMap::new()).await.unwrap();
        before.push(name);
    }
    let writer = {
        let cat = cat.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                // names that sort before, between and after the existing ones
                for name in [format!("a{i:02}"), format!("b{i:02}x"), format!("c{i:02}")] {
                    let mut t = ns.clone();
                    t.push(name);
                    cat.declare_table(&t, None, HashMap::new()).await.unwrap();
                }
            }
        })
    };
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = cat
            .list_tables(&ns, token.as_deref(), Some(2), true)
            .await
            .unwrap();
        seen.extend(page.items);
        match page.next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    writer.await.unwrap();
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a name came back twice: {seen:?}");
    for name in &before {
        assert!(seen.contains(name), "{name} was missed by the walk");
    }
    remove_namespace(&cat, &ns).await;
}

async fn all_rules(cat: Arc<Catalog>, base: Vec<String>) {
    rules(cat.clone(), base.clone()).await;
    walk_during_creates(cat.clone(), base.clone()).await;
    declare_race(cat.clone(), base.clone()).await;
    create_drop_race(cat.clone(), base.clone()).await;
    recovery_settles(cat.clone(), base.clone()).await;
    crashed_declares_settle(cat, base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_on_memory() {
    let cat = open(
        Arc::new(MemoryStore::new()),
        Warehouse::S3Bucket {
            bucket: "mem".into(),
            prefix: "w/".into(),
        },
        Duration::from_secs(10),
    )
    .await;
    all_rules(cat, vec![]).await;
}

async fn rules_on_local(sync: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open_with_sync(dir.path(), sync).unwrap();
    let root = store.root().to_path_buf();
    let cat = open(
        Arc::new(store),
        Warehouse::Local(root),
        Duration::from_secs(10),
    )
    .await;
    all_rules(cat, vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_on_local_directory() {
    rules_on_local(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_on_local_directory_without_sync() {
    rules_on_local(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_on_s3_bucket_prefix() {
    let env = common::s3_env();
    let client = common::s3_client(&env).await;
    let bucket = common::fresh_bucket(&client, "rules").await;
    let store = S3Store::new(
        client,
        S3Root::Bucket {
            bucket: bucket.clone(),
            prefix: "wh/".into(),
        },
    );
    let cat = open(
        Arc::new(store),
        Warehouse::S3Bucket {
            bucket,
            prefix: "wh/".into(),
        },
        Duration::from_secs(10),
    )
    .await;
    all_rules(cat, vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_on_s3_endpoint_mode() {
    let env = common::s3_env();
    let client = common::s3_client(&env).await;
    let cat = open(
        Arc::new(S3Store::new(client.clone(), S3Root::Endpoint)),
        Warehouse::S3Endpoint,
        Duration::from_secs(10),
    )
    .await;
    let bucket = format!("lg-ep-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    // Creating a level-1 namespace creates its bucket.
    cat.create_namespace(
        std::slice::from_ref(&bucket),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    assert!(
        cat.list_namespaces(&[], None, None)
            .await
            .unwrap()
            .items
            .contains(&bucket)
    );
    // A bucket without a catalog is not a namespace.
    let plain = common::fresh_bucket(&client, "plain").await;
    assert!(
        !cat.list_namespaces(&[], None, None)
            .await
            .unwrap()
            .items
            .contains(&plain)
    );
    assert_eq!(
        cat.declare_table(&id(&["t"]), None, HashMap::new())
            .await
            .unwrap_err()
            .code,
        Code::InvalidInput
    );
    all_rules(cat.clone(), vec![bucket.clone()]).await;
    // Dropping it deletes the bucket only when the bucket is empty.
    client
        .put_object()
        .bucket(&bucket)
        .key("keep/me")
        .body(bytes::Bytes::from_static(b"x").into())
        .send()
        .await
        .unwrap();
    cat.drop_namespace(
        std::slice::from_ref(&bucket),
        DropMode::Fail,
        DropBehavior::Cascade,
    )
    .await
    .unwrap();
    assert!(
        client.head_bucket().bucket(&bucket).send().await.is_ok(),
        "a bucket holding objects is kept"
    );
    assert!(
        !cat.list_namespaces(&[], None, None)
            .await
            .unwrap()
            .items
            .contains(&bucket)
    );
    let empty = format!("lg-ep-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    cat.create_namespace(
        std::slice::from_ref(&empty),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    cat.drop_namespace(
        std::slice::from_ref(&empty),
        DropMode::Fail,
        DropBehavior::Restrict,
    )
    .await
    .unwrap();
    assert!(
        client.head_bucket().bucket(&empty).send().await.is_err(),
        "an empty bucket is removed"
    );
}
