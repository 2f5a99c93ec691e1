//! Every route's success and error paths, through the real server on a loopback port.

mod common;

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, RecordBatchIterator};
use lance_gateway::config::{Config, CredentialPolicy, ServeArgs, Settings};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

struct Gateway {
    base: String,
    http: Client,
    _dir: Option<tempfile::TempDir>,
}

async fn start(settings: Settings, dir: Option<tempfile::TempDir>) -> Gateway {
    let config = Config::load(ServeArgs {
        config: None,
        settings,
    })
    .expect("valid config");
    let parts = lance_gateway::server::build_parts(&config, true)
        .await
        .expect("parts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { lance_gateway::server::serve(config, parts, listener).await });
    Gateway {
        base,
        http: Client::new(),
        _dir: dir,
    }
}

async fn local() -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let args = Settings {
        warehouse: Some(dir.path().join("wh").to_string_lossy().into_owned()),
        max_body_bytes: Some(4096),
        ..Default::default()
    };
    start(args, Some(dir)).await
}

impl Gateway {
    async fn call(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, String) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.text().await.unwrap())
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (s, t) = self.call(Method::POST, path, Some(&body.to_string())).await;
        (s, serde_json::from_str(&t).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (s, t) = self.call(Method::GET, path, None).await;
        (s, serde_json::from_str(&t).unwrap_or(Value::Null))
    }
}

/// Asserts the spec's error shape: status, code, an `error` message and the `instance`.
fn assert_error(status: StatusCode, body: &Value, want_status: u16, want_code: i64) {
    assert_eq!(status.as_u16(), want_status, "{body}");
    assert_eq!(body["code"].as_i64(), Some(want_code), "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    assert!(
        body["instance"]
            .as_str()
            .is_some_and(|i| i.starts_with('/')),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_routes() {
    let gw = local().await;
    let (s, b) = gw
        .post(
            "/v1/namespace/a/create",
            json!({"id": ["a"], "properties": {"k": "v"}}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["properties"]["k"], "v");
    let (s, b) = gw.post("/v1/namespace/a/create", json!({})).await;
    assert_error(s, &b, 409, 2);
    for mode in ["exist_ok", "ExistOk", "EXIST_OK", "existok"] {
        let (s, b) = gw
            .post("/v1/namespace/a/create", json!({"mode": mode}))
            .await;
        assert_eq!(s, 200, "{mode}: {b}");
        assert_eq!(b["properties"]["k"], "v");
    }
    let (s, b) = gw
        .post("/v1/namespace/a/create", json!({"mode": "sometimes"}))
        .await;
    assert_error(s, &b, 400, 13);
    let (s, _) = gw
        .post("/v1/namespace/a%24b/create", json!({"id": ["a", "b"]}))
        .await;
    assert_eq!(s, 200);
    let (s, b) = gw.post("/v1/namespace/zz%24b/create", json!(null)).await;
    assert_error(s, &b, 404, 1);
    // root: always exists, cannot be created or dropped
    let (s, b) = gw.post("/v1/namespace/%24/describe", json!({})).await;
    assert_eq!((s.as_u16(), b["properties"].clone()), (200, json!({})));
    let (s, b) = gw.post("/v1/namespace/%24/create", json!({})).await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw.post("/v1/namespace/%24/drop", json!({})).await;
    assert_error(s, &b, 400, 13);
    // list, direct children only
    let (s, b) = gw.get("/v1/namespace/%24/list?delimiter=%24").await;
    assert_eq!((s.as_u16(), b["namespaces"].clone()), (200, json!(["a"])));
    let (_, b) = gw.get("/v1/namespace/a/list").await;
    assert_eq!(b["namespaces"], json!(["b"]));
    let (s, b) = gw.get("/v1/namespace/nope/list").await;
    assert_error(s, &b, 404, 1);
    // a custom delimiter, and the `.` root that URL normalisation leaves behind
    let (_, b) = gw.get("/v1/namespace/a.b/list?delimiter=.").await;
    assert_eq!(b["namespaces"], json!([]));
    let (_, b) = gw.get("/v1/namespace/list?delimiter=.").await;
    assert_eq!(b["namespaces"], json!(["a"]));
    // exists: empty 200 or 404 code 1
    let (s, t) = gw
        .call(Method::POST, "/v1/namespace/a%24b/exists", None)
        .await;
    assert_eq!((s.as_u16(), t.as_str()), (200, ""));
    let (s, b) = gw.post("/v1/namespace/a%24x/exists", json!({})).await;
    assert_error(s, &b, 404, 1);
    // describe / body id mismatch
    let (s, b) = gw
        .post("/v1/namespace/a/describe", json!({"id": ["a"]}))
        .await;
    assert_eq!(
        (s.as_u16(), b["properties"]["k"].clone()),
        (200, json!("v"))
    );
    let (s, b) = gw
        .post("/v1/namespace/a/describe", json!({"id": ["b"]}))
        .await;
    assert_error(s, &b, 400, 13);
    // drop: restrict, skip, cascade
    let (s, b) = gw.post("/v1/namespace/a/drop", json!({})).await;
    assert_error(s, &b, 409, 3);
    let (s, b) = gw.post("/v1/namespace/missing/drop", json!({})).await;
    assert_error(s, &b, 404, 1);
    let (s, b) = gw
        .post("/v1/namespace/missing/drop", json!({"mode": "Skip"}))
        .await;
    assert_eq!((s.as_u16(), b), (200, json!({})));
    let (s, b) = gw
        .post("/v1/namespace/a/drop", json!({"behavior": "cascade"}))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = gw.post("/v1/namespace/a/exists", json!({})).await;
    assert_error(s, &b, 404, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_routes() {
    let gw = local().await;
    gw.post("/v1/namespace/ns/create", json!({})).await;
    // declare: server-chosen location, then 409 code 5
    let (s, b) = gw
        .post(
            "/v1/table/ns%24t1/declare",
            json!({"id": ["ns", "t1"], "properties": {"p": "1"}}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let location = b["location"].as_str().unwrap().to_string();
    assert!(
        location.starts_with("file:///") && location.ends_with("/ns/t1.lance"),
        "{location}"
    );
    assert_eq!(b["storage_options"], json!({}));
    assert_eq!(b["managed_versioning"], json!(false));
    let (s, b) = gw.post("/v1/table/ns%24t1/declare", json!({})).await;
    assert_error(s, &b, 409, 5);
    let (s, b) = gw.post("/v1/table/nowhere%24t/declare", json!({})).await;
    assert_error(s, &b, 404, 1);
    let (s, b) = gw
        .post(
            "/v1/table/ns%24bad/declare",
            json!({"location": "/etc/passwd"}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw
        .post(
            "/v1/table/ns%24bad/declare",
            json!({"location": format!("{location}/../../x")}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    // describe: flags from query or body
    let (s, b) = gw
        .post("/v1/table/ns%24t1/describe", json!({"id": ["ns", "t1"]}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(b["location"], json!(location));
    assert_eq!(b["properties"]["p"], "1");
    assert!(b.get("table_uri").is_none() && b.get("is_only_declared").is_none());
    let (_, b) = gw
        .post(
            "/v1/table/ns%24t1/describe?with_table_uri=true&check_declared=true",
            json!({}),
        )
        .await;
    assert_eq!(b["table_uri"], json!(location));
    assert_eq!(b["is_only_declared"], json!(true));
    let (_, b) = gw
        .post(
            "/v1/table/ns%24t1/describe",
            json!({"check_declared": true, "with_table_uri": true}),
        )
        .await;
    assert_eq!(b["is_only_declared"], json!(true));
    assert_eq!(b["table_uri"], json!(location));
    let (_, b) = gw
        .post(
            "/v1/table/ns%24t1/describe?check_declared=false",
            json!({"check_declared": true}),
        )
        .await;
    assert!(
        b.get("is_only_declared").is_none(),
        "the query wins over the body: {b}"
    );
    let (s, b) = gw.post("/v1/table/ns%24nope/describe", json!({})).await;
    assert_error(s, &b, 404, 4);
    let (s, b) = gw
        .post("/v1/table/ns%24t1/describe?with_table_uri=maybe", json!({}))
        .await;
    assert_error(s, &b, 400, 13);
    // write a real dataset at the location, then ask for detailed metadata
    write_dataset(&location, 3).await;
    let (s, b) = gw
        .post(
            "/v1/table/ns%24t1/describe?load_detailed_metadata=true",
            json!({}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["version"], json!(1));
    assert_eq!(b["is_only_declared"], json!(false));
    assert_eq!(b["schema"]["fields"][0]["name"], json!("id"));
    assert_eq!(b["stats"]["num_fragments"], json!(1));
    // exists
    let (s, t) = gw
        .call(Method::POST, "/v1/table/ns%24t1/exists", Some("{}"))
        .await;
    assert_eq!((s.as_u16(), t.as_str()), (200, ""));
    let (s, b) = gw.post("/v1/table/ns%24zz/exists", json!({})).await;
    assert_error(s, &b, 404, 4);
    // list, include_declared, list-all
    gw.post("/v1/table/ns%24t2/declare", json!({})).await;
    let (_, b) = gw.get("/v1/namespace/ns/table/list").await;
    assert_eq!(b["tables"], json!(["t1", "t2"]));
    let (_, b) = gw
        .get("/v1/namespace/ns/table/list?include_declared=false")
        .await;
    assert_eq!(b["tables"], json!(["t1"]));
    let (_, b) = gw.get("/v1/namespace/ns/table/list?limit=1").await;
    assert_eq!(
        (b["tables"].clone(), b["page_token"].clone()),
        (json!(["t1"]), json!("t1"))
    );
    let (_, b) = gw
        .get("/v1/namespace/ns/table/list?limit=1&page_token=t1")
        .await;
    assert_eq!(b["tables"], json!(["t2"]));
    assert!(b.get("page_token").is_none());
    let (_, b) = gw.get("/v1/table?delimiter=.").await;
    assert_eq!(b["tables"], json!(["ns.t1", "ns.t2"]));
    let (s, b) = gw.get("/v1/namespace/ns/table/list?limit=x").await;
    assert_error(s, &b, 400, 13);
    // register: adopt the dataset under a second name? refused, it overlaps t1; a folder without a dataset is refused
    let (s, b) = gw
        .post(
            "/v1/table/ns%24copy/register",
            json!({"location": location}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw
        .post(
            "/v1/table/ns%24r/register",
            json!({"location": "ns/empty.lance"}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw.post("/v1/table/ns%24r/register", json!({})).await;
    assert_error(s, &b, 400, 13);
    // deregister keeps the data, register adopts it back
    let (s, b) = gw.post("/v1/table/ns%24t1/deregister", json!({})).await;
    assert_eq!((s.as_u16(), b["location"].clone()), (200, json!(location)));
    let (s, b) = gw
        .post(
            "/v1/table/ns%24back/register",
            json!({"location": location}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = gw
        .post(
            "/v1/table/ns%24back/describe?load_detailed_metadata=true",
            json!({}),
        )
        .await;
    assert_eq!(b["version"], json!(1));
    // rename within and across namespaces
    let (s, b) = gw
        .post(
            "/v1/table/ns%24back/rename",
            json!({"new_table_name": "moved"}),
        )
        .await;
    assert_eq!((s.as_u16(), b), (200, json!({})));
    gw.post("/v1/namespace/other/create", json!({})).await;
    let (s, _) = gw
        .post(
            "/v1/table/ns%24moved/rename",
            json!({"new_table_name": "far", "new_namespace_id": ["other"]}),
        )
        .await;
    assert_eq!(s, 200);
    let (_, b) = gw.post("/v1/table/other%24far/describe", json!({})).await;
    assert_eq!(b["location"], json!(location), "the location does not move");
    let (s, b) = gw.post("/v1/table/other%24far/rename", json!({})).await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw
        .post(
            "/v1/table/other%24far/rename",
            json!({"new_table_name": "t2"}),
        )
        .await;
    assert_eq!(s.as_u16(), 200, "{b}");
    let (s, b) = gw
        .post(
            "/v1/table/other%24t2/rename",
            json!({"new_table_name": "t2", "new_namespace_id": ["ns"]}),
        )
        .await;
    assert_error(s, &b, 409, 5);
    // drop keeps the table for undrop (the default retention, 7 days): gone for clients,
    // listed among the dropped tables with its data still there
    let (s, t) = gw
        .call(Method::POST, "/v1/table/other%24t2/drop", None)
        .await;
    assert_eq!(s, 200, "{t}");
    let path = location.strip_prefix("file://").unwrap();
    assert!(
        std::path::Path::new(path).exists(),
        "a dropped table's data is kept"
    );
    let (s, b) = gw.post("/v1/table/other%24t2/describe", json!({})).await;
    assert_error(s, &b, 404, 4);
    let (s, t) = gw
        .call(Method::GET, "/v1/namespace/other/dropped_tables", None)
        .await;
    assert_eq!(s, 200, "{t}");
    let listed: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        listed["dropped"][0]["id"],
        json!(["other", "t2"]),
        "{listed}"
    );
    assert_eq!(
        listed["dropped"][0]["location"],
        json!(location),
        "{listed}"
    );
    // a purge of someone else's name is 404 code 4; of this one, deletes the data (then,
    // or just after its answer)
    let (s, b) = gw.post("/v1/table/other%24nope/purge", json!({})).await;
    assert_error(s, &b, 404, 4);
    let (s, b) = gw
        .post(
            "/v1/table/other%24t2/purge",
            json!({"drop_id": "not a drop id"}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw.post("/v1/table/other%24t2/purge", json!({})).await;
    assert_eq!(s.as_u16(), 200, "{b}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(path).exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        !std::path::Path::new(path).exists(),
        "data of a purged table is deleted"
    );
    let (s, b) = gw
        .post("/v1/table/other%24t2/drop", json!({"id": ["other", "t2"]}))
        .await;
    assert_error(s, &b, 404, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_quirks_and_errors() {
    let gw = local().await;
    // `+` is a space, names with odd characters round-trip
    let (s, _) = gw
        .post("/v1/namespace/sp+ace/create", json!({"id": ["sp ace"]}))
        .await;
    assert_eq!(s, 200);
    let (_, b) = gw.get("/v1/namespace/%24/list").await;
    assert_eq!(b["namespaces"], json!(["sp ace"]));
    let (s, b) = gw
        .post(
            "/v1/table/sp+ace%24t%2B1.x/declare",
            json!({"id": ["sp ace", "t+1.x"]}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, b) = gw.get("/v1/namespace/sp+ace/table/list").await;
    assert_eq!(b["tables"], json!(["t+1.x"]));
    // empty name parts are refused
    let (s, b) = gw.post("/v1/namespace/a%24%24b/create", json!({})).await;
    assert_error(s, &b, 400, 13);
    // bodies: absent, null, {}, malformed, wrong types, too large
    let (s, _) = gw.call(Method::POST, "/v1/namespace/n1/create", None).await;
    assert_eq!(s, 200);
    let (s, _) = gw
        .call(Method::POST, "/v1/namespace/n2/create", Some("null"))
        .await;
    assert_eq!(s, 200);
    let (s, t) = gw
        .call(Method::POST, "/v1/namespace/n3/create", Some("{not json"))
        .await;
    assert_error(s, &serde_json::from_str(&t).unwrap(), 400, 13);
    let (s, b) = gw
        .post("/v1/namespace/n3/create", json!({"properties": {"k": 1}}))
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw
        .post(
            "/v1/namespace/n3/create",
            json!({"properties": {"k": "x".repeat(5000)}}),
        )
        .await;
    assert_error(s, &b, 400, 13);
    let (s, b) = gw.post("/v1/namespace/n3/exists", json!({})).await;
    assert_error(s, &b, 404, 1);
    // unsupported spec routes, unknown routes and wrong methods: JSON, code 0
    for (method, path) in [
        (Method::POST, "/v1/table/n1%24t/backfill_column"),
        (Method::POST, "/v1/table/n1%24t/refresh"),
        (Method::POST, "/v1/materialized_view/mv/refresh"),
        (Method::GET, "/v1/nothing/here"),
        (Method::GET, "/v1/namespace/n1/create"),
        (Method::DELETE, "/v1/table"),
    ] {
        let (s, t) = gw.call(method.clone(), path, None).await;
        let b: Value =
            serde_json::from_str(&t).unwrap_or_else(|_| panic!("{method} {path}: not JSON: {t}"));
        assert_error(s, &b, 406, 0);
    }
    // a transaction the gateway never started
    let (s, b) = gw.post("/v1/transaction/x/describe", json!({})).await;
    assert_error(s, &b, 404, 10);
    // trailing and doubled slashes are normalised
    let (s, _) = gw.get("//v1/namespace/%24/list/").await;
    assert_eq!(s, 200);
    // health, readiness, request ids
    let resp = gw
        .http
        .get(format!("{}/healthz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("x-request-id"));
    let (s, b) = gw.get("/readyz").await;
    assert_eq!((s.as_u16(), b["status"].clone()), (200, json!("ready")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_warehouse_vends_complete_storage_options() {
    let env = common::s3_env();
    let client = common::s3_client(&env).await;
    let bucket = common::fresh_bucket(&client, "api").await;
    let args = Settings {
        warehouse: Some(format!("s3://{bucket}/wh")),
        s3_endpoint: Some(env.endpoint.clone()),
        s3_region: Some("us-east-1".into()),
        s3_access_key_id: Some(env.access_key.clone()),
        s3_secret_access_key: Some(env.secret_key.parse().unwrap()),
        credentials: Some(CredentialPolicy::Static),
        client_access_key_id: Some("client-key".into()),
        client_secret_access_key: Some("client-secret".parse().unwrap()),
        ..Default::default()
    };
    let gw = start(args, None).await;
    gw.post("/v1/namespace/ml/create", json!({})).await;
    let (s, b) = gw.post("/v1/table/ml%24t/declare", json!({})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["location"], json!(format!("s3://{bucket}/wh/ml/t.lance")));
    let opts = &b["storage_options"];
    assert_eq!(
        opts["aws_endpoint"],
        json!(env.endpoint.trim_end_matches('/'))
    );
    assert_eq!(opts["allow_http"], json!("true"));
    assert_eq!(opts["aws_region"], json!("us-east-1"));
    assert_eq!(
        opts["aws_access_key_id"],
        json!("client-key"),
        "static policy vends the client keys, not the gateway's"
    );
    let (_, b) = gw
        .post(
            "/v1/table/ml%24t/describe",
            json!({"vend_credentials": false}),
        )
        .await;
    assert!(b["storage_options"].get("aws_access_key_id").is_none());
    assert_eq!(
        b["storage_options"]["aws_endpoint"],
        json!(env.endpoint.trim_end_matches('/'))
    );
    let (s, b) = gw.get("/readyz").await;
    assert_eq!(s, 200, "{b}");
    // The catalog lives in the bucket, under the prefix. Listed again for up to 5 s: once,
    // in a full run just after SeaweedFS started, its listing of a fresh bucket came back
    // empty right after the write (the record itself was read by the describe above).
    let mut found = 0;
    for _ in 0..50 {
        let listed = client
            .list_objects_v2()
            .bucket(&bucket)
            .prefix("wh/.lance-gateway/tables/")
            .send()
            .await
            .expect("SeaweedFS lists the bucket");
        found = listed.contents().len();
        if found == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(found, 1, "the table's record under the warehouse's prefix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_names_the_setting() {
    let err = Config::load(ServeArgs {
        config: None,
        settings: Settings {
            warehouse: Some("ftp://x".into()),
            ..Default::default()
        },
    })
    .unwrap_err();
    assert_eq!(err.setting, "warehouse");
    assert!(err.to_string().starts_with("invalid setting `warehouse`"));
}

async fn write_dataset(location: &str, rows: i64) {
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "id",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from_iter_values(0..rows))],
    )
    .unwrap();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    lance::Dataset::write(reader, location, None).await.unwrap();
}

/// Every field the spec or a client defines for an operation that its route does not act on
/// is refused by name (400, code 13) rather than silently ignored, and the refusal changes
/// nothing (it comes before the table is even looked up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_a_route_does_not_serve_are_refused_by_name() {
    use lance_gateway::api::data::{indices, reads, rows};
    use lance_gateway::api::fields::{Fields, Request};
    use lance_namespace::models::CreateTableVersionRequest;

    enum Place {
        Body,
        Query,
    }
    let routes: [(&str, Place, &Fields); 6] = [
        (
            "/v1/table/t/create",
            Place::Query,
            <rows::CreateQuery as Request>::FIELDS,
        ),
        (
            "/v1/table/t/update",
            Place::Body,
            <rows::UpdateBody as Request>::FIELDS,
        ),
        (
            "/v1/table/t/query",
            Place::Body,
            <lance_gateway::data::read::Query as Request>::FIELDS,
        ),
        (
            "/v1/table/t/analyze_plan",
            Place::Body,
            <reads::AnalyzeBody as Request>::FIELDS,
        ),
        (
            "/v1/table/t/create_scalar_index",
            Place::Body,
            <indices::ScalarIndexBody as Request>::FIELDS,
        ),
        (
            "/v1/table/t/version/create",
            Place::Body,
            <CreateTableVersionRequest as Request>::FIELDS,
        ),
    ];
    let gw = local().await;
    let mut refused = 0;
    for (path, place, fields) in routes {
        assert!(!fields.refused.is_empty(), "{path}");
        for (field, _) in fields.refused {
            let (s, b) = match place {
                Place::Body => gw.post(path, json!({ *field: true })).await,
                Place::Query => {
                    let (s, t) = gw
                        .call(Method::POST, &format!("{path}?{field}=1"), Some(""))
                        .await;
                    (s, serde_json::from_str(&t).unwrap_or(Value::Null))
                }
            };
            assert_error(s, &b, 400, 13);
            let message = b["error"].as_str().unwrap_or_default();
            assert!(
                message.contains(&format!("`{field}`")),
                "{path}: the refusal of `{field}` does not name it: {b}"
            );
            refused += 1;
        }
    }
    assert!(refused >= 14, "{refused}");
    // A value that asks for nothing is no request: the route goes on (to the missing table).
    let (s, b) = gw
        .post(
            "/v1/table/t/query",
            json!({"use_lsm": false, "approx_mode": null}),
        )
        .await;
    assert_error(s, &b, 404, 4);
    // A field nobody defines is tolerated, as the spec asks.
    let (s, b) = gw
        .post("/v1/table/t/describe", json!({"brand_new_field": 1}))
        .await;
    assert_error(s, &b, 404, 4);
    // Nothing was made on the way.
    let (_, b) = gw.get("/v1/namespace/%24/table/list").await;
    assert_eq!(b["tables"], json!([]));
}

/// DuckDB's Lance extension names `ml$docs` in the body as one part holding the delimiter:
/// the same table as the path's `["ml", "docs"]`. Any other disagreement is still a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_ids_spelled_with_the_delimiter_name_the_path_table() {
    let gw = local().await;
    let (s, _) = gw.post("/v1/namespace/ml/create", json!({})).await;
    assert_eq!(s, 200);
    let (s, b) = gw
        .post("/v1/table/ml%24docs/declare", json!({"id": ["ml$docs"]}))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = gw
        .post("/v1/table/ml%24docs/describe", json!({"id": ["ml$docs"]}))
        .await;
    assert_eq!(
        (s.as_u16(), b["table"].clone()),
        (200, json!("docs")),
        "{b}"
    );
    let (_, b) = gw.get("/v1/namespace/ml/table/list").await;
    assert_eq!(b["tables"], json!(["docs"]));
    let (_, b) = gw.get("/v1/namespace/%24/table/list").await;
    assert_eq!(b["tables"], json!([]), "nothing landed in the root");
    for other in [
        json!(["docs"]),
        json!(["ml", "other"]),
        json!(["ml$other"]),
        json!(["ml", "docs", "x"]),
    ] {
        let (s, b) = gw
            .post("/v1/table/ml%24docs/describe", json!({ "id": other }))
            .await;
        assert_error(s, &b, 400, 13);
    }
}
