//! Who may do what, decided by the catalog: listings filtered child by child, what a caller
//! may not see answered as missing, what it sees but may not change refused with
//! PermissionDenied, and nothing changed by a refused request. On the memory store (the
//! rules do not depend on the store; the interop suites run them over real stores and
//! clients).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance_gateway::access::{Ctx, GrantSet, Grants, Principal};
use lance_gateway::catalog::layout::{Layout, Warehouse};
use lance_gateway::catalog::{Catalog, CreateMode, DropBehavior, DropMode, Settings};
use lance_gateway::error::{Code, Result};
use lance_gateway::store::memory::MemoryStore;

const GRANTS: &str = r#"
[[grant]]
principal = "alice"
id = ["ml"]
access = "write"

[[grant]]
principal = "bob"
id = ["ml", "a"]
access = "read"

[[grant]]
group = "analysts"
id = "ml$b"
access = "read"

[[grant]]
principal = "carol"
id = ["ops"]
access = "admin"

[[grant]]
principal = "*"
id = ["public"]
access = "read"
"#;

fn id(text: &str) -> Vec<String> {
    text.split('.').map(str::to_string).collect()
}

fn who(name: &str, groups: &[&str]) -> Ctx {
    Ctx::new(
        Principal {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            scheme: "api-key",
        },
        "test",
    )
}

async fn catalog() -> Catalog {
    let grants = Arc::new(Grants::from_set(GrantSet::parse(GRANTS).unwrap()));
    let cat = Catalog::open(
        Arc::new(MemoryStore::new()),
        Layout::new(Warehouse::S3Bucket {
            bucket: "mem".into(),
            prefix: "w/".into(),
        }),
        Arc::new(common::NoDatasets),
        Settings::new(Duration::from_secs(10), "authz-gw").with_grants(grants),
    )
    .await
    .unwrap();
    let admin = Ctx::internal();
    for ns in ["ml", "ops", "secret", "public"] {
        cat.create_namespace(&admin, &id(ns), CreateMode::Create, HashMap::new())
            .await
            .unwrap();
    }
    for t in ["ml.a", "ml.b", "ml.c", "ops.x", "secret.s", "public.p"] {
        cat.declare_table(&admin, &id(t), None, HashMap::new())
            .await
            .unwrap();
    }
    cat
}

async fn namespaces(cat: &Catalog, ctx: &Ctx) -> Vec<String> {
    cat.list_namespaces(ctx, &[], None, None)
        .await
        .unwrap()
        .items
}

async fn tables(cat: &Catalog, ctx: &Ctx, ns: &str) -> Result<Vec<String>> {
    Ok(cat.list_tables(ctx, &id(ns), None, None, true).await?.items)
}

fn code<T: std::fmt::Debug>(r: Result<T>) -> Code {
    r.expect_err("refused").code
}

#[tokio::test]
async fn listings_show_only_what_the_caller_may_see() {
    let cat = catalog().await;
    let (bob, dave, alice) = (
        who("bob", &[]),
        who("dave", &["analysts"]),
        who("alice", &[]),
    );
    let mallory = who("mallory", &[]);
    assert_eq!(namespaces(&cat, &bob).await, ["ml", "public"]);
    assert_eq!(namespaces(&cat, &alice).await, ["ml", "public"]);
    assert_eq!(namespaces(&cat, &mallory).await, ["public"]);
    assert_eq!(tables(&cat, &bob, "ml").await.unwrap(), ["a"]);
    assert_eq!(tables(&cat, &dave, "ml").await.unwrap(), ["b"]);
    assert_eq!(tables(&cat, &alice, "ml").await.unwrap(), ["a", "b", "c"]);
    assert_eq!(
        code(tables(&cat, &bob, "secret").await),
        Code::NamespaceNotFound
    );
    assert_eq!(
        code(tables(&cat, &mallory, "ml").await),
        Code::NamespaceNotFound
    );
    // `*` means anyone authenticated, never the anonymous caller.
    let anonymous = Ctx::new(Principal::anonymous("anonymous"), "test");
    assert!(namespaces(&cat, &anonymous).await.is_empty());
    let all: Vec<String> = cat
        .list_all_tables(&bob, "$", None, None, true)
        .await
        .unwrap()
        .items;
    assert_eq!(all, ["ml$a", "public$p"]);
}

#[tokio::test]
async fn hidden_objects_answer_as_missing_and_visible_ones_as_denied() {
    let cat = catalog().await;
    let (bob, alice, mallory) = (who("bob", &[]), who("alice", &[]), who("mallory", &[]));
    // bob reads ml.a, sees ml (to walk down to it), nothing else
    assert!(cat.describe_table(&bob, &id("ml.a")).await.is_ok());
    assert_eq!(
        code(cat.describe_table(&bob, &id("ml.c")).await),
        Code::TableNotFound
    );
    assert_eq!(
        code(cat.describe_table(&bob, &id("secret.s")).await),
        Code::NamespaceNotFound
    );
    assert_eq!(
        code(cat.describe_namespace(&bob, &id("secret")).await),
        Code::NamespaceNotFound
    );
    assert_eq!(
        code(cat.drop_table(&bob, &id("ml.a"), false).await),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            cat.declare_table(&bob, &id("ml.new"), None, HashMap::new())
                .await
        ),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            cat.declare_table(&mallory, &id("ml.new"), None, HashMap::new())
                .await
        ),
        Code::NamespaceNotFound
    );
    // alice writes in ml: declares, but removes nothing and drops no namespace
    assert!(
        cat.declare_table(&alice, &id("ml.d"), None, HashMap::new())
            .await
            .is_ok()
    );
    assert_eq!(
        code(cat.drop_table(&alice, &id("ml.a"), true).await),
        Code::PermissionDenied
    );
    assert_eq!(
        code(cat.rename_table(&alice, &id("ml.a"), &id("ml.e")).await),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            cat.drop_namespace(&alice, &id("ml"), DropMode::Fail, DropBehavior::Cascade)
                .await
        ),
        Code::PermissionDenied
    );
    assert_eq!(
        code(
            cat.create_namespace(&alice, &id("ml.sub"), CreateMode::Create, HashMap::new())
                .await
        ),
        Code::PermissionDenied
    );
    // nothing refused changed anything
    let admin = Ctx::internal();
    assert_eq!(
        tables(&cat, &admin, "ml").await.unwrap(),
        ["a", "b", "c", "d"]
    );
    assert!(cat.describe_namespace(&admin, &id("ml.sub")).await.is_err());
}

#[tokio::test]
async fn an_admin_of_a_namespace_drops_it_with_everything_in_it_and_nothing_else() {
    let cat = catalog().await;
    let carol = who("carol", &[]);
    assert_eq!(
        code(cat.drop_table(&carol, &id("ml.a"), false).await),
        Code::NamespaceNotFound
    );
    cat.drop_namespace(&carol, &id("ops"), DropMode::Fail, DropBehavior::Cascade)
        .await
        .unwrap();
    let admin = Ctx::internal();
    assert_eq!(namespaces(&cat, &admin).await, ["ml", "public", "secret"]);
    assert_eq!(
        code(
            cat.drop_namespace(&carol, &id("secret"), DropMode::Fail, DropBehavior::Cascade)
                .await
        ),
        Code::NamespaceNotFound
    );
    assert!(cat.describe_table(&admin, &id("secret.s")).await.is_ok());
}
