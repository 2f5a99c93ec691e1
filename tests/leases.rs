//! Leases and maintenance policy, run against every store: one holder at a time, renewals
//! and take-overs decided by conditional writes, the state holders leave behind kept, a
//! gateway restarted under its node id taking back its own lease at once; and a table's
//! policy resolved down its namespace tree.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance_gateway::access::Ctx;
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::leases::Taken;
use lance_gateway::catalog::maintenance::{LastRun, Upkeep};
use lance_gateway::catalog::{Catalog, CreateMode};
use lance_gateway::error::Code;
use lance_gateway::store::Store;
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::s3::S3Root;

const GRACE: Duration = Duration::from_secs(2);

async fn open(store: Arc<dyn Store>, warehouse: Warehouse, node: &str) -> Arc<Catalog> {
    common::open_catalog(store, warehouse, GRACE, node).await
}

fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn lease_rules(store: Arc<dyn Store>, warehouse: Warehouse) {
    let a = open(store.clone(), warehouse.clone(), "gw-a").await;
    let b = open(store.clone(), warehouse.clone(), "gw-b").await;
    let key = format!(
        "{}{}.json",
        Layout::maintenance_prefix(""),
        common::unique("t")
    );

    // One holder at a time.
    let mut held = a
        .take_lease::<Upkeep>(&key, "compact")
        .await
        .unwrap()
        .ok()
        .unwrap();
    match b.take_lease::<Upkeep>(&key, "compact").await.unwrap() {
        Err(Taken::By(holder)) => assert_eq!(holder.node, "gw-a"),
        Ok(_) => panic!("two holders of one lease"),
    }
    // Renewing keeps it; what the holder saves stays for the next one.
    assert!(a.renew_lease(&mut held).await.unwrap());
    let mut state = Upkeep::default();
    state.last.insert(
        "compaction".into(),
        LastRun {
            at_ms: 7,
            outcome: "succeeded".into(),
            ..Default::default()
        },
    );
    assert!(a.save_lease(&mut held, state.clone()).await.unwrap());

    // Not renewed for the grace period: another takes it over, keeping the state, and the
    // old holder's next renewal tells it the lease is lost.
    tokio::time::sleep(GRACE + Duration::from_millis(300)).await;
    let taken = b
        .take_lease::<Upkeep>(&key, "compact")
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(taken.record.state, state);
    assert!(!a.renew_lease(&mut held).await.unwrap());
    b.release_lease(taken).await.unwrap();
    let (record, _) = a.read_leased::<Upkeep>(&key).await.unwrap().unwrap();
    assert!(record.holder.is_none());
    assert_eq!(record.state, state);

    // A gateway restarted under its node id takes back its earlier run's lease at once.
    let live = a
        .take_lease::<Upkeep>(&key, "compact")
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert!(
        b.take_lease::<Upkeep>(&key, "compact")
            .await
            .unwrap()
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let restarted = open(store.clone(), warehouse.clone(), "gw-a").await;
    let again = restarted
        .take_lease::<Upkeep>(&key, "compact")
        .await
        .unwrap()
        .ok()
        .unwrap();
    drop(live);
    restarted.release_lease(again).await.unwrap();
    restarted.remove_leased(&key).await.unwrap();
    assert!(a.read_leased::<Upkeep>(&key).await.unwrap().is_none());
}

async fn policy_rules(store: Arc<dyn Store>, warehouse: Warehouse, base: Vec<String>) {
    let cat = open(store, warehouse, "gw-p").await;
    let ctx = Ctx::internal();
    let with = |rest: &[&str]| {
        let mut v = base.clone();
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let top = common::unique("p");
    cat.create_namespace(
        &ctx,
        &with(&[&top]),
        CreateMode::Create,
        props(&[
            ("maintenance.compaction.min_fragments", "4"),
            ("maintenance.cleanup.retention", "1h"),
        ]),
    )
    .await
    .unwrap();
    cat.create_namespace(
        &ctx,
        &with(&[&top, "inner"]),
        CreateMode::Create,
        props(&[("maintenance.compaction.min_fragments", "6")]),
    )
    .await
    .unwrap();
    let plain = cat
        .declare_table(&ctx, &with(&[&top, "inner", "t"]), None, HashMap::new())
        .await
        .unwrap();
    let own = cat
        .declare_table(
            &ctx,
            &with(&[&top, "inner", "own"]),
            None,
            props(&[("maintenance.compaction.min_fragments", "9")]),
        )
        .await
        .unwrap();
    let p = cat.table_policy(&plain).await.unwrap();
    assert_eq!(p.compaction.min_fragments, 6);
    assert_eq!(p.cleanup.retention, Duration::from_secs(3600));
    assert_eq!(
        cat.table_policy(&own)
            .await
            .unwrap()
            .compaction
            .min_fragments,
        9
    );
    // A bad value is refused before anything is made.
    let bad = cat
        .declare_table(
            &ctx,
            &with(&[&top, "bad"]),
            None,
            props(&[("maintenance.enabled", "sometimes")]),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code, Code::InvalidInput);
    assert!(
        cat.describe_table(&ctx, &with(&[&top, "bad"]))
            .await
            .is_err()
    );
    let bad = cat
        .create_namespace(
            &ctx,
            &with(&[&top, "worse"]),
            CreateMode::Create,
            props(&[("maintenance.index.unindexed_rows", "lots")]),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code, Code::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_policy_on_memory() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let warehouse = Warehouse::S3Bucket {
        bucket: "mem".into(),
        prefix: "w/".into(),
    };
    lease_rules(store.clone(), warehouse.clone()).await;
    policy_rules(store, warehouse, vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_policy_on_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open_with_sync(dir.path(), false).unwrap();
    let warehouse = Warehouse::Local(store.root().to_path_buf());
    let store: Arc<dyn Store> = Arc::new(store);
    lease_rules(store.clone(), warehouse.clone()).await;
    policy_rules(store, warehouse, vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_policy_on_s3() {
    let env = common::s3_env();
    let client = common::s3_client(&env).await;
    let bucket = common::fresh_bucket(&client, "leases").await;
    let root = S3Root::Bucket {
        bucket: bucket.clone(),
        prefix: "wh/".into(),
    };
    let warehouse = Warehouse::S3Bucket {
        bucket,
        prefix: "wh/".into(),
    };
    let store: Arc<dyn Store> = Arc::new(common::s3_store(&env, client, root));
    lease_rules(store.clone(), warehouse.clone()).await;
    policy_rules(store, warehouse, vec![]).await;
}
