//! What a commit answers when the store fails around its commit point, against the local
//! directory and SeaweedFS, with two gateways over one warehouse and the faults injected by
//! a decorator over the real store:
//! - a failure after the deciding write (the publish, the receipt) answers success, and
//!   readers see the commit;
//! - a deciding write whose outcome the store will not tell, landed or not, answers the
//!   distinct unknown-outcome error with the batch's id, and the record is settled
//!   (Succeeded or Failed, never left Running);
//! - a retry with the same idempotency key, to the other gateway, answers the first
//!   attempt's outcome and applies nothing twice; the same key with another request is
//!   refused;
//! - overlapping batches on two gateways all get through.

mod common;

use common::{final_key, stage};

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use lance_gateway::access::Ctx;
use lance_gateway::catalog::Catalog;
use lance_gateway::catalog::CreateMode;
use lance_gateway::catalog::batch::{Change, Done};
use lance_gateway::catalog::idempotency::Key;
use lance_gateway::catalog::layout::Warehouse;
use lance_gateway::catalog::records::TableRecord;
use lance_gateway::catalog::transactions::TxStatus;
use lance_gateway::error::Code;
use lance_gateway::store::fs::FsStore;
use lance_gateway::store::{Condition, Object, Page, Store, StoreError, StoreResult};

const GRACE: Duration = Duration::from_secs(2);

type Rule = Box<dyn Fn(&str, Option<&[u8]>) -> bool + Send + Sync>;

/// What the decorator does to matching requests.
#[derive(Default)]
struct Plan {
    /// Puts it fails, unsent.
    refuse: Option<Rule>,
    /// The next put it loses the answer of: sent (`true`) or not, then failed; from then
    /// on every request to that key fails for the duration.
    lose: Option<(Rule, bool, Duration)>,
    /// Every request to a matching key fails until then.
    down: Option<(Rule, Instant)>,
}

/// A real store whose answers fail as `plan` says: a store that timed out, reset the
/// connection, or failed after the request was sent.
struct Faulty {
    inner: Arc<dyn Store>,
    plan: Mutex<Plan>,
}

fn injected() -> StoreError {
    StoreError::Other("injected: connection reset".into())
}

impl Faulty {
    fn set(&self, change: impl FnOnce(&mut Plan)) {
        change(&mut self.plan.lock().unwrap());
    }

    fn down(&self, key: &str) -> bool {
        let plan = self.plan.lock().unwrap();
        plan.down
            .as_ref()
            .is_some_and(|(rule, until)| Instant::now() < *until && rule(key, None))
    }
}

#[async_trait]
impl Store for Faulty {
    async fn get(&self, key: &str) -> StoreResult<Option<Object>> {
        if self.down(key) {
            return Err(injected());
        }
        self.inner.get(key).await
    }

    async fn put(&self, key: &str, body: Bytes, cond: Condition) -> StoreResult<String> {
        if self.down(key) {
            return Err(injected());
        }
        let (refused, lost) = {
            let mut plan = self.plan.lock().unwrap();
            let refused = plan.refuse.as_ref().is_some_and(|r| r(key, Some(&body)));
            let lost = match plan.lose.take() {
                Some((rule, landed, down)) if rule(key, Some(&body)) => {
                    let lost_key = key.to_string();
                    plan.down = Some((
                        Box::new(move |k: &str, _: Option<&[u8]>| k == lost_key),
                        Instant::now() + down,
                    ));
                    Some(landed)
                }
                other => {
                    plan.lose = other;
                    None
                }
            };
            (refused, lost)
        };
        if refused {
            return Err(injected());
        }
        match lost {
            Some(landed) => {
                if landed {
                    self.inner.put(key, body, cond).await?;
                }
                Err(injected())
            }
            None => self.inner.put(key, body, cond).await,
        }
    }

    async fn delete(&self, key: &str, cond: Condition) -> StoreResult<()> {
        if self.down(key) {
            return Err(injected());
        }
        self.inner.delete(key, cond).await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        shallow: bool,
    ) -> StoreResult<Page> {
        self.inner.list(prefix, start_after, limit, shallow).await
    }

    async fn delete_prefix(&self, prefix: &str) -> StoreResult<u64> {
        self.inner.delete_prefix(prefix).await
    }

    async fn check(&self) -> StoreResult<()> {
        self.inner.check().await
    }
}

/// The bodies of a table's published versions, by version (a managed reader's view: the log
/// settled first).
async fn history(cat: &Catalog, store: &Arc<dyn Store>, t: &TableRecord) -> Vec<String> {
    cat.settle_log(t, None)
        .await
        .unwrap_or_else(|e| panic!("settling {:?}: {e}", t.id));
    let mut bodies = Vec::new();
    loop {
        let key = final_key(t, bodies.len() as u64 + 1);
        match store.get(&key).await {
            Ok(Some(obj)) => bodies.push(String::from_utf8_lossy(&obj.body).to_string()),
            Ok(None) => return bodies,
            Err(e) => panic!("reading {key}: {e}"),
        }
    }
}

/// The newest version of `t` a managed reader sees.
async fn latest(cat: &Catalog, store: &Arc<dyn Store>, t: &TableRecord) -> u64 {
    history(cat, store, t).await.len() as u64
}

/// A namespace of `n` tables, each at version 1.
async fn tables(cat: &Catalog, store: &Arc<dyn Store>, n: usize) -> Vec<TableRecord> {
    let ctx = Ctx::internal();
    let ns = vec![common::unique("ns")];
    cat.create_namespace(&ctx, &ns, CreateMode::Create, HashMap::new())
        .await
        .expect("namespace created");
    let mut out = Vec::new();
    for i in 0..n {
        let id = vec![ns[0].clone(), format!("t{i}")];
        let t = cat
            .declare_table(&ctx, &id, None, HashMap::new())
            .await
            .expect("table declared");
        store
            .put(
                &final_key(&t, 1),
                Bytes::from(format!("t{i}@1")),
                Condition::None,
            )
            .await
            .unwrap();
        out.push(t);
    }
    out
}

/// A batch committing version `version` of each of `ts`, with bodies tagged `tag`.
async fn batch(
    cat: &Catalog,
    store: &Arc<dyn Store>,
    ts: &[&TableRecord],
    version: u64,
    tag: &str,
) -> Vec<(Vec<String>, Change)> {
    let mut entries = Vec::new();
    for t in ts {
        let body = format!("{}@{version} {tag}", t.id[1]);
        entries.push((
            t.id.clone(),
            Change::Version(stage(cat, store, t, version, &body).await),
        ));
    }
    entries
}

fn key(name: &str, request: &str) -> Option<Key> {
    Some(Key::new(name, format!("fingerprint of {request}")).expect("a valid key"))
}

fn versions(done: &[Done]) -> Vec<u64> {
    done.iter()
        .map(|d| match d {
            Done::Version(v) => v.version,
            other => panic!("not a version: {other:?}"),
        })
        .collect()
}

/// Waits until the record of `id` is settled (not Running); answers its status.
async fn settled(cat: &Catalog, id: &str) -> TxStatus {
    let ctx = Ctx::internal();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // What DescribeTransaction answers: a record whose gateway stopped is settled first.
        let status = match cat.describe_transaction(&ctx, id).await {
            Ok(record) if cat.abandoned(&record) => cat
                .settle_transaction(&ctx, id, TxStatus::Failed, None)
                .await
                .map(|r| r.status),
            Ok(record) => Ok(record.status),
            Err(e) => Err(e),
        };
        match status {
            Ok(status) if status.finished() => return status,
            // Running, or the store still failing the record.
            other => assert!(Instant::now() < deadline, "{id}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_record(key: &str, body: Option<&[u8]>) -> bool {
    key.contains("/transactions/")
        && !key.contains("/keys/")
        && body.is_none_or(|b| String::from_utf8_lossy(b).contains("\"Succeeded\""))
}

async fn outcomes(faulty: Arc<Faulty>, warehouse: Warehouse) {
    let store: Arc<dyn Store> = faulty.clone();
    let a = common::open_catalog(store.clone(), warehouse.clone(), GRACE, "gw-a").await;
    let b = common::open_catalog(store.clone(), warehouse.clone(), GRACE, "gw-b").await;
    let ctx = Ctx::internal();
    let ts = tables(&a, &store, 4).await;

    // 1. The publish and the receipts fail after the deciding write: still a success, with
    // the batch's id, and the other gateway's readers see both versions.
    faulty.set(|p| {
        p.refuse = Some(Box::new(|key, _| {
            (key.contains("/_versions/") && key.ends_with(".manifest"))
                || (key.contains("/commits/") && !key.ends_with("head.json"))
        }))
    });
    let entries = batch(&a, &store, &[&ts[0], &ts[1]], 2, "published late").await;
    let (id, done) = a
        .commit_batch_keyed(&ctx, entries.clone(), key("k-late", "late"))
        .await
        .expect("a batch whose publish failed after its commit point answers success");
    assert_eq!(versions(&done), vec![2, 2]);
    faulty.set(|p| p.refuse = None);
    for t in [&ts[0], &ts[1]] {
        assert_eq!(
            history(&b, &store, t).await,
            vec![
                format!("{}@1", t.id[1]),
                format!("{}@2 published late", t.id[1])
            ]
        );
    }
    // Retried by key on the other gateway: the same answer, nothing applied again.
    let (again, redone) = b
        .commit_batch_keyed(&ctx, entries.clone(), key("k-late", "late"))
        .await
        .expect("a retry by key answers the first attempt's success");
    assert_eq!(
        (again.as_str(), versions(&redone)),
        (id.as_str(), vec![2, 2])
    );
    assert_eq!(latest(&b, &store, &ts[0]).await, 2);
    // The same key with another request is refused, naming the key, and changes nothing.
    let err = b
        .commit_batch_keyed(&ctx, entries, key("k-late", "something else"))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::ConcurrentModification, "{err}");
    assert!(err.message.contains("k-late"), "{err}");

    // A single-table commit whose publish fails after its head moved: success too.
    faulty.set(|p| {
        p.refuse = Some(Box::new(|key, _| {
            key.contains("/_versions/") && key.ends_with(".manifest")
        }))
    });
    let single = stage(&a, &store, &ts[3], 2, "t3@2 single").await;
    let committed = a
        .create_table_version_keyed(&ctx, &ts[3].id, single.clone(), key("k-single", "single"))
        .await
        .expect("a commit whose publish failed after its commit point answers success");
    assert_eq!(committed.version, 2);
    faulty.set(|p| p.refuse = None);
    assert_eq!(latest(&b, &store, &ts[3]).await, 2);
    let retried = b
        .create_table_version_keyed(&ctx, &ts[3].id, single, key("k-single", "single"))
        .await
        .expect("a single commit retried by key answers its success");
    assert_eq!(retried.version, 2);
    assert_eq!(latest(&b, &store, &ts[3]).await, 2);

    // 2. The deciding write's outcome is unknown, both ways, and the store will not say for
    // a while: the distinct error with the batch's id; the record is settled afterwards,
    // and retries by key on the other gateway answer that outcome and apply nothing twice.
    // What each of the two tables holds, by version, as the batches commit.
    let mut expected: Vec<String> = vec!["@1".into(), "@2 published late".into()];
    for landed in [true, false] {
        let version = expected.len() as u64 + 1;
        let tag = format!("unknown landed={landed}");
        let entries = batch(&a, &store, &[&ts[0], &ts[1]], version, &tag).await;
        faulty.set(|p| p.lose = Some((Box::new(is_record), landed, Duration::from_millis(1500))));
        let name = format!("k-unknown-{landed}");
        let err = a
            .commit_batch_keyed(&ctx, entries.clone(), key(&name, &tag))
            .await
            .unwrap_err();
        assert!(err.outcome_unknown, "landed={landed}: {err}");
        let id = err
            .transaction_id
            .clone()
            .expect("the batch's id is answered");
        // Settled, never left Running: committed by its gateway once the store answers, or
        // (a write that did not land, not redone within the grace period) failed by whoever
        // meets it. A write that landed is committed whatever happens after.
        let status = settled(&b, &id).await;
        let retried = b
            .commit_batch_keyed(&ctx, entries.clone(), key(&name, &tag))
            .await;
        match status {
            TxStatus::Succeeded => {
                let (again, done) = retried.expect("a committed batch's retry answers success");
                assert_eq!(
                    (again, versions(&done)),
                    (id.clone(), vec![version, version])
                );
                expected.push(format!("@{version} {tag}"));
            }
            TxStatus::Failed if !landed => {
                let refused = retried.expect_err("a failed batch's retry answers its failure");
                assert_eq!(refused.transaction_id.as_deref(), Some(id.as_str()));
                assert!(!refused.outcome_unknown, "{refused}");
            }
            other => panic!("landed={landed}: the batch ended {other:?}"),
        }
        for t in [&ts[0], &ts[1]] {
            let want: Vec<String> = expected.iter().map(|e| format!("{}{e}", t.id[1])).collect();
            assert_eq!(history(&b, &store, t).await, want, "landed={landed}");
        }
    }

    // The owner cannot learn the outcome for longer than the grace period, and its write did
    // not land: whoever meets the record fails it, and a retry by key answers that failure
    // (applying nothing).
    let next = expected.len() as u64 + 1;
    let entries = batch(&a, &store, &[&ts[0], &ts[1]], next, "lost for good").await;
    faulty.set(|p| {
        p.lose = Some((
            Box::new(is_record),
            false,
            GRACE + Duration::from_millis(2500),
        ))
    });
    let err = a
        .commit_batch_keyed(&ctx, entries.clone(), key("k-lost", "lost"))
        .await
        .unwrap_err();
    assert!(err.outcome_unknown, "{err}");
    let id = err
        .transaction_id
        .clone()
        .expect("the unknown outcome names the batch");
    tokio::time::sleep(GRACE + Duration::from_millis(2600)).await;
    let refused = b
        .commit_batch_keyed(&ctx, entries, key("k-lost", "lost"))
        .await
        .unwrap_err();
    assert!(!refused.outcome_unknown, "{refused}");
    assert_eq!(refused.transaction_id.as_deref(), Some(id.as_str()));
    assert_eq!(settled(&b, &id).await, TxStatus::Failed);
    assert_eq!(latest(&b, &store, &ts[0]).await, next - 1);
    assert_eq!(latest(&b, &store, &ts[1]).await, next - 1);
    // Its locks are gone: the next batch commits.
    let entries = batch(&b, &store, &[&ts[0], &ts[1]], next, "after").await;
    b.commit_batch(&ctx, entries)
        .await
        .expect("a failed batch leaves no lock behind");

    // 3. Overlapping batches from two gateways all get through.
    contention(&a, &b, &store, &ts).await;
}

/// Six writers on two gateways, each committing batches over overlapping subsets of the
/// tables (every subset of two or more, in turn), retrying a refused batch on the versions
/// then current: every batch commits within its tries, and each table's versions are
/// exactly its committed batches, each once.
async fn contention(
    a: &Arc<Catalog>,
    b: &Arc<Catalog>,
    store: &Arc<dyn Store>,
    ts: &[TableRecord],
) {
    const WRITERS: usize = 6;
    const BLOCKS: usize = 5;
    const TRIES: usize = 60;
    let subsets: Vec<Vec<usize>> = (1u32..16)
        .filter(|m| m.count_ones() >= 2)
        .map(|m| (0..4).filter(|i| m & (1 << i) != 0).collect())
        .collect();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let cat = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (store, ts, subsets) = (store.clone(), ts.to_vec(), subsets.clone());
        writers.push(tokio::spawn(async move {
            let ctx = Ctx::internal();
            let mut committed = Vec::new();
            let mut refusals = 0;
            for block in 0..BLOCKS {
                let subset = &subsets[(w * BLOCKS + block) % subsets.len()];
                let tag = format!("w{w}b{block}");
                let mut tries = 0;
                loop {
                    tries += 1;
                    assert!(tries <= TRIES, "{tag} was refused {TRIES} times");
                    let mut entries = Vec::new();
                    for i in subset {
                        let t = &ts[*i];
                        let next = latest(&cat, &store, t).await + 1;
                        let body = format!("{}@{next} {tag}", t.id[1]);
                        entries.push((
                            t.id.clone(),
                            Change::Version(stage(&cat, &store, t, next, &body).await),
                        ));
                    }
                    match cat.commit_batch(&ctx, entries).await {
                        Ok(_) => break,
                        Err(e) if e.code == Code::ConcurrentModification => refusals += 1,
                        Err(e) => panic!("{tag}: {e}"),
                    }
                }
                committed.push((tag, subset.clone()));
            }
            (committed, refusals)
        }));
    }
    let mut expected: Vec<BTreeSet<String>> = vec![BTreeSet::new(); ts.len()];
    let (mut blocks, mut refusals) = (0, 0);
    for writer in writers {
        let (committed, refused) = writer.await.expect("a writer finished");
        refusals += refused;
        for (tag, subset) in committed {
            blocks += 1;
            for i in subset {
                expected[i].insert(tag.clone());
            }
        }
    }
    println!("{blocks} batches committed, {refusals} refusals on the way");
    for (i, t) in ts.iter().enumerate() {
        let history = history(a, store, t).await;
        // Versions 1.. before the run, then one per committed batch.
        let ran: Vec<String> = history
            .iter()
            .filter_map(|body| body.split(' ').nth(1).map(str::to_string))
            .filter(|tag| tag.starts_with('w'))
            .collect();
        let unique: BTreeSet<String> = ran.iter().cloned().collect();
        assert_eq!(unique.len(), ran.len(), "table {i}: a batch applied twice");
        assert_eq!(
            unique, expected[i],
            "table {i}: the committed batches, each once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_outcomes_on_local_directory() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FsStore::open_with_sync(dir.path(), false).expect("the local store opens");
    let warehouse = Warehouse::Local(store.root().to_path_buf());
    let faulty = Arc::new(Faulty {
        inner: Arc::new(store),
        plan: Mutex::new(Plan::default()),
    });
    outcomes(faulty, warehouse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_outcomes_on_s3() {
    let (store, warehouse) = common::s3_warehouse("outcome").await;
    let faulty = Arc::new(Faulty {
        inner: Arc::new(store),
        plan: Mutex::new(Plan::default()),
    });
    outcomes(faulty, warehouse).await;
}
