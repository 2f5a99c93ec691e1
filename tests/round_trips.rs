//! How many store requests each catalog operation makes, and how many of them wait on one
//! another (its rounds: the round trips a client waits for on S3), on a store that behaves
//! like S3 (no atomic publish). Calls that go out together start before any of them ends and
//! share a round; a call that starts after one ended is a round later. The bounds are the table in docs/consistency.md ("Store
//! requests per operation"): a change that adds a round to one of these fails here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use lance_gateway::access::Ctx;
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::{Catalog, CreateMode, DropBehavior, DropMode, Settings};
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::{Condition, Object, Page, Store, StoreResult};

mod common;

/// A memory store whose every call takes one tick (2 ms) before it is served, counting
/// calls and rounds. The rounds follow from the order calls start and end in, not from the
/// clock: calls that go out together all start in one poll, before any of them can end.
#[derive(Default)]
struct Rounds {
    inner: MemoryStore,
    calls: AtomicU64,
    /// The highest round among calls that have ended.
    ended: AtomicU64,
    /// The highest round among calls that have started.
    started: AtomicU64,
}

impl Rounds {
    async fn tick<T>(&self, what: String, call: impl Future<Output = T>) -> T {
        let round = self.ended.load(Ordering::SeqCst) + 1;
        if std::env::var_os("ROUNDS_TRACE").is_some() {
            eprintln!("  round {round}: {what}");
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.started.fetch_max(round, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let out = call.await;
        self.ended.fetch_max(round, Ordering::SeqCst);
        out
    }

    fn reset(&self) {
        self.calls.store(0, Ordering::SeqCst);
        self.ended.store(0, Ordering::SeqCst);
        self.started.store(0, Ordering::SeqCst);
    }

    /// (calls, rounds) since the last reset.
    fn taken(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::SeqCst),
            self.started.load(Ordering::SeqCst),
        )
    }
}

#[async_trait]
impl Store for Rounds {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        self.tick(format!("get {key}"), self.inner.get(key)).await
    }
    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        self.tick(
            format!("put {key} {cond:?}"),
            self.inner.put(key, body, cond.clone()),
        )
        .await
    }
    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        self.tick(
            format!("delete {key} {cond:?}"),
            self.inner.delete(key, cond.clone()),
        )
        .await
    }
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        self.tick(
            format!("list {prefix}"),
            self.inner.list(prefix, start_after, limit, shallow),
        )
        .await
    }
    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        self.tick(
            format!("delete_prefix {prefix}"),
            self.inner.delete_prefix(prefix),
        )
        .await
    }
    async fn check(&self) -> StoreResult<()> {
        self.tick("check".to_string(), self.inner.check()).await
    }
}

fn id(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Runs `op` alone and gives the (calls, rounds) it took before it answered.
async fn measure<T>(store: &Rounds, op: impl Future<Output = T>) -> (u64, u64) {
    // Whatever an earlier operation left running in the background ends first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.reset();
    op.await;
    store.taken()
}

#[tokio::test(flavor = "current_thread")]
async fn each_operation_makes_the_store_requests_the_table_says() {
    let store = Arc::new(Rounds::default());
    let cat = Catalog::open(
        store.clone(),
        Layout::new(Warehouse::S3Bucket {
            bucket: "b".into(),
            prefix: "w/".into(),
        }),
        Arc::new(common::NoDatasets),
        Settings::new(Duration::from_secs(10), "rounds-gw"),
    )
    .await
    .expect("a catalog over the counting store");
    let ctx = Ctx::internal();
    let none = HashMap::new;
    let mut taken = Vec::new();
    macro_rules! row {
        ($name:expr, $op:expr) => {{
            let (calls, rounds) = measure(&store, async {
                if let Err(e) = $op.await {
                    panic!("{} failed: {e:?}", $name);
                }
            })
            .await;
            if std::env::var_os("ROUNDS_TRACE").is_some() {
                eprintln!("{}: {calls} requests in {rounds} rounds", $name);
            }
            taken.push(($name, calls, rounds));
        }};
    }
    row!(
        "CreateNamespace",
        cat.create_namespace(&ctx, &id(&["ml"]), CreateMode::Create, none())
    );
    row!(
        "DescribeNamespace",
        cat.describe_namespace(&ctx, &id(&["ml"]))
    );
    row!(
        "DeclareTable",
        cat.declare_table(&ctx, &id(&["ml", "t"]), None, none())
    );
    row!("DescribeTable", cat.describe_table(&ctx, &id(&["ml", "t"])));
    row!(
        "ListTables (a page)",
        cat.list_tables(&ctx, &id(&["ml"]), None, None, false)
    );
    row!(
        "RenameTable",
        cat.rename_table(&ctx, &id(&["ml", "t"]), &id(&["ml", "u"]))
    );
    row!("DropTable", cat.drop_table(&ctx, &id(&["ml", "u"]), false));
    row!(
        "DeclareTable",
        cat.declare_table(&ctx, &id(&["ml", "v"]), None, none())
    );
    // What the server does: the answer goes once the record is gone, the data after it.
    row!(
        "DropTable (server)",
        cat.drop_table_later(&ctx, &id(&["ml", "v"]), false)
    );
    row!(
        "DropNamespace",
        cat.drop_namespace(&ctx, &id(&["ml"]), DropMode::Fail, DropBehavior::Restrict)
    );
    for (name, calls, rounds) in &taken {
        eprintln!("{name:22} {calls:3} requests in {rounds} rounds");
    }
    // (requests, rounds) at most: docs/consistency.md's table.
    let bounds: HashMap<&str, (u64, u64)> = [
        ("CreateNamespace", (7, 6)),
        ("DescribeNamespace", (1, 1)),
        ("DeclareTable", (7, 4)),
        ("DescribeTable", (1, 1)),
        ("ListTables (a page)", (5, 4)),
        ("RenameTable", (11, 9)),
        ("DropTable", (11, 10)),
        ("DropTable (server)", (9, 6)),
        ("DropNamespace", (8, 7)),
    ]
    .into();
    for (name, calls, rounds) in &taken {
        let (max_calls, max_rounds) = bounds[name];
        assert!(
            *calls <= max_calls && *rounds <= max_rounds,
            "{name} took {calls} requests in {rounds} rounds; the table says at most {max_calls} in {max_rounds}"
        );
    }
}
