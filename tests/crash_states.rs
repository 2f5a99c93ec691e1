//! Crash states, built by hand: each scenario writes the objects exactly as a gateway killed
//! at one step leaves them (its intent, its mark, its staged record), then sends the rival
//! request a live gateway would get, and checks the final state once recovery has run.
//! Every scenario runs on the memory store, a local directory, SeaweedFS (bucket-prefix
//! and endpoint modes), fake-gcs-server and Azurite: the local directory publishes creates
//! by moving the staged record, the others commit them through an intent.

mod common;

use lance_gateway::access::Ctx;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lance_gateway::catalog::fsck::Repair;
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::records::{
    CellRecord, DroppedTable, FORMAT_SOFT_DROP, FORMAT_VERSION, Intent, IntentKind, IntentState,
    Mark, TableRecord, encode,
};
use lance_gateway::catalog::{Catalog, CreateMode, DropBehavior, DropMode, recovery};
use lance_gateway::error::{Code, Result};
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::s3::S3Root;
use lance_gateway::store::{Condition, Store};
use serde_json::{Value, json};

/// The node id of the gateway under test; "killed" entries are written by another node,
/// named per scenario (in endpoint mode every sweep visits every scenario's bucket, and a
/// gateway restarted under one scenario's name must not settle another's entries).
const NODE: &str = "live-gw";
/// Long enough that nothing a scenario writes "now" is settled for its age.
const GRACE: Duration = Duration::from_secs(600);

/// One warehouse for one scenario, and the ids inside it.
struct World {
    cat: Arc<Catalog>,
    store: Arc<dyn Store>,
    warehouse: Warehouse,
    /// Every id starts with this (the bucket in endpoint mode).
    base: Vec<String>,
    /// The node id of the "killed" gateway.
    killed: String,
    _dir: Option<tempfile::TempDir>,
}

enum Kind {
    Memory,
    Local,
    S3Bucket,
    S3Endpoint,
    Gcs,
    Azure,
}

async fn world(kind: Kind) -> World {
    let (store, warehouse, base, dir): (Arc<dyn Store>, Warehouse, Vec<String>, _) = match kind {
        Kind::Memory => (
            Arc::new(MemoryStore::new()),
            Warehouse::S3Bucket {
                bucket: "mem".into(),
                prefix: "w/".into(),
            },
            vec![],
            None,
        ),
        Kind::Local => {
            let dir = tempfile::tempdir().unwrap();
            let store = FsStore::open(dir.path()).unwrap();
            let root = store.root().to_path_buf();
            (Arc::new(store), Warehouse::Local(root), vec![], Some(dir))
        }
        Kind::S3Bucket => {
            let env = common::s3_env();
            let client = common::s3_client(&env).await;
            let bucket = common::fresh_bucket(&client, "crash").await;
            let store = common::s3_store(
                &env,
                client,
                S3Root::Bucket {
                    bucket: bucket.clone(),
                    prefix: "wh/".into(),
                },
            );
            (
                Arc::new(store),
                Warehouse::S3Bucket {
                    bucket,
                    prefix: "wh/".into(),
                },
                vec![],
                None,
            )
        }
        Kind::Gcs => {
            let (store, warehouse) = common::gcs_store("crash");
            (Arc::new(store), warehouse, vec![], None)
        }
        Kind::Azure => {
            let (store, warehouse) = common::azure_store("crash");
            (Arc::new(store), warehouse, vec![], None)
        }
        Kind::S3Endpoint => {
            let env = common::s3_env();
            let client = common::s3_client(&env).await;
            let bucket = format!("lg-cs-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
            (
                Arc::new(common::s3_store(&env, client, S3Root::Endpoint)),
                Warehouse::S3Endpoint,
                vec![bucket],
                None,
            )
        }
    };
    let cat = open(store.clone(), warehouse.clone(), NODE).await;
    if !base.is_empty() {
        cat.create_namespace(&Ctx::internal(), &base, CreateMode::Create, HashMap::new())
            .await
            .unwrap();
    }
    World {
        cat,
        store,
        warehouse,
        base,
        killed: format!("killed-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        _dir: dir,
    }
}

async fn open(store: Arc<dyn Store>, warehouse: Warehouse, node: &str) -> Arc<Catalog> {
    common::open_catalog(store, warehouse, GRACE, node).await
}

impl World {
    fn id(&self, parts: &[&str]) -> Vec<String> {
        let mut v = self.base.clone();
        v.extend(parts.iter().map(|s| s.to_string()));
        v
    }

    fn cell(&self) -> String {
        self.base
            .first()
            .map(|b| format!("{b}/"))
            .unwrap_or_default()
    }

    async fn namespace(&self, name: &str) -> Vec<String> {
        let ns = self.id(&[name]);
        self.cat
            .create_namespace(&Ctx::internal(), &ns, CreateMode::Create, HashMap::new())
            .await
            .unwrap();
        ns
    }

    /// Declares `id`, and waits for the work the declare leaves after its answer (removing
    /// its committed entry, on a store that cannot publish in one step), so the states the
    /// tests build are not raced by it.
    async fn declare(&self, id: &[String]) -> TableRecord {
        let record = self
            .cat
            .declare_table(&Ctx::internal(), id, None, HashMap::new())
            .await
            .unwrap();
        self.cat.finish_after_answers().await;
        record
    }

    async fn put(&self, key: &str, value: &impl serde::Serialize) {
        self.store
            .put(key, encode(value), Condition::None)
            .await
            .unwrap();
    }

    async fn exists(&self, key: &str) -> bool {
        self.store.get(key).await.unwrap().is_some()
    }

    async fn keys(&self, prefix: &str) -> Vec<String> {
        self.store
            .list(prefix, None, 100, false)
            .await
            .unwrap()
            .keys
    }

    /// The intents and pending entries left anywhere in the warehouse.
    /// The pending entries and drop intents left once what runs after the answers has run
    /// (a table create deletes its committed entry just after it answers): looked for
    /// again for up to five seconds while any are there.
    async fn intents_left(&self) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut left = self.keys(&Layout::all_pending_prefix(&self.cell())).await;
            left.extend(self.keys(&Layout::drops_prefix(&self.cell())).await);
            if left.is_empty() || std::time::Instant::now() > deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An intent as a killed gateway leaves it: started long ago unless `fresh`.
    fn intent(&self, kind: IntentKind, state: IntentState, fresh: bool) -> Intent {
        let mut intent = Intent::new(
            format!("op{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            self.killed.clone(),
            kind,
        );
        intent.state = state;
        if !fresh {
            intent.started_at_ms = 1;
        }
        intent
    }

    /// Marks table `id` for operation `intent` (at `intent_key`), as the operation's second
    /// step does.
    async fn mark(&self, id: &[String], intent: &Intent, intent_key: &str) {
        let key = self.cat.table_key(id).unwrap();
        let mut record: TableRecord =
            serde_json::from_slice(&self.store.get(&key).await.unwrap().unwrap().body).unwrap();
        record.mark = Some(Mark {
            op_id: intent.op_id.clone(),
            intent: intent_key.to_string(),
            batch: intent.batch.clone(),
        });
        self.put(&key, &record).await;
    }

    fn claim_key(&self, record: &TableRecord) -> String {
        Layout::location_claim_key(&self.cell(), &record.data_key)
    }

    /// Writes a Lance-looking manifest into a table's folder (the catalog only lists it).
    async fn write_data(&self, record: &TableRecord) -> String {
        let key = format!("{}/_versions/1.manifest", record.data_key);
        self.store
            .put(&key, Bytes::from_static(b"m"), Condition::None)
            .await
            .unwrap();
        key
    }

    async fn code_of<T: std::fmt::Debug>(&self, result: Result<T>) -> Code {
        result.unwrap_err().code
    }

    /// The killed gateway, started again under its node id.
    async fn restart_killed(&self) -> Arc<Catalog> {
        // Its entries were written before this run started.
        tokio::time::sleep(Duration::from_millis(5)).await;
        open(self.store.clone(), self.warehouse.clone(), &self.killed).await
    }

    async fn sweep(&self) {
        recovery::sweep(&self.cat).await.unwrap();
    }
}

fn rename_intent(
    w: &World,
    from: &[String],
    to: &[String],
    record: &TableRecord,
    state: IntentState,
    fresh: bool,
) -> (Intent, String) {
    let moved = TableRecord {
        id: to.to_vec(),
        mark: None,
        ..record.clone()
    };
    let intent = w.intent(
        IntentKind::RenameTable {
            from: from.to_vec(),
            record: moved,
        },
        state,
        fresh,
    );
    let key = w.cat.table_pending_key(to).unwrap();
    (intent, key)
}

fn drop_intent(
    w: &World,
    record: &TableRecord,
    delete_data: bool,
    state: IntentState,
    fresh: bool,
) -> (Intent, String) {
    let intent = w.intent(
        IntentKind::DropTable {
            record: record.clone(),
            delete_data,
            keep_until_ms: None,
            dropped: None,
            dropped_by: None,
        },
        state,
        fresh,
    );
    let key = Layout::drop_key(&w.cell(), &intent.op_id);
    (intent, key)
}

// ------------------------------------------------------------------------------- renames

/// A rename killed after marking its source, before it committed; later a deregister of
/// the source answers 200. The rename must never be rolled forward over it: the target
/// never appears, and the deregistered table's folder is free again.
async fn killed_rename_before_commit_is_rolled_back_under_a_deregister(w: World) {
    let ns = w.namespace("n0").await;
    let (t0, t3) = (
        [&ns[..], &["t0".to_string()]].concat(),
        [&ns[..], &["t3".to_string()]].concat(),
    );
    let rec = w.declare(&t0).await;
    let (intent, key) = rename_intent(&w, &t0, &t3, &rec, IntentState::Prepared, false);
    w.put(&key, &intent).await;
    w.mark(&t0, &intent, &key).await;

    let gone = w
        .cat
        .drop_table(&Ctx::internal(), &t0, false)
        .await
        .unwrap();
    assert_eq!(gone.uid, rec.uid);
    w.sweep().await;
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &t3).await)
            .await,
        Code::TableNotFound
    );
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &t0).await)
            .await,
        Code::TableNotFound
    );
    assert!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        w.intents_left().await.is_empty(),
        "{:?}",
        w.intents_left().await
    );
    assert!(
        !w.exists(&w.claim_key(&rec)).await,
        "the deregistered table kept its claim"
    );
    let again = w
        .cat
        .declare_table(&Ctx::internal(), &t3, Some(&rec.location), HashMap::new())
        .await
        .unwrap();
    assert_eq!(again.location, rec.location);
}

/// The same rename killed after it committed: it happened, so the deregister that comes
/// later finds the source gone, and the table lives on under its new name.
async fn killed_rename_after_commit_is_finished_first(w: World) {
    let ns = w.namespace("n0").await;
    let (t0, t3) = (
        [&ns[..], &["t0".to_string()]].concat(),
        [&ns[..], &["t3".to_string()]].concat(),
    );
    let rec = w.declare(&t0).await;
    let (intent, key) = rename_intent(&w, &t0, &t3, &rec, IntentState::Committed, true);
    w.put(&key, &intent).await;
    w.mark(&t0, &intent, &key).await;

    // Before anything else happens, readers see the source: the rename's linearization
    // point is the source's delete.
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t0)
            .await
            .unwrap()
            .uid,
        rec.uid
    );
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &t3).await)
            .await,
        Code::TableNotFound
    );
    // The deregister finishes the rename's deciding step, then finds nothing to remove.
    assert_eq!(
        w.code_of(w.cat.drop_table(&Ctx::internal(), &t0, false).await)
            .await,
        Code::TableNotFound
    );
    let moved = w.cat.describe_table(&Ctx::internal(), &t3).await.unwrap();
    assert_eq!(
        (moved.uid.as_str(), moved.location.as_str()),
        (rec.uid.as_str(), rec.location.as_str())
    );
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items,
        vec!["t3"]
    );
    // Once the rename is stale (here: its node restarted), recovery publishes the record.
    let restarted = w.restart_killed().await;
    recovery::sweep(&restarted).await.unwrap();
    assert!(w.exists(&w.cat.table_key(&t3).unwrap()).await);
    assert!(w.intents_left().await.is_empty());
    assert!(
        w.exists(&w.claim_key(&rec)).await,
        "the renamed table keeps its claim"
    );
}

/// A rename killed between its source's delete and its publish: the table is visible under
/// its new name from the intent, to describe and to listings, and recovery publishes it.
async fn killed_rename_after_the_source_went_is_visible(w: World) {
    let ns = w.namespace("n0").await;
    let (t0, t3) = (
        [&ns[..], &["t0".to_string()]].concat(),
        [&ns[..], &["t3".to_string()]].concat(),
    );
    let rec = w.declare(&t0).await;
    let (intent, key) = rename_intent(&w, &t0, &t3, &rec, IntentState::Committed, false);
    w.put(&key, &intent).await;
    w.store
        .delete(&w.cat.table_key(&t0).unwrap(), Condition::None)
        .await
        .unwrap();
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t3)
            .await
            .unwrap()
            .uid,
        rec.uid
    );
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items,
        vec!["t3"]
    );
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, Some(1), true)
            .await
            .unwrap()
            .items,
        vec!["t3"]
    );
    assert!(
        w.cat
            .list_all_tables(&Ctx::internal(), "$", None, None, true)
            .await
            .unwrap()
            .items
            .contains(&t3.join("$"))
    );
    assert_eq!(
        w.code_of(
            w.cat
                .declare_table(&Ctx::internal(), &t3, None, HashMap::new())
                .await
        )
        .await,
        Code::TableAlreadyExists
    );
    assert_eq!(
        w.code_of(
            w.cat
                .drop_namespace(
                    &Ctx::internal(),
                    &ns,
                    DropMode::Fail,
                    DropBehavior::Restrict
                )
                .await
        )
        .await,
        Code::NamespaceNotEmpty
    );
    w.sweep().await;
    assert!(w.exists(&w.cat.table_key(&t3).unwrap()).await);
    assert!(w.intents_left().await.is_empty());
}

/// While a rename is live and undecided, rivals wait for it and then answer 409 code 14;
/// readers see the source only. Once it is gone (rolled back), everything works again.
async fn live_rename_makes_rivals_wait_and_conflict(w: World) {
    let ns = w.namespace("n0").await;
    let (s, t) = (
        [&ns[..], &["s".to_string()]].concat(),
        [&ns[..], &["t".to_string()]].concat(),
    );
    let rec = w.declare(&s).await;
    let (intent, key) = rename_intent(&w, &s, &t, &rec, IntentState::Prepared, true);
    w.put(&key, &intent).await;
    w.mark(&s, &intent, &key).await;
    for result in [
        w.cat
            .drop_table(&Ctx::internal(), &s, false)
            .await
            .map(|_| ()),
        w.cat
            .rename_table(&Ctx::internal(), &s, &w.id(&["n0", "u"]))
            .await,
        w.cat
            .declare_table(&Ctx::internal(), &t, None, HashMap::new())
            .await
            .map(|_| ()),
    ] {
        assert_eq!(result.unwrap_err().code, Code::ConcurrentModification);
    }
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &s)
            .await
            .unwrap()
            .uid,
        rec.uid
    );
    assert_eq!(
        w.code_of(w.cat.table_exists(&Ctx::internal(), &t).await)
            .await,
        Code::TableNotFound
    );
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items,
        vec!["s"]
    );
    // Its node restarts: the rename is rolled back at once, and the rivals go through.
    let restarted = w.restart_killed().await;
    recovery::sweep(&restarted).await.unwrap();
    w.cat.rename_table(&Ctx::internal(), &s, &t).await.unwrap();
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t)
            .await
            .unwrap()
            .uid,
        rec.uid
    );
    assert!(w.intents_left().await.is_empty());
}

/// Two renames of one table, one killed before it committed and one live: the live one
/// wins, and the table ends with one name.
async fn two_renames_of_one_table_end_with_one_name(w: World) {
    let ns = w.namespace("n0").await;
    let (s, a, b) = (w.id(&["n0", "s"]), w.id(&["n0", "a"]), w.id(&["n0", "b"]));
    let rec = w.declare(&s).await;
    let (intent, key) = rename_intent(&w, &s, &a, &rec, IntentState::Prepared, false);
    w.put(&key, &intent).await;
    w.mark(&s, &intent, &key).await;
    w.cat.rename_table(&Ctx::internal(), &s, &b).await.unwrap();
    w.sweep().await;
    let all = w
        .cat
        .list_tables(&Ctx::internal(), &ns, None, None, true)
        .await
        .unwrap()
        .items;
    assert_eq!(all, vec!["b"]);
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &a).await)
            .await,
        Code::TableNotFound
    );
    assert!(w.intents_left().await.is_empty());
}

// --------------------------------------------------------------------------------- drops

/// A drop killed after marking, before it committed: a later drop rolls it back and goes
/// through; data and claim go exactly once.
async fn killed_drop_before_commit_is_rolled_back(w: World) {
    let ns = w.namespace("n1").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let data = w.write_data(&rec).await;
    let (intent, key) = drop_intent(&w, &rec, true, IntentState::Prepared, false);
    w.put(&key, &intent).await;
    w.mark(&t, &intent, &key).await;
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t)
            .await
            .unwrap()
            .uid,
        rec.uid,
        "not dropped yet"
    );
    w.cat.drop_table(&Ctx::internal(), &t, true).await.unwrap();
    w.sweep().await;
    assert!(!w.exists(&data).await);
    assert!(!w.exists(&w.claim_key(&rec)).await);
    assert!(w.intents_left().await.is_empty());
    let again = w
        .cat
        .declare_table(&Ctx::internal(), &t, Some(&rec.location), HashMap::new())
        .await
        .unwrap();
    assert_eq!(again.location, rec.location);
}

/// A drop killed after it committed: readers still see the table until its record goes,
/// a second drop finishes that step and answers 404, and recovery deletes data and claim.
async fn killed_drop_after_commit_is_finished(w: World) {
    let ns = w.namespace("n1").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let data = w.write_data(&rec).await;
    let (intent, key) = drop_intent(&w, &rec, true, IntentState::Committed, false);
    w.put(&key, &intent).await;
    w.mark(&t, &intent, &key).await;
    assert_eq!(
        w.code_of(w.cat.drop_table(&Ctx::internal(), &t, true).await)
            .await,
        Code::TableNotFound
    );
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &t).await)
            .await,
        Code::TableNotFound
    );
    w.sweep().await;
    assert!(!w.exists(&data).await);
    assert!(!w.exists(&w.claim_key(&rec)).await);
    assert!(w.intents_left().await.is_empty());
}

/// A cascade drop of the namespace killed with its mark on, and a drop of one of its
/// tables on another gateway: the table drop answers 200, and after recovery the
/// namespace is usable, no claim is left and the folder can be declared again.
async fn killed_cascade_and_a_table_drop_leak_no_claim(w: World) {
    let ns = w.namespace("n2").await;
    let t = [&ns[..], &["t1".to_string()]].concat();
    let rec = w.declare(&t).await;
    let ns_intent = w.intent(
        IntentKind::DropNamespace { id: ns.clone() },
        IntentState::Prepared,
        false,
    );
    let ns_key = Layout::drop_key(&w.cell(), &ns_intent.op_id);
    w.put(&ns_key, &ns_intent).await;
    let ns_record_key = Layout::namespace_key(&w.cat.layout().place(&ns).unwrap());
    let mut ns_record: Value =
        serde_json::from_slice(&w.store.get(&ns_record_key).await.unwrap().unwrap().body).unwrap();
    ns_record["mark"] = json!({"op_id": ns_intent.op_id, "intent": ns_key});
    w.put(&ns_record_key, &ns_record).await;

    w.cat.drop_table(&Ctx::internal(), &t, true).await.unwrap();
    w.sweep().await;
    assert!(!w.exists(&w.claim_key(&rec)).await, "the claim leaked");
    assert!(
        w.intents_left().await.is_empty(),
        "{:?}",
        w.intents_left().await
    );
    let again = w
        .cat
        .declare_table(&Ctx::internal(), &t, Some(&rec.location), HashMap::new())
        .await
        .unwrap();
    assert_eq!(again.location, rec.location);
}

/// Racing drops of one table on live gateways: exactly one answers 200; the others 404
/// (it is gone) or 409 code 14; data and claim go, no intent is left.
async fn racing_drops_of_one_table_drop_it_once(w: World) {
    let ns = w.namespace("n3").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let other = open(w.store.clone(), w.warehouse.clone(), "other-gw").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let cat = if i % 2 == 0 {
            w.cat.clone()
        } else {
            other.clone()
        };
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            cat.drop_table(&Ctx::internal(), &t, i % 3 == 0).await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert!(
                matches!(e.code, Code::TableNotFound | Code::ConcurrentModification),
                "{e:?}"
            ),
        }
    }
    assert_eq!(ok, 1);
    assert!(!w.exists(&w.claim_key(&rec)).await);
    assert!(
        w.intents_left().await.is_empty(),
        "{:?}",
        w.intents_left().await
    );
}

// ------------------------------------------------------------------------------- creates

/// A create in flight (staged, not committed) on another gateway: a rival create waits,
/// then answers 409 code 14, never "exists" while readers answer "not found".
async fn rival_of_a_live_create_is_told_to_retry(w: World) {
    let ns = w.namespace("c1").await;
    let t = [&ns[..], &["t1".to_string()]].concat();
    let placed = w.cat.layout().place(&ns).unwrap();
    let data_key = Layout::default_data_key(&placed, "t1", "");
    let staged = TableRecord {
        format_version: FORMAT_VERSION,
        id: t.clone(),
        uid: "inflight".into(),
        location: w.cat.layout().uri_of(&data_key),
        data_key,
        created_at_ms: lance_gateway::catalog::records::now_ms(),
        properties: HashMap::new(),
        origin: "declare".into(),
        created_by: Some(w.killed.clone()),
        mark: None,
        rev: String::new(),
    };
    let pending = w.cat.table_pending_key(&t).unwrap();
    w.put(&pending, &staged).await;
    assert_eq!(
        w.code_of(
            w.cat
                .declare_table(&Ctx::internal(), &t, None, HashMap::new())
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    assert_eq!(
        w.code_of(w.cat.table_exists(&Ctx::internal(), &t).await)
            .await,
        Code::TableNotFound
    );
    assert!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // The same for a namespace.
    let child = [&ns[..], &["sub".to_string()]].concat();
    let ns_pending = Layout::pending_namespace_key(&placed, "sub");
    w.put(&ns_pending, &json!({"format_version": FORMAT_VERSION, "id": child, "uid": "nsinflight",
        "created_at_ms": lance_gateway::catalog::records::now_ms(), "properties": {}, "created_by": w.killed})).await;
    assert_eq!(
        w.code_of(
            w.cat
                .create_namespace(&Ctx::internal(), &child, CreateMode::Create, HashMap::new())
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    assert_eq!(
        w.code_of(
            w.cat
                .create_namespace(
                    &Ctx::internal(),
                    &child,
                    CreateMode::ExistOk,
                    HashMap::new()
                )
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    assert_eq!(
        w.code_of(w.cat.namespace_exists(&Ctx::internal(), &child).await)
            .await,
        Code::NamespaceNotFound
    );
    // A namespace drop waits for them too, then answers 409 code 14 (they may yet fail).
    assert_eq!(
        w.code_of(
            w.cat
                .drop_namespace(
                    &Ctx::internal(),
                    &ns,
                    DropMode::Fail,
                    DropBehavior::Restrict
                )
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    // Once the gateway that staged them restarts, they are rolled back and the name is free.
    let restarted = w.restart_killed().await;
    recovery::sweep(&restarted).await.unwrap();
    let made = w.declare(&t).await;
    assert_ne!(made.uid, "inflight");
    w.cat
        .create_namespace(&Ctx::internal(), &child, CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    assert!(w.intents_left().await.is_empty());
}

/// A create that committed and was not published yet (its gateway killed in between): it
/// exists for every reader and rival, and recovery publishes it.
async fn committed_create_is_visible_before_it_is_published(w: World) {
    let ns = w.namespace("c2").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let placed = w.cat.layout().place(&ns).unwrap();
    let data_key = Layout::default_data_key(&placed, "t", "");
    let record = TableRecord {
        format_version: FORMAT_VERSION,
        id: t.clone(),
        uid: "committed".into(),
        location: w.cat.layout().uri_of(&data_key),
        data_key: data_key.clone(),
        created_at_ms: 1,
        properties: HashMap::from([("k".to_string(), "v".to_string())]),
        origin: "declare".into(),
        created_by: Some(w.killed.clone()),
        mark: None,
        rev: String::new(),
    };
    w.put(
        &Layout::location_claim_key(&w.cell(), &data_key),
        &json!({"format_version": FORMAT_VERSION, "uid": "committed", "table": t}),
    )
    .await;
    let mut intent = w.intent(
        IntentKind::CreateTable {
            record: record.clone(),
        },
        IntentState::Committed,
        false,
    );
    intent.op_id = "committed".into();
    w.put(&w.cat.table_pending_key(&t).unwrap(), &intent).await;

    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t)
            .await
            .unwrap()
            .properties,
        record.properties
    );
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items,
        vec!["t"]
    );
    assert_eq!(
        w.code_of(
            w.cat
                .declare_table(&Ctx::internal(), &t, None, HashMap::new())
                .await
        )
        .await,
        Code::TableAlreadyExists
    );
    assert_eq!(
        w.code_of(
            w.cat
                .drop_namespace(
                    &Ctx::internal(),
                    &ns,
                    DropMode::Fail,
                    DropBehavior::Restrict
                )
                .await
        )
        .await,
        Code::NamespaceNotEmpty
    );
    w.sweep().await;
    assert!(w.exists(&w.cat.table_key(&t).unwrap()).await);
    assert!(w.intents_left().await.is_empty());
    w.cat.drop_table(&Ctx::internal(), &t, true).await.unwrap();
    assert!(
        !w.exists(&Layout::location_claim_key(&w.cell(), &data_key))
            .await
    );
}

/// Creates staged and claimed, never committed (a: found by recovery; b: by the next
/// declare of the name), and one published with its staged record left beside it (c):
/// nothing half-made is visible, and recovery keeps c and frees a's and b's folders.
async fn uncommitted_creates_are_rolled_back(w: World) {
    let ns = w.namespace("c3").await;
    let placed = w.cat.layout().place(&ns).unwrap();
    let table = |name: &str| [&ns[..], &[name.to_string()]].concat();
    let staged = |name: &str| {
        let data_key = Layout::default_data_key(&placed, name, "");
        TableRecord {
            format_version: FORMAT_VERSION,
            id: table(name),
            uid: format!("crashed{name}"),
            location: w.cat.layout().uri_of(&data_key),
            data_key,
            created_at_ms: 1,
            properties: HashMap::new(),
            origin: "declare".into(),
            created_by: Some(w.killed.clone()),
            mark: None,
            rev: String::new(),
        }
    };
    for name in ["a", "b", "c"] {
        let rec = staged(name);
        w.put(
            &w.claim_key(&rec),
            &json!({"format_version": FORMAT_VERSION, "uid": rec.uid, "table": rec.id}),
        )
        .await;
        w.put(&w.cat.table_pending_key(&rec.id).unwrap(), &rec)
            .await;
    }
    w.put(&w.cat.table_key(&table("c")).unwrap(), &staged("c"))
        .await;
    for name in ["a", "b"] {
        assert_eq!(
            w.code_of(w.cat.describe_table(&Ctx::internal(), &table(name)).await)
                .await,
            Code::TableNotFound
        );
    }
    assert_eq!(
        w.cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap()
            .items,
        vec!["c"]
    );
    let b = w.declare(&table("b")).await;
    assert_eq!(b.data_key, staged("b").data_key, "b's folder was freed");
    w.sweep().await;
    assert!(!w.exists(&w.claim_key(&staged("a"))).await);
    assert!(w.exists(&w.claim_key(&staged("c"))).await);
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &table("c"))
            .await
            .unwrap()
            .uid,
        "crashedc"
    );
    assert!(w.intents_left().await.is_empty());
    // c keeps its folder through a rename; a new table of its old name gets another.
    w.cat
        .rename_table(&Ctx::internal(), &table("c"), &table("c_moved"))
        .await
        .unwrap();
    let c2 = w.declare(&table("c")).await;
    assert_ne!(
        c2.data_key,
        staged("c").data_key,
        "two tables on one folder"
    );
}

// ---------------------------------------------------------------- restarts and old formats

/// A namespace drop killed with its mark on: the same node, restarted, settles it at once
/// (others would wait out the grace period), and the namespace takes creates again.
async fn restarted_node_settles_its_own_namespace_drop_at_once(w: World) {
    let ns = w.namespace("r1").await;
    let intent = Intent::new(
        "nsdrop1".into(),
        w.killed.clone(),
        IntentKind::DropNamespace { id: ns.clone() },
    );
    let key = Layout::drop_key(&w.cell(), &intent.op_id);
    w.put(&key, &intent).await;
    let ns_record_key = Layout::namespace_key(&w.cat.layout().place(&ns).unwrap());
    let mut ns_record: Value =
        serde_json::from_slice(&w.store.get(&ns_record_key).await.unwrap().unwrap().body).unwrap();
    ns_record["mark"] = json!({"op_id": intent.op_id, "intent": key});
    w.put(&ns_record_key, &ns_record).await;
    let t = [&ns[..], &["t".to_string()]].concat();
    // Another node's sweep leaves it: it is not stale.
    w.sweep().await;
    assert_eq!(
        w.code_of(
            w.cat
                .declare_table(&Ctx::internal(), &t, None, HashMap::new())
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    let restarted = w.restart_killed().await;
    recovery::sweep(&restarted).await.unwrap();
    w.declare(&t).await;
    assert!(w.intents_left().await.is_empty());
}

/// Entries of a format-1 gateway: a staged create is rolled back; a rename whose source
/// is gone is rolled back, never forward; a drop whose table is gone only loses its entry
/// (its data is kept: version 1 cannot tell its own delete from a later one).
async fn format_1_leftovers_settle_conservatively(w: World) {
    let ns = w.namespace("v1").await;
    let placed = w.cat.layout().place(&ns).unwrap();
    let old = |name: &str| {
        let data_key = Layout::default_data_key(&placed, name, "");
        let id: Vec<String> = [&ns[..], &[name.to_string()]].concat();
        json!({"format_version": 1, "id": id, "uid": format!("old{name}"),
            "data_key": data_key, "location": w.cat.layout().uri_of(&data_key),
            "created_at_ms": 1, "properties": {}, "origin": "declare"})
    };
    let id = |name: &str| [&ns[..], &[name.to_string()]].concat();
    let claim =
        |name: &str| Layout::location_claim_key(&w.cell(), old(name)["data_key"].as_str().unwrap());
    w.put(
        &claim("a"),
        &json!({"format_version": 1, "uid": "olda", "table": id("a")}),
    )
    .await;
    w.put(&w.cat.table_pending_key(&id("a")).unwrap(), &old("a"))
        .await;
    w.put(
        &w.cat.table_pending_key(&id("r")).unwrap(),
        &json!({"format_version": 1, "op": "rename", "uid": "oldr", "started_at_ms": 1,
            "table": old("r"), "rename_from": id("r_src")}),
    )
    .await;
    w.put(
        &claim("d"),
        &json!({"format_version": 1, "uid": "oldd", "table": id("d")}),
    )
    .await;
    let data = format!(
        "{}/_versions/1.manifest",
        old("d")["data_key"].as_str().unwrap()
    );
    w.store
        .put(&data, Bytes::from_static(b"m"), Condition::None)
        .await
        .unwrap();
    w.put(
        &Layout::drop_key(&w.cell(), "oldd"),
        &json!({"format_version": 1, "op": "drop", "started_at_ms": 1, "table": old("d")}),
    )
    .await;
    w.sweep().await;
    assert!(!w.exists(&claim("a")).await);
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &id("r")).await)
            .await,
        Code::TableNotFound
    );
    assert!(
        w.exists(&data).await,
        "a format-1 drop deleted data on a guess"
    );
    assert!(w.intents_left().await.is_empty());
}

// -------------------------------------------------------------- leases, revisions, claims

/// A long operation renews its intent: a namespace drop started long ago but renewed a
/// moment ago is left alone by recovery; once its renewals stop, it is rolled back.
async fn renewed_operations_are_not_taken_for_abandoned(w: World) {
    let ns = w.namespace("l1").await;
    let mut intent = w.intent(
        IntentKind::DropNamespace { id: ns.clone() },
        IntentState::Prepared,
        false,
    );
    intent.renewed_at_ms = Some(lance_gateway::catalog::records::now_ms());
    let key = Layout::drop_key(&w.cell(), &intent.op_id);
    w.put(&key, &intent).await;
    let ns_record_key = Layout::namespace_key(&w.cat.layout().place(&ns).unwrap());
    let mut ns_record: Value =
        serde_json::from_slice(&w.store.get(&ns_record_key).await.unwrap().unwrap().body).unwrap();
    ns_record["mark"] = json!({"op_id": intent.op_id, "intent": key});
    w.put(&ns_record_key, &ns_record).await;
    w.sweep().await;
    assert!(
        w.exists(&key).await,
        "a renewed drop was taken for abandoned"
    );
    intent.renewed_at_ms = Some(1);
    w.put(&key, &intent).await;
    w.sweep().await;
    assert!(!w.exists(&key).await);
    w.declare(&[&ns[..], &["t".to_string()]].concat()).await;
}

/// A record renamed away and back, or unmarked, is never the same bytes as before: on S3 a
/// tag is a hash of the bytes, and an old tag must not let a stale change through.
async fn a_record_never_returns_to_an_old_tag(w: World) {
    let ns = w.namespace("v2").await;
    let (a, b) = (
        [&ns[..], &["a".to_string()]].concat(),
        [&ns[..], &["b".to_string()]].concat(),
    );
    w.declare(&a).await;
    let key = w.cat.table_key(&a).unwrap();
    let before = w.store.get(&key).await.unwrap().unwrap();
    w.cat.rename_table(&Ctx::internal(), &a, &b).await.unwrap();
    w.cat.rename_table(&Ctx::internal(), &b, &a).await.unwrap();
    let after = w.store.get(&key).await.unwrap().unwrap();
    assert_ne!(before.etag, after.etag);
    let stale = w
        .store
        .put(
            &key,
            Bytes::from_static(b"{}"),
            Condition::IfMatch(before.etag),
        )
        .await;
    assert!(stale.is_err(), "a stale tag was accepted");
}

/// A committed create whose recovery another gateway has just taken over: readers see it,
/// a rival is told it exists at once (no spinning on the settler), and a sweep leaves it to
/// that settler.
async fn a_settler_at_work_is_left_alone(w: World) {
    let ns = w.namespace("s1").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let placed = w.cat.layout().place(&ns).unwrap();
    let data_key = Layout::default_data_key(&placed, "t", "");
    let record = TableRecord {
        format_version: FORMAT_VERSION,
        id: t.clone(),
        uid: "settling".into(),
        location: w.cat.layout().uri_of(&data_key),
        data_key,
        created_at_ms: 1,
        properties: HashMap::new(),
        origin: "declare".into(),
        created_by: Some(w.killed.clone()),
        mark: None,
        rev: String::new(),
    };
    let mut intent = w.intent(
        IntentKind::CreateTable { record },
        IntentState::Committed,
        false,
    );
    intent.op_id = "settling".into();
    intent.settler = Some(lance_gateway::catalog::records::Settler {
        node: "another-gw".into(),
        since_ms: lance_gateway::catalog::records::now_ms(),
    });
    let key = w.cat.table_pending_key(&t).unwrap();
    w.put(&key, &intent).await;
    assert_eq!(
        w.cat
            .describe_table(&Ctx::internal(), &t)
            .await
            .unwrap()
            .uid,
        "settling"
    );
    let started = std::time::Instant::now();
    assert_eq!(
        w.code_of(
            w.cat
                .declare_table(&Ctx::internal(), &t, None, HashMap::new())
                .await
        )
        .await,
        Code::TableAlreadyExists
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the rival waited on a settler"
    );
    w.sweep().await;
    assert!(
        w.exists(&key).await,
        "a sweep took over from a settler at work"
    );
}

/// A register at the folder of a table that was just deregistered, whose claim is still
/// being released: the register waits and answers 409 code 14, not "already the data
/// folder" of a table nobody can see; once released, the register goes through.
async fn a_claim_being_released_is_no_refusal(w: World) {
    let ns = w.namespace("c4").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let u = [&ns[..], &["u".to_string()]].concat();
    let folder = format!("{}reg/c4/f.lance", w.cell());
    let location = w.cat.layout().uri_of(&folder);
    w.store
        .put(
            &format!("{folder}/_versions/1.manifest"),
            Bytes::from_static(b"m"),
            Condition::None,
        )
        .await
        .unwrap();
    let rec = w
        .cat
        .register_table(&Ctx::internal(), &t, &location, false, HashMap::new())
        .await
        .unwrap();
    // The register answered at its commit; its record is published after the answer.
    w.cat.finish_after_answers().await;
    // A deregister committed and past its deciding step, its gateway killed before the claim
    // was released.
    let (intent, key) = drop_intent(&w, &rec, false, IntentState::Committed, true);
    w.put(&key, &intent).await;
    w.store
        .delete(&w.cat.table_key(&t).unwrap(), Condition::None)
        .await
        .unwrap();
    assert_eq!(
        w.code_of(
            w.cat
                .register_table(&Ctx::internal(), &u, &location, false, HashMap::new())
                .await
        )
        .await,
        Code::ConcurrentModification
    );
    let restarted = w.restart_killed().await;
    recovery::sweep(&restarted).await.unwrap();
    assert_eq!(
        w.cat
            .register_table(&Ctx::internal(), &u, &location, false, HashMap::new())
            .await
            .unwrap()
            .location,
        location
    );
}

/// Overwrite mode replaces the properties of an empty namespace only, and not while a drop
/// of it is live.
async fn overwrite_needs_an_empty_namespace(w: World) {
    let ns = w.namespace("o1").await;
    let props = HashMap::from([("k".to_string(), "v".to_string())]);
    assert_eq!(
        w.cat
            .create_namespace(&Ctx::internal(), &ns, CreateMode::Overwrite, props.clone())
            .await
            .unwrap(),
        props
    );
    assert_eq!(
        w.cat
            .describe_namespace(&Ctx::internal(), &ns)
            .await
            .unwrap(),
        props
    );
    w.declare(&[&ns[..], &["t".to_string()]].concat()).await;
    assert_eq!(
        w.code_of(
            w.cat
                .create_namespace(&Ctx::internal(), &ns, CreateMode::Overwrite, HashMap::new())
                .await
        )
        .await,
        Code::NamespaceNotEmpty
    );
    assert_eq!(
        w.cat
            .describe_namespace(&Ctx::internal(), &ns)
            .await
            .unwrap(),
        props
    );
    assert!(
        w.keys(&Layout::drops_prefix(&w.cell())).await.is_empty(),
        "the overwrite left its intent"
    );
}

// ------------------------------------------------------------------------- soft drops

impl World {
    /// A second gateway over the same warehouse that keeps dropped tables for a week, on a
    /// warehouse at format 3 (a new bucket in endpoint mode starts at format 2).
    async fn keeper(&self) -> Arc<Catalog> {
        self.keeper_for(Duration::from_secs(7 * 86_400)).await
    }

    async fn keeper_for(&self, retention: Duration) -> Arc<Catalog> {
        self.set_warehouse_format(Some(FORMAT_SOFT_DROP)).await;
        common::open_catalog_keeping_drops(
            self.store.clone(),
            self.warehouse.clone(),
            GRACE,
            "keeper",
            retention,
        )
        .await
    }

    async fn set_warehouse_format(&self, format: Option<u32>) {
        let key = Layout::cell_record(&self.cell());
        let mut cell: CellRecord =
            serde_json::from_slice(&self.store.get(&key).await.unwrap().unwrap().body).unwrap();
        cell.warehouse_format = format;
        self.put(&key, &cell).await;
    }

    fn dropped_key(&self, table: &[String], drop_id: &str) -> String {
        let placed = self.cat.layout().place(table).unwrap();
        Layout::dropped_key(&placed.cell, placed.rel, drop_id)
    }

    async fn dropped(&self) -> Vec<DroppedTable> {
        let mut out = Vec::new();
        for key in self.keys(&Layout::dropped_prefix(&self.cell())).await {
            out.push(
                serde_json::from_slice(&self.store.get(&key).await.unwrap().unwrap().body).unwrap(),
            );
        }
        out
    }

    /// `admin fsck` finds nothing left to fix.
    async fn fsck_clean(&self) {
        self.cat.finish_after_answers().await;
        let report = self.cat.fsck(Repair::default()).await.unwrap();
        let problems: Vec<_> = report
            .findings
            .iter()
            .filter(|f| f.severity == "problem")
            // In endpoint mode every scenario's bucket is checked: this one's only count.
            .filter(|f| {
                self.base
                    .first()
                    .is_none_or(|bucket| f.object.contains(bucket.as_str()))
            })
            .map(|f| format!("{} {}: {}", f.problem, f.object, f.detail))
            .collect();
        assert!(problems.is_empty(), "{problems:?}");
    }

    /// Marks the dropped record at `key` for `intent` (at `intent_key`).
    async fn mark_dropped(&self, key: &str, intent: &Intent, intent_key: &str) {
        let mut d: DroppedTable =
            serde_json::from_slice(&self.store.get(key).await.unwrap().unwrap().body).unwrap();
        d.mark = Some(Mark {
            op_id: intent.op_id.clone(),
            intent: intent_key.to_string(),
            batch: None,
        });
        self.put(key, &d).await;
    }

    /// A table with data, dropped by a keeping gateway: its record, data key and drop.
    async fn dropped_table(
        &self,
        k: &Catalog,
        id: &[String],
    ) -> (TableRecord, String, DroppedTable) {
        let rec = self.declare(id).await;
        let data = self.write_data(&rec).await;
        k.drop_table(&Ctx::internal(), id, true).await.unwrap();
        let d = self
            .dropped()
            .await
            .into_iter()
            .find(|d| d.table.uid == rec.uid)
            .expect("a dropped record");
        (rec, data, d)
    }
}

/// A drop keeps the table: gone for every reader at once (on every gateway), its name free
/// for a new table with a folder of its own; undrop under the taken name is refused, under
/// another name gives back the same table (uid, folder, data), and fsck is clean throughout.
async fn soft_drop_keeps_the_table_for_undrop(w: World) {
    let k = w.keeper().await;
    let ns = w.namespace("sd").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (rec, data, d) = w.dropped_table(&k, &t).await;
    for cat in [&w.cat, &k] {
        assert_eq!(
            w.code_of(cat.describe_table(&Ctx::internal(), &t).await)
                .await,
            Code::TableNotFound
        );
        let listed = cat
            .list_tables(&Ctx::internal(), &ns, None, None, true)
            .await
            .unwrap();
        assert!(listed.items.is_empty(), "{:?}", listed.items);
    }
    assert!(w.exists(&data).await, "the data is kept");
    assert!(
        w.exists(&w.claim_key(&rec)).await,
        "the folder stays claimed"
    );
    assert_eq!(
        d.dropped_by.as_deref(),
        Some("lance-gateway"),
        "who dropped it"
    );
    assert!(d.purge_after_ms > d.dropped_at_ms + 6 * 86_400_000);
    let listed = k.list_dropped(&Ctx::internal(), &ns).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.clone(), listed[0].drop_id.clone()),
        (t.clone(), d.drop_id.clone())
    );
    assert_eq!(listed[0].objects, Some(1));
    w.fsck_clean().await;

    // The name is free; the new table gets its own folder.
    let newer = w.declare(&t).await;
    assert_ne!(newer.data_key, rec.data_key);
    assert_eq!(
        w.code_of(k.undrop_table(&Ctx::internal(), &t, None, None).await)
            .await,
        Code::TableAlreadyExists
    );
    assert!(
        w.dropped().await[0].mark.is_none(),
        "a refused undrop leaves no mark"
    );
    let back = [&ns[..], &["back".to_string()]].concat();
    let undropped = k
        .undrop_table(&Ctx::internal(), &t, Some(&d.drop_id), Some(&back))
        .await
        .unwrap();
    k.finish_after_answers().await;
    assert_eq!(
        (undropped.uid.clone(), undropped.location.clone()),
        (rec.uid.clone(), rec.location.clone())
    );
    let seen = w.cat.describe_table(&Ctx::internal(), &back).await.unwrap();
    assert_eq!(
        (seen.uid, seen.location),
        (rec.uid.clone(), rec.location.clone())
    );
    assert!(w.dropped().await.is_empty());
    assert!(
        w.intents_left().await.is_empty(),
        "{:?}",
        w.intents_left().await
    );
    assert_eq!(
        w.code_of(
            k.undrop_table(&Ctx::internal(), &t, Some(&d.drop_id), None)
                .await
        )
        .await,
        Code::TableNotFound,
        "an undrop happens once"
    );
    w.fsck_clean().await;
}

/// A purge deletes the data, the claim and the dropped record; the folder is free again.
async fn purge_deletes_a_dropped_table(w: World) {
    let k = w.keeper().await;
    let ns = w.namespace("pg").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (rec, data, d) = w.dropped_table(&k, &t).await;
    let purged = k.purge_dropped(&Ctx::internal(), &t, None).await.unwrap();
    assert_eq!(purged.drop_id, d.drop_id);
    assert!(!w.exists(&data).await);
    assert!(!w.exists(&w.claim_key(&rec)).await);
    assert!(!w.exists(&w.dropped_key(&t, &d.drop_id)).await);
    assert!(w.intents_left().await.is_empty());
    assert_eq!(
        w.code_of(k.undrop_table(&Ctx::internal(), &t, None, None).await)
            .await,
        Code::TableNotFound
    );
    let again = w
        .cat
        .declare_table(&Ctx::internal(), &t, Some(&rec.location), HashMap::new())
        .await
        .unwrap();
    assert_eq!(again.location, rec.location);
    w.fsck_clean().await;
}

/// The recovery sweep purges a dropped table once its retention has passed, not before.
async fn the_sweep_purges_expired_drops(w: World) {
    let k = w.keeper_for(Duration::from_secs(2)).await;
    let ns = w.namespace("ex").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (_, data, _) = w.dropped_table(&k, &t).await;
    // This cell's part of the sweep (a whole sweep in endpoint mode visits every bucket of
    // the shared server, which may take longer than the retention).
    let swept = k.purge_expired(&w.cell()).await.unwrap();
    assert_eq!((swept.kept, swept.purged), (1, 0));
    assert!(w.exists(&data).await, "kept within its retention");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    recovery::sweep(&k).await.unwrap();
    assert!(!w.exists(&data).await, "purged after it");
    assert!(w.dropped().await.is_empty());
    w.fsck_clean().await;
}

/// A soft drop killed after it committed: the table is gone, and recovery keeps it (the
/// dropped record written, the data untouched), never deletes it.
async fn killed_soft_drop_after_commit_is_kept(w: World) {
    let ns = w.namespace("ks").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let data = w.write_data(&rec).await;
    let mut intent = w.intent(
        IntentKind::DropTable {
            record: rec.clone(),
            delete_data: true,
            keep_until_ms: Some(u64::MAX / 2),
            dropped: None,
            dropped_by: Some("alice".into()),
        },
        IntentState::Committed,
        false,
    );
    intent.format_version = FORMAT_SOFT_DROP;
    let key = Layout::drop_key(&w.cell(), &intent.op_id);
    w.put(&key, &intent).await;
    w.mark(&t, &intent, &key).await;
    w.sweep().await;
    assert_eq!(
        w.code_of(w.cat.describe_table(&Ctx::internal(), &t).await)
            .await,
        Code::TableNotFound
    );
    assert!(w.exists(&data).await);
    let kept = w.dropped().await;
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].drop_id.as_str(), kept[0].dropped_by.as_deref()),
        (intent.op_id.as_str(), Some("alice"))
    );
    assert!(w.intents_left().await.is_empty());
    w.fsck_clean().await;
}

/// An undrop killed before it committed is rolled back (its mark removed, the name free);
/// one killed after is finished (the table published, the dropped record gone), and
/// readers see the table from the commit on.
async fn killed_undrops_settle_by_their_intent(w: World) {
    let k = w.keeper().await;
    let ns = w.namespace("ku").await;
    for committed in [false, true] {
        let name = if committed { "after" } else { "before" };
        let t = [&ns[..], &[name.to_string()]].concat();
        let (rec, data, d) = w.dropped_table(&k, &t).await;
        let dkey = w.dropped_key(&t, &d.drop_id);
        let record = TableRecord {
            rev: "r2".into(),
            ..d.table.clone()
        };
        let mut intent = w.intent(
            IntentKind::UndropTable {
                dropped: dkey.clone(),
                record,
            },
            if committed {
                IntentState::Committed
            } else {
                IntentState::Prepared
            },
            false,
        );
        intent.format_version = FORMAT_SOFT_DROP;
        let pending = w.cat.table_pending_key(&t).unwrap();
        w.put(&pending, &intent).await;
        w.mark_dropped(&dkey, &intent, &pending).await;
        let seen = w.cat.describe_table(&Ctx::internal(), &t).await;
        if committed {
            assert_eq!(seen.unwrap().uid, rec.uid, "visible from its commit");
        } else {
            assert_eq!(w.code_of(seen).await, Code::TableNotFound);
        }
        w.sweep().await;
        assert!(
            w.intents_left().await.is_empty(),
            "{:?}",
            w.intents_left().await
        );
        assert!(w.exists(&data).await);
        if committed {
            assert_eq!(
                w.cat
                    .describe_table(&Ctx::internal(), &t)
                    .await
                    .unwrap()
                    .uid,
                rec.uid
            );
            assert!(!w.exists(&dkey).await);
        } else {
            let left: DroppedTable =
                serde_json::from_slice(&w.store.get(&dkey).await.unwrap().unwrap().body).unwrap();
            assert!(left.mark.is_none(), "the rollback unmarks it");
            k.undrop_table(&Ctx::internal(), &t, None, None)
                .await
                .unwrap();
            k.finish_after_answers().await;
            assert_eq!(
                w.cat
                    .describe_table(&Ctx::internal(), &t)
                    .await
                    .unwrap()
                    .uid,
                rec.uid
            );
        }
    }
    w.fsck_clean().await;
}

/// A purge killed after it committed is finished by recovery: data, claim, record go.
async fn killed_purge_after_commit_is_finished(w: World) {
    let k = w.keeper().await;
    let ns = w.namespace("kp").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (rec, data, d) = w.dropped_table(&k, &t).await;
    let dkey = w.dropped_key(&t, &d.drop_id);
    let mut intent = w.intent(
        IntentKind::DropTable {
            record: d.table.clone(),
            delete_data: true,
            keep_until_ms: None,
            dropped: Some(dkey.clone()),
            dropped_by: None,
        },
        IntentState::Committed,
        false,
    );
    intent.format_version = FORMAT_SOFT_DROP;
    let key = Layout::drop_key(&w.cell(), &intent.op_id);
    w.put(&key, &intent).await;
    w.mark_dropped(&dkey, &intent, &key).await;
    assert_eq!(
        w.code_of(k.undrop_table(&Ctx::internal(), &t, None, None).await)
            .await,
        Code::TableNotFound,
        "a committed purge's table cannot be undropped"
    );
    w.sweep().await;
    assert!(!w.exists(&data).await);
    assert!(!w.exists(&w.claim_key(&rec)).await);
    assert!(!w.exists(&dkey).await);
    assert!(w.intents_left().await.is_empty());
    w.fsck_clean().await;
}

/// An undrop and a purge of one drop at once, on two gateways: exactly one happens, and
/// a purge never deletes the data of a table the undrop brought back.
async fn racing_undrop_and_purge_do_one(w: World) {
    let k = w.keeper().await;
    let k2 = common::open_catalog_keeping_drops(
        w.store.clone(),
        w.warehouse.clone(),
        GRACE,
        "keeper-2",
        Duration::from_secs(86_400),
    )
    .await;
    let ns = w.namespace("ru").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (rec, data, _) = w.dropped_table(&k, &t).await;
    let ctx = Ctx::internal();
    let (undrop, purge) = tokio::join!(
        k.undrop_table(&ctx, &t, None, None),
        k2.purge_dropped(&ctx, &t, None)
    );
    k.finish_after_answers().await;
    match (&undrop, &purge) {
        (Ok(_), Err(_)) => {
            assert!(w.exists(&data).await, "the undropped table's data");
            assert_eq!(
                w.cat
                    .describe_table(&Ctx::internal(), &t)
                    .await
                    .unwrap()
                    .uid,
                rec.uid
            );
        }
        (Err(_), Ok(_)) => {
            assert!(!w.exists(&data).await);
            assert_eq!(
                w.code_of(w.cat.describe_table(&Ctx::internal(), &t).await)
                    .await,
                Code::TableNotFound
            );
        }
        other => panic!("exactly one must happen: {other:?}"),
    }
    for e in [undrop.err(), purge.err()].into_iter().flatten() {
        assert!(
            matches!(e.code, Code::TableNotFound | Code::ConcurrentModification),
            "{e:?}"
        );
    }
    w.fsck_clean().await;
}

/// A warehouse still at format 2 (a release before soft drops may serve beside this one)
/// deletes a dropped table at once; raised to 3, drops are kept.
async fn format_2_warehouses_delete_at_once_until_upgraded(w: World) {
    let k = w.keeper().await;
    w.set_warehouse_format(None).await;
    let k = {
        drop(k);
        common::open_catalog_keeping_drops(
            w.store.clone(),
            w.warehouse.clone(),
            GRACE,
            "keeper-f2",
            Duration::from_secs(86_400),
        )
        .await
    };
    let ns = w.namespace("f2").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let data = w.write_data(&rec).await;
    k.drop_table(&Ctx::internal(), &t, true).await.unwrap();
    assert!(!w.exists(&data).await, "deleted at once on format 2");
    assert!(w.dropped().await.is_empty());
    // Every key this gateway wrote on a format-2 warehouse is readable by format 2.
    for key in w.keys(&Layout::catalog_dir(&w.cell())).await {
        let body = w.store.get(&key).await.unwrap().unwrap().body;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["format_version"].as_u64().unwrap() <= 2, "{key}: {v}");
    }
    if w.cell().is_empty() {
        let raised = k.upgrade_warehouse(FORMAT_SOFT_DROP, false).await.unwrap();
        assert_eq!(raised.len(), 1);
    } else {
        w.set_warehouse_format(Some(FORMAT_SOFT_DROP)).await;
    }
    let k = common::open_catalog_keeping_drops(
        w.store.clone(),
        w.warehouse.clone(),
        GRACE,
        "keeper-f3",
        Duration::from_secs(86_400),
    )
    .await;
    let rec = w.declare(&t).await;
    let data = w.write_data(&rec).await;
    k.drop_table(&Ctx::internal(), &t, true).await.unwrap();
    assert!(w.exists(&data).await, "kept on format 3");
    assert_eq!(w.dropped().await.len(), 1);
}

/// Records of a format newer than this build reads are never rolled back, deleted or
/// rewritten: requests that need them answer 503 naming both formats, the sweep and
/// fsck --repair leave them.
async fn newer_records_are_left_for_a_newer_gateway(w: World) {
    let ns = w.namespace("nf").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let rec = w.declare(&t).await;
    let table_key = w.cat.table_key(&t).unwrap();
    let mut newer: Value = serde_json::to_value(&rec).unwrap();
    newer["format_version"] = json!(4);
    newer["new_field"] = json!({"a": 1});
    w.put(&table_key, &newer).await;
    let e = w
        .cat
        .describe_table(&Ctx::internal(), &t)
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::ServiceUnavailable);
    assert!(
        e.message.contains("format 4") && e.message.contains("up to 3"),
        "{}",
        e.message
    );
    // An old, abandoned intent of a newer format under drops/.
    let intent_key = Layout::drop_key(&w.cell(), "opnewer");
    let old_intent = json!({"format_version": 4, "op": "drop_table", "op_id": "opnewer",
        "owner": w.killed, "started_at_ms": 1, "record": rec, "delete_data": true});
    w.put(&intent_key, &old_intent).await;
    let _ = recovery::sweep(&w.cat).await;
    let _ = w
        .cat
        .fsck(Repair {
            repair: true,
            delete_orphans: true,
            relocate: false,
        })
        .await;
    let kept: Value =
        serde_json::from_slice(&w.store.get(&intent_key).await.unwrap().unwrap().body).unwrap();
    assert_eq!(kept, old_intent, "the newer intent is untouched");
    let kept: Value =
        serde_json::from_slice(&w.store.get(&table_key).await.unwrap().unwrap().body).unwrap();
    assert_eq!(kept, newer, "the newer record is untouched");
    assert!(w.exists(&w.claim_key(&rec)).await, "its claim is kept");
}

/// `admin upgrade` is refused while the registry shows a live gateway that cannot read the
/// new format, unless forced.
#[tokio::test]
async fn upgrade_waits_for_gateways_that_cannot_read_the_new_format() {
    use lance_gateway::catalog::upgrade::GatewayEntry;
    let w = world(Kind::Local).await;
    w.set_warehouse_format(None).await;
    // A gateway of this release registers (only once the warehouse is at 3: nothing here).
    w.cat.register_gateway().await.unwrap();
    assert!(w.cat.gateways().await.unwrap().is_empty());
    let old = GatewayEntry {
        format_version: FORMAT_SOFT_DROP,
        node: "gw-old".into(),
        release: "0.0.1".into(),
        reads_up_to: 2,
        writes_up_to: 2,
        started_at_ms: 1,
        seen_at_ms: lance_gateway::catalog::records::now_ms(),
        peer: None,
        revoked_by: None,
        revoked_at_ms: None,
    };
    w.put(&Layout::gateway_key("", "gw-old"), &old).await;
    let e = w
        .cat
        .upgrade_warehouse(FORMAT_SOFT_DROP, false)
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::ConcurrentModification);
    assert!(e.message.contains("gw-old"), "{}", e.message);
    assert_eq!(
        w.cat.warehouse_formats().await.unwrap(),
        vec![(String::new(), 2)]
    );
    let raised = w
        .cat
        .upgrade_warehouse(FORMAT_SOFT_DROP, true)
        .await
        .unwrap();
    assert_eq!((raised[0].from, raised[0].to), (2, 3));
    w.cat.register_gateway().await.unwrap();
    assert!(
        w.cat
            .gateways()
            .await
            .unwrap()
            .iter()
            .any(|g| g.node == NODE)
    );
    assert!(
        w.cat.upgrade_warehouse(4, false).await.is_err(),
        "beyond what this release writes"
    );
}

/// The warehouse-wide housekeeping (here: purging an expired drop) runs on one gateway at a
/// time and not again within its spacing: a gateway that finds it done recently, or its
/// lease held by a live gateway, leaves it; once the lease is given back it runs.
async fn housekeeping_runs_on_one_gateway_at_a_time(w: World) {
    let k = w.keeper_for(Duration::from_secs(2)).await;
    let ns = w.namespace("hk").await;
    let t = [&ns[..], &["t".to_string()]].concat();
    let (_, data, _) = w.dropped_table(&k, &t).await;
    recovery::sweep(&k).await.unwrap();
    let key = Layout::housekeeping_key(&w.cell());
    let (ran, _) = k
        .read_leased::<lance_gateway::catalog::leases::Spaced>(&key)
        .await
        .unwrap()
        .expect("the housekeeping lease is written");
    assert!(ran.holder.is_none(), "given back after the run");
    assert!(ran.state.last_ran_ms > 0);
    assert!(w.exists(&data).await, "kept within its retention");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // Another gateway, spaced by an hour: it ran two seconds ago, so it is left.
    let other = common::open_catalog_keeping_drops(
        w.store.clone(),
        w.warehouse.clone(),
        GRACE,
        "other-gw",
        Duration::from_secs(2),
    )
    .await;
    recovery::sweep_spaced(&other, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(w.exists(&data).await, "not run again within its spacing");
    // Held by a live gateway: left, even unspaced.
    let held = other
        .take_lease::<lance_gateway::catalog::leases::Spaced>(&key, "test")
        .await
        .unwrap()
        .expect("the lease is free");
    recovery::sweep(&k).await.unwrap();
    assert!(
        w.exists(&data).await,
        "not run while another holds the lease"
    );
    other.release_lease(held).await.unwrap();
    recovery::sweep(&k).await.unwrap();
    assert!(!w.exists(&data).await, "purged once the lease is free");
    w.fsck_clean().await;
}

macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Memory).await).await } )* }
        mod local { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Local).await).await } )* }
        mod s3_bucket { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::S3Bucket).await).await } )* }
        mod s3_endpoint { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::S3Endpoint).await).await } )* }
        mod gcs { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Gcs).await).await } )* }
        mod azure { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Azure).await).await } )* }
    };
}

on_every_store!(
    killed_rename_before_commit_is_rolled_back_under_a_deregister,
    killed_rename_after_commit_is_finished_first,
    killed_rename_after_the_source_went_is_visible,
    live_rename_makes_rivals_wait_and_conflict,
    two_renames_of_one_table_end_with_one_name,
    killed_drop_before_commit_is_rolled_back,
    killed_drop_after_commit_is_finished,
    killed_cascade_and_a_table_drop_leak_no_claim,
    racing_drops_of_one_table_drop_it_once,
    rival_of_a_live_create_is_told_to_retry,
    committed_create_is_visible_before_it_is_published,
    uncommitted_creates_are_rolled_back,
    restarted_node_settles_its_own_namespace_drop_at_once,
    format_1_leftovers_settle_conservatively,
    renewed_operations_are_not_taken_for_abandoned,
    a_record_never_returns_to_an_old_tag,
    a_settler_at_work_is_left_alone,
    a_claim_being_released_is_no_refusal,
    overwrite_needs_an_empty_namespace,
    soft_drop_keeps_the_table_for_undrop,
    purge_deletes_a_dropped_table,
    the_sweep_purges_expired_drops,
    killed_soft_drop_after_commit_is_kept,
    killed_undrops_settle_by_their_intent,
    killed_purge_after_commit_is_finished,
    racing_undrop_and_purge_do_one,
    format_2_warehouses_delete_at_once_until_upgraded,
);

// Not in endpoint mode: there every scenario's sweep visits every bucket, and would meet
// these scenarios' records (newer ones; expired drops) while they run.
macro_rules! on_stores_of_their_own {
    ($($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            #[tokio::test]
            async fn memory() { super::$scenario(super::world(super::Kind::Memory).await).await }
            #[tokio::test]
            async fn local() { super::$scenario(super::world(super::Kind::Local).await).await }
            #[tokio::test]
            async fn s3_bucket() { super::$scenario(super::world(super::Kind::S3Bucket).await).await }
            #[tokio::test]
            async fn gcs() { super::$scenario(super::world(super::Kind::Gcs).await).await }
            #[tokio::test]
            async fn azure() { super::$scenario(super::world(super::Kind::Azure).await).await }
        }
    )* };
}

on_stores_of_their_own!(
    newer_records_are_left_for_a_newer_gateway,
    housekeeping_runs_on_one_gateway_at_a_time,
);
