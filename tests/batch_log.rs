//! The commit log and batch commits, run against every store, with two gateways over one
//! warehouse: a batch is visible whole or not at all, a batch refused leaves no lock, and a
//! gateway that dies at either side of a batch's commit point leaves a state the other
//! gateway settles the right way (a committed batch rolled forward on the next read, an
//! uncommitted one failed once its record is abandoned, never before).

mod common;

use common::{final_key, stage};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lance_gateway::access::Ctx;
use lance_gateway::catalog::batch::{Change, Done};
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::log::{Head, Lock};
use lance_gateway::catalog::records::{
    FORMAT_VERSION, Intent, IntentKind, Mark, TableRecord, encode, now_ms,
};
use lance_gateway::catalog::transactions::TxStatus;
use lance_gateway::catalog::versions::NamingScheme;
use lance_gateway::catalog::{Catalog, CreateMode};
use lance_gateway::error::Code;
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::memory::MemoryStore;
use lance_gateway::store::{Condition, Store};

const GRACE: Duration = Duration::from_secs(2);

async fn body_at(store: &Arc<dyn Store>, key: &str) -> Option<String> {
    store
        .get(key)
        .await
        .unwrap()
        .map(|o| String::from_utf8_lossy(&o.body).to_string())
}

/// The newest version a managed reader is answered (the log, settled, or storage).
async fn visible(cat: &Catalog, store: &Arc<dyn Store>, t: &TableRecord) -> u64 {
    let log = cat.settle_log(t, None).await.unwrap();
    let mut stored = 0;
    for v in (1..10).rev() {
        if store.get(&final_key(t, v)).await.unwrap().is_some() {
            stored = v;
            break;
        }
    }
    let logged = log.version();
    assert!(
        logged <= stored,
        "the log names version {logged}, storage holds {stored}"
    );
    stored
}

async fn rules(store: Arc<dyn Store>, warehouse: Warehouse) {
    let a = common::open_catalog(store.clone(), warehouse.clone(), GRACE, "gw-a").await;
    let b = common::open_catalog(store.clone(), warehouse.clone(), GRACE, "gw-b").await;
    let ctx = Ctx::internal();
    let ns = vec![common::unique("ns")];
    a.create_namespace(&ctx, &ns, CreateMode::Create, HashMap::new())
        .await
        .unwrap();
    single_commits(&a, &b, &store, &ns).await;
    let mut tables = Vec::new();
    for name in ["docs", "emb", "dims"] {
        let id = [ns.clone(), vec![name.to_string()]].concat();
        let t = a
            .declare_table(&ctx, &id, None, HashMap::new())
            .await
            .unwrap();
        store
            .put(
                &final_key(&t, 1),
                Bytes::from(format!("{name}@1")),
                Condition::None,
            )
            .await
            .unwrap();
        tables.push(t);
    }

    // A batch over three tables: all at version 2, each manifest at its final name.
    let mut entries = Vec::new();
    for t in &tables {
        entries.push((
            t.id.clone(),
            Change::Version(stage(&a, &store, t, 2, &format!("{}@2", t.id[1])).await),
        ));
    }
    let (txid, committed) = a.commit_batch(&ctx, entries).await.unwrap();
    assert_eq!(
        committed.iter().map(version_of).collect::<Vec<_>>(),
        vec![2, 2, 2]
    );
    for t in &tables {
        assert_eq!(visible(&b, &store, t).await, 2);
        assert_eq!(
            body_at(&store, &final_key(t, 2)).await.unwrap(),
            format!("{}@2", t.id[1])
        );
    }
    let record = a.describe_transaction(&ctx, &txid).await.unwrap();
    assert_eq!(record.status, TxStatus::Succeeded);
    assert_eq!(record.batch.len(), 3);

    // One entry out of line (a hole) refuses the batch whole, and leaves no lock behind.
    let entries = vec![
        (
            tables[0].id.clone(),
            Change::Version(stage(&a, &store, &tables[0], 3, "docs@3").await),
        ),
        (
            tables[1].id.clone(),
            Change::Version(stage(&a, &store, &tables[1], 4, "emb@4").await),
        ),
    ];
    let err = a.commit_batch(&ctx, entries).await.unwrap_err();
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    assert_eq!(visible(&b, &store, &tables[0]).await, 2);
    assert!(
        store
            .get(&final_key(&tables[0], 3))
            .await
            .unwrap()
            .is_none()
    );
    let single = stage(&b, &store, &tables[0], 3, "docs@3 alone").await;
    assert_eq!(
        b.create_table_version(&ctx, &tables[0].id, single)
            .await
            .unwrap()
            .version,
        3
    );
    // An entry staged in another table's folder is refused before anything is written.
    let stray = stage(&a, &store, &tables[0], 3, "emb@3").await;
    let err = a
        .commit_batch(&ctx, vec![(tables[1].id.clone(), Change::Version(stray))])
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidInput, "{err}");

    // A gateway dies after the commit point, before publishing: the record says Succeeded,
    // the heads still hold its locks. The other gateway's next read publishes each table.
    let (t1, t2) = (&tables[1], &tables[2]);
    let crashed = a
        .begin_transaction(&t1.id, "batch_commit", "", BTreeMap::new())
        .await
        .unwrap();
    for t in [t1, t2] {
        lock(
            &store,
            &a,
            t,
            &crashed.record.id,
            3,
            &format!("{}@3 crashed", t.id[1]),
        )
        .await;
    }
    // Before the commit write, and while the record is fresh: nothing visible, writers
    // refused with 409.
    assert_eq!(visible(&b, &store, t1).await, 2);
    let rival = stage(&b, &store, t1, 3, "emb@3 rival").await;
    let err = b
        .create_table_version(&ctx, &t1.id, rival)
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    let mut crashed = crashed;
    a.finish_transaction(&mut crashed, TxStatus::Succeeded, None, &BTreeMap::new())
        .await
        .unwrap();
    for t in [t1, t2] {
        assert_eq!(visible(&b, &store, t).await, 3);
        assert_eq!(
            body_at(&store, &final_key(t, 3)).await.unwrap(),
            format!("{}@3 crashed", t.id[1])
        );
    }

    // A gateway dies before the commit point: its record stays Running. Past the grace
    // period the other gateway fails it and the tables move on without it.
    let dead = a
        .begin_transaction(&t1.id, "batch_commit", "", BTreeMap::new())
        .await
        .unwrap();
    for t in [t1, t2] {
        lock(&store, &a, t, &dead.record.id, 4, "never").await;
    }
    tokio::time::sleep(GRACE + Duration::from_millis(500)).await;
    let next = stage(&b, &store, t1, 4, "emb@4 after").await;
    assert_eq!(
        b.create_table_version(&ctx, &t1.id, next)
            .await
            .unwrap()
            .version,
        4
    );
    assert_eq!(visible(&b, &store, t2).await, 3);
    let failed = b.describe_transaction(&ctx, &dead.record.id).await.unwrap();
    assert_eq!(failed.status, TxStatus::Failed);
    assert!(store.get(&final_key(t2, 4)).await.unwrap().is_none());

    deletes_in_batches(&a, &b, &store, &tables).await;
    tables_in_batches(&a, &b, &store, &ns, &tables[0]).await;
}

fn version_of(done: &Done) -> u64 {
    match done {
        Done::Version(v) => v.version,
        other => panic!("{other:?} where a version was expected"),
    }
}

/// Whether `t`'s final manifests of `versions` are in storage, each.
async fn present(store: &Arc<dyn Store>, t: &TableRecord, versions: &[u64]) -> Vec<bool> {
    let mut out = Vec::new();
    for v in versions {
        let key = final_key(t, *v);
        let found = store
            .get(&key)
            .await
            .unwrap_or_else(|e| panic!("reading {key}: {e}"));
        out.push(found.is_some());
    }
    out
}

/// Versions deleted inside a batch: together with another table's new version, refused whole
/// when one would delete a table's latest version, and, when the batch's gateway died after
/// the commit point, deleted by the next reader before it is answered. Tables come in at
/// versions 3 (docs), 4 (emb) and 3 (dims).
async fn deletes_in_batches(
    a: &Arc<Catalog>,
    b: &Arc<Catalog>,
    store: &Arc<dyn Store>,
    tables: &[TableRecord],
) {
    let ctx = Ctx::internal();
    let (docs, dims) = (&tables[0], &tables[2]);
    let delete = |ranges: Vec<(i64, i64)>| Change::DeleteVersions {
        branch: None,
        ranges,
    };
    let (_, done) = a
        .commit_batch(
            &ctx,
            vec![
                (
                    docs.id.clone(),
                    Change::Version(stage(a, store, docs, 4, "docs@4").await),
                ),
                (dims.id.clone(), delete(vec![(1, 3)])),
            ],
        )
        .await
        .expect("a batch committing docs@4 and deleting dims' versions 1 and 2");
    assert_eq!(done[1], Done::Deleted(2));
    assert_eq!(version_of(&done[0]), 4);
    assert_eq!(present(store, dims, &[1, 2, 3]).await, [false, false, true]);
    assert_eq!(visible(b, store, docs).await, 4);

    // Deleting the latest version refuses the whole batch: docs' version 5 is not committed.
    let err = a
        .commit_batch(
            &ctx,
            vec![
                (
                    docs.id.clone(),
                    Change::Version(stage(a, store, docs, 5, "docs@5").await),
                ),
                (dims.id.clone(), delete(vec![(3, -1)])),
            ],
        )
        .await
        .expect_err("a batch deleting dims' latest version was accepted");
    assert_eq!(err.code, Code::InvalidInput, "{err}");
    assert_eq!(visible(b, store, docs).await, 4);
    assert!(present(store, dims, &[3]).await[0]);

    // A gateway dies after the commit point of a batch deleting docs' version 1: the lock
    // names the manifest, the record says Succeeded. Before the commit, the next version is
    // held; after it, the other gateway's next read deletes it and releases the table.
    let crashed = a
        .begin_transaction(&docs.id, "batch_commit", "", BTreeMap::new())
        .await
        .expect("recording the batch that will crash");
    let key = Layout::head_key("", &docs.data_key, None);
    let current = store
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("reading {key}: {e}"))
        .unwrap_or_else(|| panic!("docs has no head at {key} after its commits"));
    let mut head: Head = serde_json::from_slice(&current.body)
        .unwrap_or_else(|e| panic!("docs' head at {key} does not decode: {e}"));
    head.lock = Some(Lock {
        transaction_id: crashed.record.id.clone(),
        version: 5,
        manifest: String::new(),
        staged: String::new(),
        size: 0,
        locked_at_ms: now_ms(),
        deletes: vec![NamingScheme::V2.file_name(1)],
    });
    store
        .put(&key, encode(&head), Condition::IfMatch(current.etag))
        .await
        .unwrap_or_else(|e| panic!("writing the crashed batch's lock at {key}: {e}"));
    let rival = stage(b, store, docs, 5, "docs@5 rival").await;
    let err = b
        .create_table_version(&ctx, &docs.id, rival.clone())
        .await
        .expect_err("a commit of the version a deciding batch holds was accepted");
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    assert!(present(store, docs, &[1]).await[0]);
    // Nothing may be tagged or branched from the version the deciding batch deletes.
    let err = b
        .refuse_if_being_deleted(docs, None, 1)
        .await
        .expect_err("version 1, which the deciding batch deletes, was let be tagged");
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    b.refuse_if_being_deleted(docs, Some("main"), 2)
        .await
        .expect("version 2, which no batch deletes, may be tagged");
    let mut crashed = crashed;
    a.finish_transaction(&mut crashed, TxStatus::Succeeded, None, &BTreeMap::new())
        .await
        .expect("writing the crashed batch's record Succeeded");
    let log = b
        .settle_log(docs, None)
        .await
        .expect("settling docs' head after the crashed batch committed");
    assert!(log.worked && log.live_lock().is_none());
    assert_eq!(log.version(), 4);
    assert_eq!(present(store, docs, &[1, 2, 4]).await, [false, true, true]);
    assert_eq!(
        b.create_table_version(&ctx, &docs.id, rival)
            .await
            .expect("version 5 once the deleting batch is settled")
            .version,
        5
    );
}

/// Whether table `id` is listed by `cat` in namespace `ns`.
async fn listed(cat: &Catalog, ns: &[String], id: &[String]) -> bool {
    let listing = cat
        .list_tables(&Ctx::internal(), ns, None, None, true)
        .await
        .unwrap_or_else(|e| panic!("listing {ns:?}: {e}"));
    listing.items.iter().any(|name| Some(name) == id.last())
}

/// The error `cat` answers a describe of table `id` with (none when it is there).
async fn describe_error(cat: &Catalog, id: &[String]) -> Option<Code> {
    cat.describe_table(&Ctx::internal(), id)
        .await
        .err()
        .map(|e| e.code)
}

/// What a gateway that stops inside a batch leaves of a declare of `id` and a deregister of
/// `gone` (a table that is there), both decided by batch `txid`: the declare's intent at its
/// pending key, the deregister's intent at the other's pending key and the mark on its
/// record naming it.
async fn stage_by_hand(
    cat: &Catalog,
    store: &Arc<dyn Store>,
    txid: &str,
    id: &[String],
    gone: &[String],
) {
    let (parent, name) = id.split_at(id.len() - 1);
    let placed = cat.layout().place(parent).expect("placing the namespace");
    let data_key = Layout::default_data_key(&placed, &name[0], "");
    let record = TableRecord {
        format_version: FORMAT_VERSION,
        id: id.to_vec(),
        uid: common::unique("u"),
        location: cat.layout().uri_of(&data_key),
        data_key,
        created_at_ms: now_ms(),
        properties: HashMap::new(),
        origin: "declare".into(),
        created_by: Some("gw-a".into()),
        mark: None,
        rev: common::unique("r"),
    };
    let mut declare = Intent::new(
        record.uid.clone(),
        "gw-a".into(),
        IntentKind::CreateTable { record },
    );
    declare.batch = Some(txid.to_string());
    let pending = cat
        .table_pending_key(id)
        .unwrap_or_else(|e| panic!("the pending key of {id:?}: {e}"));
    store
        .put(&pending, encode(&declare), Condition::IfAbsent)
        .await
        .unwrap_or_else(|e| panic!("staging the declare at {pending}: {e}"));
    let key = cat
        .table_key(gone)
        .unwrap_or_else(|e| panic!("the record key of {gone:?}: {e}"));
    let current = store
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("reading {key}: {e}"))
        .unwrap_or_else(|| panic!("no record at {key}"));
    let record: TableRecord = serde_json::from_slice(&current.body)
        .unwrap_or_else(|e| panic!("the record at {key} does not decode: {e}"));
    let op_id = common::unique("op");
    let mut drop = Intent::new(
        op_id.clone(),
        "gw-a".into(),
        IntentKind::DropTable {
            record: record.clone(),
            delete_data: false,
            keep_until_ms: None,
            dropped: None,
            dropped_by: None,
        },
    );
    drop.batch = Some(txid.to_string());
    let drop_key = cat
        .table_pending_key(gone)
        .unwrap_or_else(|e| panic!("the pending key of {gone:?}: {e}"));
    store
        .put(&drop_key, encode(&drop), Condition::IfAbsent)
        .await
        .unwrap_or_else(|e| panic!("staging the deregister at {drop_key}: {e}"));
    let marked = TableRecord {
        mark: Some(Mark {
            op_id,
            intent: drop_key,
            batch: Some(txid.to_string()),
        }),
        ..record
    };
    store
        .put(&key, encode(&marked), Condition::IfMatch(current.etag))
        .await
        .unwrap_or_else(|e| panic!("marking {key}: {e}"));
}

/// A declare at the table's default folder, with no properties.
fn declare() -> Change {
    Change::Declare {
        location: None,
        properties: HashMap::new(),
    }
}

/// Tables declared and deregistered inside batches (BatchCommitTables' declare_table and
/// deregister_table): together with another table's version, seen by describe and listings
/// from the commit point on; refused whole when one entry fails (nothing declared, nothing
/// deregistered, names and folders free); and, when the batch's gateway died, rolled
/// forward by the other gateway after the commit point, rolled back once the record is
/// abandoned before it.
async fn tables_in_batches(
    a: &Arc<Catalog>,
    b: &Arc<Catalog>,
    store: &Arc<dyn Store>,
    ns: &[String],
    docs: &TableRecord,
) {
    let ctx = Ctx::internal();
    let id = |name: &str| [ns.to_vec(), vec![name.to_string()]].concat();
    let old = a
        .declare_table(&ctx, &id("old"), None, HashMap::new())
        .await
        .expect("declaring old");
    let next = visible(b, store, docs).await + 1;
    let (txid, done) = a
        .commit_batch(
            &ctx,
            vec![
                (
                    id("fresh"),
                    Change::Declare {
                        location: None,
                        properties: HashMap::from([("k".to_string(), "v".to_string())]),
                    },
                ),
                (
                    docs.id.clone(),
                    Change::Version(stage(a, store, docs, next, "docs next").await),
                ),
                (id("old"), Change::Deregister),
            ],
        )
        .await
        .expect("a batch declaring fresh, committing docs' next version, deregistering old");
    assert!(
        matches!(&done[0], Done::Declared(t) if t.id == id("fresh")),
        "{done:?}"
    );
    assert_eq!(version_of(&done[1]), next);
    assert!(
        matches!(&done[2], Done::Deregistered(t) if t.uid == old.uid),
        "{done:?}"
    );
    let fresh = b
        .describe_table(&ctx, &id("fresh"))
        .await
        .expect("describing the table the batch declared");
    assert_eq!(fresh.properties.get("k").map(String::as_str), Some("v"));
    assert_eq!(
        describe_error(b, &id("old")).await,
        Some(Code::TableNotFound)
    );
    assert!(listed(b, ns, &id("fresh")).await && !listed(b, ns, &id("old")).await);
    assert_eq!(visible(b, store, docs).await, next);
    for gone in [id("fresh"), id("old")] {
        let pending = a
            .table_pending_key(&gone)
            .unwrap_or_else(|e| panic!("the pending key of {gone:?}: {e}"));
        assert!(
            body_at(store, &pending).await.is_none(),
            "{pending} is left"
        );
    }
    // The deregistered table's folder is free: another table may be declared at it.
    b.declare_table(&ctx, &id("old-again"), Some(&old.location), HashMap::new())
        .await
        .expect("declaring a table at the deregistered table's folder");
    let record = a
        .describe_transaction(&ctx, &txid)
        .await
        .unwrap_or_else(|e| panic!("describing the committed batch {txid}: {e}"));
    let summary = &record.results["versions"];
    assert!(
        summary.contains("fresh declares") && summary.contains("old deregisters"),
        "{summary}"
    );

    // One entry out of line refuses the whole batch: nothing declared or deregistered.
    let err = a
        .commit_batch(
            &ctx,
            vec![
                (id("never"), declare()),
                (id("fresh"), Change::Deregister),
                (
                    docs.id.clone(),
                    Change::Version(stage(a, store, docs, next + 2, "a hole").await),
                ),
            ],
        )
        .await
        .expect_err("a batch with a version out of line was accepted");
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    assert_eq!(
        describe_error(b, &id("never")).await,
        Some(Code::TableNotFound)
    );
    assert_eq!(describe_error(b, &id("fresh")).await, None);
    let fresh_key = a
        .table_key(&id("fresh"))
        .unwrap_or_else(|e| panic!("the record key of fresh: {e}"));
    let fresh_body = body_at(store, &fresh_key)
        .await
        .unwrap_or_else(|| panic!("fresh has no record at {fresh_key} after a refused batch"));
    let fresh_now: TableRecord = serde_json::from_str(&fresh_body)
        .unwrap_or_else(|e| panic!("the record at {fresh_key} does not decode: {e}"));
    assert!(fresh_now.mark.is_none(), "{fresh_now:?}");
    for left in [id("never"), id("fresh")] {
        let pending = a
            .table_pending_key(&left)
            .unwrap_or_else(|e| panic!("the pending key of {left:?}: {e}"));
        assert!(
            body_at(store, &pending).await.is_none(),
            "{pending} is left"
        );
    }
    // A deregister is the only change of its table in a batch, whichever comes first.
    for deregister_first in [false, true] {
        let mut entries = vec![
            (
                docs.id.clone(),
                Change::Version(stage(a, store, docs, next + 1, "docs after").await),
            ),
            (docs.id.clone(), Change::Deregister),
        ];
        if deregister_first {
            entries.reverse();
        }
        let err = a
            .commit_batch(&ctx, entries)
            .await
            .expect_err("a batch committing to a table it deregisters was accepted");
        assert_eq!(err.code, Code::InvalidInput, "{err}");
    }
    assert_eq!(visible(b, store, docs).await, next);
    // A declare of a name that is taken refuses the batch too.
    let err = a
        .commit_batch(
            &ctx,
            vec![(id("fresh"), declare()), (id("never"), declare())],
        )
        .await
        .expect_err("a batch declaring a table that exists was accepted");
    assert_eq!(err.code, Code::TableAlreadyExists, "{err}");
    assert_eq!(
        describe_error(b, &id("never")).await,
        Some(Code::TableNotFound)
    );
    b.declare_table(&ctx, &id("never"), None, HashMap::new())
        .await
        .expect("declaring the name a refused batch would have declared");

    // A gateway dies inside a batch that declares late and deregisters fresh. While its
    // record says Running (and is fresh), neither is seen and the names stay held.
    let mut dying = a
        .begin_transaction(&id("late"), "batch_commit", "", BTreeMap::new())
        .await
        .expect("recording the batch that will die");
    stage_by_hand(a, store, &dying.record.id, &id("late"), &id("fresh")).await;
    assert_eq!(
        describe_error(b, &id("late")).await,
        Some(Code::TableNotFound)
    );
    assert_eq!(describe_error(b, &id("fresh")).await, None);
    assert!(!listed(b, ns, &id("late")).await && listed(b, ns, &id("fresh")).await);
    // Its commit write landed: both are seen at once, before anyone finishes them.
    a.finish_transaction(&mut dying, TxStatus::Succeeded, None, &BTreeMap::new())
        .await
        .expect("writing the dying batch's record Succeeded");
    assert_eq!(describe_error(b, &id("late")).await, None);
    assert_eq!(
        describe_error(b, &id("fresh")).await,
        Some(Code::TableNotFound)
    );
    assert!(listed(b, ns, &id("late")).await && !listed(b, ns, &id("fresh")).await);
    // The next writer finishes them: fresh's name is free, late is published.
    b.declare_table(&ctx, &id("fresh"), None, HashMap::new())
        .await
        .expect("declaring the name the committed batch deregistered");
    let err = b
        .declare_table(&ctx, &id("late"), None, HashMap::new())
        .await
        .expect_err("declaring the name the committed batch declared was accepted");
    assert_eq!(err.code, Code::TableAlreadyExists, "{err}");
    let late_key = a
        .table_key(&id("late"))
        .unwrap_or_else(|e| panic!("the record key of late: {e}"));
    assert!(
        body_at(store, &late_key).await.is_some(),
        "late is not published"
    );

    // A gateway dies before its batch's commit point: past the grace period its record is
    // failed by the next writer, which finds the names as they were.
    let dead = a
        .begin_transaction(&id("ghost"), "batch_commit", "", BTreeMap::new())
        .await
        .expect("recording the batch that will die before committing");
    stage_by_hand(a, store, &dead.record.id, &id("ghost"), &id("late")).await;
    tokio::time::sleep(GRACE + Duration::from_millis(500)).await;
    assert_eq!(
        describe_error(b, &id("ghost")).await,
        Some(Code::TableNotFound)
    );
    assert_eq!(describe_error(b, &id("late")).await, None);
    b.declare_table(&ctx, &id("ghost"), None, HashMap::new())
        .await
        .expect("declaring the name the failed batch would have declared");
    b.drop_table(&ctx, &id("late"), false)
        .await
        .expect("deregistering the table the failed batch would have deregistered");
    let failed = b
        .describe_transaction(&ctx, &dead.record.id)
        .await
        .unwrap_or_else(|e| panic!("describing the failed batch {}: {e}", dead.record.id));
    assert_eq!(failed.status, TxStatus::Failed);
}

/// A single-table commit through the log, and the head it leaves: nothing writes the head
/// after the answer (its staging note stays), a settler that sees storage holding the
/// version has nothing to do, and one that finds a committed version unpublished (its
/// gateway died after the commit point) publishes it before anyone is answered.
async fn single_commits(a: &Arc<Catalog>, b: &Arc<Catalog>, store: &Arc<dyn Store>, ns: &[String]) {
    let ctx = Ctx::internal();
    let id = [ns.to_vec(), vec!["solo".to_string()]].concat();
    let t = a
        .declare_table(&ctx, &id, None, HashMap::new())
        .await
        .unwrap();
    store
        .put(&final_key(&t, 1), Bytes::from("solo@1"), Condition::None)
        .await
        .unwrap();
    let req = stage(a, store, &t, 2, "solo@2").await;
    assert_eq!(
        a.create_table_version(&ctx, &id, req)
            .await
            .unwrap()
            .version,
        2
    );
    assert_eq!(body_at(store, &final_key(&t, 2)).await.unwrap(), "solo@2");
    let head_key = Layout::head_key("", &t.data_key, None);
    let answered = store.get(&head_key).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = store.get(&head_key).await.unwrap().unwrap();
    assert_eq!(
        answered.etag, later.etag,
        "the head was written after the answer"
    );
    let head: Head = serde_json::from_slice(&later.body).unwrap();
    assert_eq!((head.version, head.staged.is_some()), (2, true));

    let (log, _) = b
        .settle_beside(&t, None, async { Some(2u64) }, |v| *v)
        .await;
    assert!(!log.unwrap().worked);
    let settled = store.get(&head_key).await.unwrap().unwrap();
    assert_eq!(
        settled.etag, later.etag,
        "a settler wrote a head it had nothing to do for"
    );

    // Version 3 committed in the log, its gateway gone before publishing it.
    let staged = stage(a, store, &t, 3, "solo@3").await;
    let died = Head {
        manifest: NamingScheme::V2.file_name(3),
        staged: Some(staged.manifest_path.rsplit('/').next().unwrap().to_string()),
        size: 6,
        ..Head::new(&t.uid, 3)
    };
    store
        .put(&head_key, encode(&died), Condition::IfMatch(settled.etag))
        .await
        .unwrap();
    let (log, _) = b
        .settle_beside(&t, None, async { Some(2u64) }, |v| *v)
        .await;
    assert!(log.unwrap().worked);
    assert_eq!(body_at(store, &final_key(&t, 3)).await.unwrap(), "solo@3");
    assert_eq!(visible(b, store, &t).await, 3);
}

/// Writes a batch's lock on `t`'s head for `version`, staging `body`, as a gateway that then
/// died would leave it.
async fn lock(
    store: &Arc<dyn Store>,
    cat: &Catalog,
    t: &TableRecord,
    txid: &str,
    version: u64,
    body: &str,
) {
    let staged = stage(cat, store, t, version, body).await;
    let key = Layout::head_key("", &t.data_key, None);
    let current = store.get(&key).await.unwrap();
    let mut head = match &current {
        Some(obj) => serde_json::from_slice::<Head>(&obj.body).unwrap(),
        None => Head::new(&t.uid, version - 1),
    };
    let name = staged.manifest_path.rsplit('/').next().unwrap().to_string();
    head.lock = Some(Lock {
        transaction_id: txid.to_string(),
        version,
        manifest: NamingScheme::V2.file_name(version),
        staged: name,
        size: body.len() as u64,
        locked_at_ms: now_ms(),
        deletes: Vec::new(),
    });
    let cond = match current {
        Some(obj) => Condition::IfMatch(obj.etag),
        None => Condition::IfAbsent,
    };
    store.put(&key, encode(&head), cond).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_on_memory() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    rules(
        store,
        Warehouse::S3Bucket {
            bucket: "mem".into(),
            prefix: String::new(),
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_on_local_directory() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FsStore::open_with_sync(dir.path(), false).expect("the local store opens");
    let warehouse = Warehouse::Local(store.root().to_path_buf());
    rules(Arc::new(store), warehouse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_on_s3() {
    let (store, warehouse) = common::s3_warehouse("batch").await;
    rules(Arc::new(store), warehouse).await;
}

/// A batch that finds its table held waits for a line that moves: each batch holding the
/// table is waited for up to `commit_wait`, and the line up to twice that. Three batches
/// that each hold the table for half of `commit_wait` (longer than it in all) keep the
/// waiting batch waiting until the last lets go, and it then commits; one batch that holds
/// the table longer than `commit_wait` gets the waiting batch refused as held (409, code
/// 14), with nothing of it visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waits_while_the_line_ahead_of_it_moves() {
    // A grace period of 8 s: `commit_wait` is 2 s, the line's wait 4 s.
    let grace = Duration::from_secs(8);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let warehouse = Warehouse::S3Bucket {
        bucket: "mem".into(),
        prefix: String::new(),
    };
    let a = common::open_catalog(store.clone(), warehouse.clone(), grace, "gw-a").await;
    let b = common::open_catalog(store.clone(), warehouse, grace, "gw-b").await;
    let ctx = Ctx::internal();
    let ns = vec![common::unique("ns")];
    a.create_namespace(&ctx, &ns, CreateMode::Create, HashMap::new())
        .await
        .expect("the namespace is created");
    let id = [ns.clone(), vec!["busy".to_string()]].concat();
    let t = a
        .declare_table(&ctx, &id, None, HashMap::new())
        .await
        .expect("the table is declared");
    store
        .put(&final_key(&t, 1), Bytes::from("busy@1"), Condition::None)
        .await
        .expect("version 1 is written");

    // Three batches on the other gateway hold version 2 one after another, a second each.
    let mut holder = b
        .begin_transaction(&t.id, "batch_commit", "", BTreeMap::new())
        .await
        .expect("the first holder begins");
    lock(&store, &b, &t, &holder.record.id, 2, "held@2").await;
    let line = {
        let (b, store, t) = (b.clone(), store.clone(), t.clone());
        tokio::spawn(async move {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let next = b
                    .begin_transaction(&t.id, "batch_commit", "", BTreeMap::new())
                    .await
                    .expect("the next holder begins");
                lock(&store, &b, &t, &next.record.id, 2, "held@2").await;
                b.finish_transaction(&mut holder, TxStatus::Failed, None, &BTreeMap::new())
                    .await
                    .expect("the holder before it is failed");
                holder = next;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            b.finish_transaction(&mut holder, TxStatus::Failed, None, &BTreeMap::new())
                .await
                .expect("the last holder is failed");
        })
    };
    let mine = stage(&a, &store, &t, 2, "mine@2").await;
    let (_, done) = a
        .commit_batch(&ctx, vec![(t.id.clone(), Change::Version(mine))])
        .await
        .expect("the batch behind a moving line commits");
    line.await.expect("the line of holders ran");
    assert_eq!(done.iter().map(version_of).collect::<Vec<_>>(), vec![2]);
    assert_eq!(visible(&b, &store, &t).await, 2);
    assert_eq!(
        body_at(&store, &final_key(&t, 2)).await.as_deref(),
        Some("mine@2")
    );

    // One batch holds version 3 for longer than `commit_wait`: the waiting batch is refused.
    let stuck = b
        .begin_transaction(&t.id, "batch_commit", "", BTreeMap::new())
        .await
        .expect("the stuck holder begins");
    lock(&store, &b, &t, &stuck.record.id, 3, "stuck@3").await;
    let mine = stage(&a, &store, &t, 3, "mine@3").await;
    let err = a
        .commit_batch(&ctx, vec![(t.id.clone(), Change::Version(mine))])
        .await
        .expect_err("a batch behind a holder that does not move is refused");
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    assert!(
        err.message
            .contains(&format!("held by batch commit {}", stuck.record.id)),
        "{err}"
    );
    assert_eq!(visible(&b, &store, &t).await, 2);
    assert_eq!(body_at(&store, &final_key(&t, 3)).await, None);
}
