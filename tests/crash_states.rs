//! Crash states, built by hand: each scenario writes the objects exactly as a gateway killed
//! at one step leaves them (its intent, its mark, its staged record), then sends the rival
//! request a live gateway would get, and checks the final state once recovery has run.
//! Every scenario runs on the memory store, a local directory and SeaweedFS (bucket-prefix
//! and endpoint modes): the local directory publishes creates by moving the staged record,
//! the others commit them through an intent.

mod common;

use lance_gateway::access::Ctx;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::records::{
    FORMAT_VERSION, Intent, IntentKind, IntentState, Mark, TableRecord, encode,
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

macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Memory).await).await } )* }
        mod local { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::Local).await).await } )* }
        mod s3_bucket { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::S3Bucket).await).await } )* }
        mod s3_endpoint { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $scenario() { super::$scenario(super::world(super::Kind::S3Endpoint).await).await } )* }
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
);
