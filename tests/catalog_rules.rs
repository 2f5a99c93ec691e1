//! The catalog's rules, run against every store: the memory store, the local directory and
//! SeaweedFS over S3 (bucket-prefix and endpoint modes).

mod common;

use lance_gateway::access::Ctx;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance_gateway::catalog::layout::Warehouse;
use lance_gateway::catalog::{Catalog, CreateMode, DropBehavior, DropMode};
use lance_gateway::error::Code;
use lance_gateway::store::Store;
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::s3::S3Root;

fn id(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

async fn open(store: Arc<dyn Store>, warehouse: Warehouse, grace: Duration) -> Arc<Catalog> {
    common::open_catalog(store, warehouse, grace, "rules-gw").await
}

/// A new namespace with a unique name under `base`, for one scenario.
async fn scratch_namespace(cat: &Catalog, base: &[String], tag: &str) -> Vec<String> {
    let mut ns = base.to_vec();
    ns.push(common::unique(tag));
    cat.create_namespace(&Ctx::internal(), &ns, CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    ns
}

/// Drops a scenario's namespace with everything in it; it must succeed.
async fn remove_namespace(cat: &Catalog, ns: &[String]) {
    cat.drop_namespace(&Ctx::internal(), ns, DropMode::Fail, DropBehavior::Cascade)
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
    cat.create_namespace(
        &Ctx::internal(),
        &with(&["ml"]),
        CreateMode::Create,
        props.clone(),
    )
    .await
    .unwrap();
    let err = cat
        .create_namespace(
            &Ctx::internal(),
            &with(&["ml"]),
            CreateMode::Create,
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceAlreadyExists);
    let kept = cat
        .create_namespace(
            &Ctx::internal(),
            &with(&["ml"]),
            CreateMode::ExistOk,
            HashMap::new(),
        )
        .await
        .unwrap();
    assert_eq!(kept, props, "ExistOk returns the existing properties");
    assert_eq!(
        cat.describe_namespace(&Ctx::internal(), &with(&["ml"]))
            .await
            .unwrap(),
        props
    );
    cat.create_namespace(
        &Ctx::internal(),
        &with(&["ml", "deep"]),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    cat.create_namespace(
        &Ctx::internal(),
        &with(&["ml", "deep", "er"]),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    let err = cat
        .create_namespace(
            &Ctx::internal(),
            &with(&["nope", "child"]),
            CreateMode::Create,
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound, "parent must exist");
    assert_eq!(
        cat.list_namespaces(&Ctx::internal(), &with(&["ml"]), None, None)
            .await
            .unwrap()
            .items,
        vec!["deep"]
    );

    // tables: declare, duplicate, describe, list
    let t = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "emb"]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap();
    assert!(t.location.ends_with("ml/emb.lance"), "{}", t.location);
    let err = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "emb"]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::TableAlreadyExists);
    let err = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["gone", "t"]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound);
    // ...and leaves nothing behind: once the namespace exists, the same declare gets the
    // plain folder (the failed one's claim on it was released).
    cat.create_namespace(
        &Ctx::internal(),
        &with(&["gone"]),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    let t2 = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["gone", "t"]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap();
    assert!(t2.location.ends_with("gone/t.lance"), "{}", t2.location);
    cat.drop_namespace(
        &Ctx::internal(),
        &with(&["gone"]),
        DropMode::Fail,
        DropBehavior::Cascade,
    )
    .await
    .unwrap();
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "emb"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "x"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["zz", "x"]))
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
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "custom"]),
            Some(&loc),
            HashMap::new(),
        )
        .await
        .unwrap();
    assert_eq!(c.location, loc);
    let nested = format!("{loc}/inner");
    let err = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "nested"]),
            Some(&nested),
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput, "{err}");
    let err = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "same"]),
            Some(&loc),
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    let err = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "esc"]),
            Some("s3://elsewhere/x/../y"),
            HashMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput);
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "nested"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound,
        "a refused declare leaves nothing"
    );

    // pagination: every name exactly once, whatever the limit
    for i in 0..7 {
        cat.declare_table(
            &Ctx::internal(),
            &with(&["ml", &format!("p{i}")]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap();
    }
    let all = cat
        .list_tables(&Ctx::internal(), &with(&["ml"]), None, None, true)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 9);
    assert!(all.next.is_none());
    for limit in [1, 2, 3, 8, 9, 50] {
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = cat
                .list_tables(
                    &Ctx::internal(),
                    &with(&["ml"]),
                    token.as_deref(),
                    Some(limit),
                    true,
                )
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
        .list_tables(&Ctx::internal(), &with(&["ml"]), None, None, false)
        .await
        .unwrap();
    assert!(
        declared_only.items.is_empty(),
        "include_declared=false hides tables without data"
    );
    let everything = cat
        .list_all_tables(&Ctx::internal(), "$", None, None, true)
        .await
        .unwrap();
    assert!(everything.items.contains(&with(&["ml", "emb"]).join("$")));

    // rename within and across namespaces; the location does not move
    cat.rename_table(
        &Ctx::internal(),
        &with(&["ml", "emb"]),
        &with(&["ml", "emb2"]),
    )
    .await
    .unwrap();
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "emb"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "emb2"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    cat.rename_table(
        &Ctx::internal(),
        &with(&["ml", "emb2"]),
        &with(&["ml", "deep", "emb3"]),
    )
    .await
    .unwrap();
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "deep", "emb3"]))
            .await
            .unwrap()
            .location,
        t.location
    );
    let err = cat
        .rename_table(&Ctx::internal(), &with(&["ml", "p0"]), &with(&["ml", "p1"]))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::TableAlreadyExists);
    let err = cat
        .rename_table(
            &Ctx::internal(),
            &with(&["ml", "p0"]),
            &with(&["nowhere", "p0"]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotFound);
    // the old name can be declared again, and gets a folder of its own
    let again = cat
        .declare_table(
            &Ctx::internal(),
            &with(&["ml", "emb"]),
            None,
            HashMap::new(),
        )
        .await
        .unwrap();
    assert_ne!(again.location, t.location);

    // drop namespace: restrict refuses, skip tolerates, cascade empties
    let err = cat
        .drop_namespace(
            &Ctx::internal(),
            &with(&["ml"]),
            DropMode::Fail,
            DropBehavior::Restrict,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NamespaceNotEmpty);
    assert_eq!(
        cat.drop_namespace(
            &Ctx::internal(),
            &with(&["none"]),
            DropMode::Fail,
            DropBehavior::Restrict
        )
        .await
        .unwrap_err()
        .code,
        Code::NamespaceNotFound
    );
    cat.drop_namespace(
        &Ctx::internal(),
        &with(&["none"]),
        DropMode::Skip,
        DropBehavior::Restrict,
    )
    .await
    .unwrap();
    // deregister keeps data; drop deletes it
    let dereg = cat
        .drop_table(&Ctx::internal(), &with(&["ml", "p0"]), false)
        .await
        .unwrap();
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "p0"]))
            .await
            .unwrap_err()
            .code,
        Code::TableNotFound
    );
    let _ = dereg;
    cat.drop_namespace(
        &Ctx::internal(),
        &with(&["ml"]),
        DropMode::Fail,
        DropBehavior::Cascade,
    )
    .await
    .unwrap();
    assert_eq!(
        cat.describe_namespace(&Ctx::internal(), &with(&["ml"]))
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    assert_eq!(
        cat.describe_table(&Ctx::internal(), &with(&["ml", "deep", "emb3"]))
            .await
            .unwrap_err()
            .code,
        Code::NamespaceNotFound
    );
    assert!(
        cat.list_all_tables(&Ctx::internal(), "$", None, None, true)
            .await
            .unwrap()
            .items
            .iter()
            .all(|t| !t.starts_with(&with(&["ml"]).join("$")))
    );

    // Overwrite: replaces properties of an empty namespace, refuses a non-empty one
    cat.create_namespace(
        &Ctx::internal(),
        &with(&["ow"]),
        CreateMode::Create,
        props.clone(),
    )
    .await
    .unwrap();
    let fresh: HashMap<String, String> = [("k".to_string(), "v".to_string())].into();
    assert_eq!(
        cat.create_namespace(
            &Ctx::internal(),
            &with(&["ow"]),
            CreateMode::Overwrite,
            fresh.clone()
        )
        .await
        .unwrap(),
        fresh
    );
    assert_eq!(
        cat.describe_namespace(&Ctx::internal(), &with(&["ow"]))
            .await
            .unwrap(),
        fresh
    );
    cat.declare_table(&Ctx::internal(), &with(&["ow", "t"]), None, HashMap::new())
        .await
        .unwrap();
    assert_eq!(
        cat.create_namespace(
            &Ctx::internal(),
            &with(&["ow"]),
            CreateMode::Overwrite,
            HashMap::new()
        )
        .await
        .unwrap_err()
        .code,
        Code::NamespaceNotEmpty
    );
    cat.drop_namespace(
        &Ctx::internal(),
        &with(&["ow"]),
        DropMode::Fail,
        DropBehavior::Cascade,
    )
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
            cat.declare_table(&Ctx::internal(), &table, None, HashMap::new())
                .await
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
        cat.create_namespace(&Ctx::internal(), &ns, CreateMode::Create, HashMap::new())
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for i in 0..6 {
            let cat = cat.clone();
            let mut t = ns.clone();
            t.push(format!("t{i}"));
            tasks.push(tokio::spawn(async move {
                let _ = cat
                    .declare_table(&Ctx::internal(), &t, None, HashMap::new())
                    .await;
            }));
        }
        let dropper = {
            let cat = cat.clone();
            let ns = ns.clone();
            tokio::spawn(async move {
                cat.drop_namespace(
                    &Ctx::internal(),
                    &ns,
                    DropMode::Fail,
                    DropBehavior::Restrict,
                )
                .await
            })
        };
        for t in tasks {
            t.await.unwrap();
        }
        let dropped = dropper.await.unwrap().is_ok();
        let listed = cat
            .list_all_tables(&Ctx::internal(), "$", None, None, true)
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
            assert!(cat.namespace_exists(&Ctx::internal(), &ns).await.is_ok());
        }
    }
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
        cat.declare_table(&Ctx::internal(), &t, None, HashMap::new())
            .await
            .unwrap();
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
                    cat.declare_table(&Ctx::internal(), &t, None, HashMap::new())
                        .await
                        .unwrap();
                }
            }
        })
    };
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = cat
            .list_tables(&Ctx::internal(), &ns, token.as_deref(), Some(2), true)
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
    create_drop_race(cat, base).await;
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
    let store = common::s3_store(
        &env,
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
        Arc::new(common::s3_store(&env, client.clone(), S3Root::Endpoint)),
        Warehouse::S3Endpoint,
        Duration::from_secs(10),
    )
    .await;
    let bucket = format!("lg-ep-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    // Creating a level-1 namespace creates its bucket.
    cat.create_namespace(
        &Ctx::internal(),
        std::slice::from_ref(&bucket),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    assert!(
        cat.list_namespaces(&Ctx::internal(), &[], None, None)
            .await
            .unwrap()
            .items
            .contains(&bucket)
    );
    // A bucket without a catalog is not a namespace.
    let plain = common::fresh_bucket(&client, "plain").await;
    assert!(
        !cat.list_namespaces(&Ctx::internal(), &[], None, None)
            .await
            .unwrap()
            .items
            .contains(&plain)
    );
    assert_eq!(
        cat.declare_table(&Ctx::internal(), &id(&["t"]), None, HashMap::new())
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
        &Ctx::internal(),
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
        !cat.list_namespaces(&Ctx::internal(), &[], None, None)
            .await
            .unwrap()
            .items
            .contains(&bucket)
    );
    let empty = format!("lg-ep-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    cat.create_namespace(
        &Ctx::internal(),
        std::slice::from_ref(&empty),
        CreateMode::Create,
        HashMap::new(),
    )
    .await
    .unwrap();
    cat.drop_namespace(
        &Ctx::internal(),
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

/// The folders below `dir`, at any depth.
fn folders_below(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| 1 + folders_below(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recovery_sweep_prunes_the_pending_folders_creates_leave_on_a_local_warehouse() {
    // Every page of ListAllTables lists the pending entries of the whole warehouse, which
    // on a local one opens the folder each create left behind in its namespace: a sweep
    // removes those unchanged for the grace period, and creates and listings go on.
    let dir = tempfile::tempdir().expect("a scratch folder");
    let store = FsStore::open_with_sync(dir.path(), false).expect("the local store opens");
    let root = store.root().to_path_buf();
    let cat = open(
        Arc::new(store),
        Warehouse::Local(root.clone()),
        Duration::from_secs(10),
    )
    .await;
    let ctx = Ctx::internal();
    let spaces = ["a", "b", "c"];
    for ns in spaces {
        cat.create_namespace(&ctx, &id(&[ns]), CreateMode::Create, HashMap::new())
            .await
            .expect("namespace created");
        cat.declare_table(&ctx, &id(&[ns, "t"]), None, HashMap::new())
            .await
            .expect("table declared");
    }
    let pending = root.join(".lance-gateway/pending");
    assert!(
        folders_below(&pending) >= spaces.len(),
        "each create left its namespace's pending folder"
    );
    lance_gateway::catalog::recovery::sweep(&cat)
        .await
        .expect("the sweep runs");
    assert!(
        folders_below(&pending) >= spaces.len(),
        "kept while younger than the grace period"
    );
    let minute_ago = std::time::SystemTime::now() - Duration::from_secs(60);
    for ns in spaces {
        std::fs::File::open(pending.join(ns))
            .and_then(|f| f.set_modified(minute_ago))
            .expect("the folder's time is set back");
    }
    lance_gateway::catalog::recovery::sweep(&cat)
        .await
        .expect("the sweep runs");
    assert_eq!(folders_below(&pending), 0, "the empty folders are gone");
    cat.declare_table(&ctx, &id(&["a", "u"]), None, HashMap::new())
        .await
        .expect("a create in a pruned namespace folder");
    let listed = cat
        .list_all_tables(&ctx, ".", None, None, true)
        .await
        .expect("listed");
    assert_eq!(listed.items, vec!["a.t", "a.u", "b.t", "c.t"]);
}
