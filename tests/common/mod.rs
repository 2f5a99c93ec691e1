//! Shared test plumbing: the real S3 server the suites run against, and an HTTP harness
//! around the router.
#![allow(dead_code)]

use std::sync::Arc;

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};

/// The S3-compatible server the test run started (SeaweedFS on loopback, see
/// `scripts/test-all`). The S3 suites fail, not skip, when it is missing.
pub struct S3Env {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
}

pub fn s3_env() -> S3Env {
    let endpoint = std::env::var("LANCE_GATEWAY_TEST_S3_ENDPOINT").unwrap_or_else(|_| {
        panic!("LANCE_GATEWAY_TEST_S3_ENDPOINT is not set: run the suites through scripts/test-all, which starts SeaweedFS")
    });
    S3Env {
        endpoint,
        access_key: std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "lgtest".into()),
        secret_key: std::env::var("AWS_SECRET_ACCESS_KEY")
            .unwrap_or_else(|_| "lgtestsecret".into()),
    }
}

pub async fn s3_client(env: &S3Env) -> aws_sdk_s3::Client {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(&env.endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            &env.access_key,
            &env.secret_key,
            None,
            None,
            "test",
        ))
        .load()
        .await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk)
        .force_path_style(true)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// The S3 store as the gateway builds it: the SDK client, and single-object reads through
/// `object_store` to the same server with the same keys.
pub fn s3_store(
    env: &S3Env,
    client: aws_sdk_s3::Client,
    root: lance_gateway::store::s3::S3Root,
) -> lance_gateway::store::s3::S3Store {
    lance_gateway::store::s3::S3Store::new(client, root).reading_through(
        lance_gateway::store::s3_reads::S3Access {
            endpoint: Some(env.endpoint.clone()),
            region: "us-east-1".into(),
            path_style: true,
            credentials: Some(
                aws_credential_types::provider::SharedCredentialsProvider::new(Credentials::new(
                    &env.access_key,
                    &env.secret_key,
                    None,
                    None,
                    "test",
                )),
            ),
        },
    )
}

/// A fresh bucket for one test.
pub async fn fresh_bucket(client: &aws_sdk_s3::Client, tag: &str) -> String {
    let name = format!(
        "lg-{tag}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    client
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("create test bucket");
    name
}

pub fn unique(tag: &str) -> String {
    format!("{tag}{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

pub type DynStore = Arc<dyn lance_gateway::store::Store>;

/// A dataset reader for suites that test catalog rules: they never read datasets
/// (describing one is the data plane's job).
pub struct NoDatasets;

#[async_trait::async_trait]
impl lance_gateway::catalog::DatasetReader for NoDatasets {
    async fn describe(
        &self,
        _location: &str,
    ) -> lance_gateway::error::Result<lance_gateway::catalog::DatasetDetails> {
        Ok(lance_gateway::catalog::DatasetDetails::default())
    }
}

/// A catalog over `store` as gateway `node`, settling others' unfinished operations after
/// `grace`, with no datasets to read. A drop deletes at once (a drop retention of zero):
/// the suites of the rules that predate soft drops check the deletion itself;
/// `open_catalog_keeping_drops` keeps them.
pub async fn open_catalog(
    store: DynStore,
    warehouse: lance_gateway::catalog::layout::Warehouse,
    grace: std::time::Duration,
    node: &str,
) -> Arc<lance_gateway::catalog::Catalog> {
    open_catalog_keeping_drops(store, warehouse, grace, node, std::time::Duration::ZERO).await
}

/// `open_catalog` with dropped tables kept for `retention`.
pub async fn open_catalog_keeping_drops(
    store: DynStore,
    warehouse: lance_gateway::catalog::layout::Warehouse,
    grace: std::time::Duration,
    node: &str,
    retention: std::time::Duration,
) -> Arc<lance_gateway::catalog::Catalog> {
    let policy = lance_gateway::catalog::policy::Policy {
        drop_retention: retention,
        ..Default::default()
    };
    Arc::new(
        lance_gateway::catalog::Catalog::open(
            store,
            lance_gateway::catalog::layout::Layout::new(warehouse),
            Arc::new(NoDatasets),
            lance_gateway::catalog::Settings::new(grace, node).with_maintenance(policy),
        )
        .await
        .expect("the catalog opens"),
    )
}

/// The final manifest of `version` of table `t` (V2 names).
pub fn final_key(t: &lance_gateway::catalog::records::TableRecord, version: u64) -> String {
    format!(
        "{}/_versions/{}",
        t.data_key,
        lance_gateway::catalog::versions::NamingScheme::V2.file_name(version)
    )
}

/// Stages `body` as version `version` of `t`, as a Lance client would; answers the
/// CreateTableVersion request that commits it.
pub async fn stage(
    cat: &lance_gateway::catalog::Catalog,
    store: &DynStore,
    t: &lance_gateway::catalog::records::TableRecord,
    version: u64,
    body: &str,
) -> lance_gateway::catalog::versions::NewVersion {
    let key = format!("{}-{}", final_key(t, version), unique("s"));
    store
        .put(
            &key,
            bytes::Bytes::from(body.to_string()),
            lance_gateway::store::Condition::None,
        )
        .await
        .unwrap_or_else(|e| panic!("staging {key}: {e}"));
    lance_gateway::catalog::versions::NewVersion {
        version: version as i64,
        manifest_path: cat.layout().store_path_of(&key),
        manifest_size: Some(body.len() as i64),
        e_tag: None,
        naming_scheme: Some("V2".into()),
        branch: None,
    }
}

/// A warehouse in a fresh bucket of the test run's S3 server, and the store over it.
pub async fn s3_warehouse(
    tag: &str,
) -> (
    lance_gateway::store::s3::S3Store,
    lance_gateway::catalog::layout::Warehouse,
) {
    let env = s3_env();
    let client = s3_client(&env).await;
    let bucket = fresh_bucket(&client, tag).await;
    let root = lance_gateway::store::s3::S3Root::Bucket {
        bucket: bucket.clone(),
        prefix: String::new(),
    };
    let warehouse = lance_gateway::catalog::layout::Warehouse::S3Bucket {
        bucket,
        prefix: String::new(),
    };
    (s3_store(&env, client, root), warehouse)
}

/// The cloud storage emulators the test run started (fake-gcs-server and Azurite, see
/// `scripts/test-all`), and the bucket and container made for the Rust suites there. The
/// GCS and Azure suites fail, not skip, when they are missing.
pub struct CloudEnv {
    pub gcs_endpoint: String,
    pub azure_endpoint: String,
    pub azure_account: String,
    pub azure_key: String,
    pub bucket: String,
}

pub fn cloud_env() -> CloudEnv {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run the suites through scripts/test-all, which starts the emulators")
        })
    };
    CloudEnv {
        gcs_endpoint: var("LANCE_GATEWAY_TEST_GCS_ENDPOINT"),
        azure_endpoint: var("LANCE_GATEWAY_TEST_AZURE_ENDPOINT"),
        azure_account: var("LANCE_GATEWAY_TEST_AZURE_ACCOUNT"),
        azure_key: var("LANCE_GATEWAY_TEST_AZURE_KEY"),
        bucket: var("LANCE_GATEWAY_TEST_CLOUD_BUCKET"),
    }
}

/// A GCS store on fake-gcs-server, as the gateway builds it for an emulator (unsigned),
/// under a prefix of its own; and the warehouse it is.
pub fn gcs_store(
    tag: &str,
) -> (
    lance_gateway::store::gcs::GcsStore,
    lance_gateway::catalog::layout::Warehouse,
) {
    let env = cloud_env();
    let prefix = format!("{}/", unique(tag));
    let store = lance_gateway::store::gcs::GcsStore::new(
        &env.gcs_endpoint,
        &env.bucket,
        &prefix,
        lance_gateway::store::gcs::GcsAuth::Anonymous,
    )
    .unwrap();
    let warehouse = lance_gateway::catalog::layout::Warehouse::Cloud {
        scheme: "gs",
        bucket: env.bucket,
        prefix,
    };
    (store, warehouse)
}

/// An Azure store on Azurite, signed with the development account's key, under a prefix of
/// its own; and the warehouse it is.
pub fn azure_store(
    tag: &str,
) -> (
    lance_gateway::store::azure::AzureStore,
    lance_gateway::catalog::layout::Warehouse,
) {
    let env = cloud_env();
    let prefix = format!("{}/", unique(tag));
    let store = lance_gateway::store::azure::AzureStore::connect(
        &env.azure_account,
        Some(&env.azure_key),
        Some(&env.azure_endpoint),
        &env.bucket,
        &prefix,
    )
    .unwrap();
    let warehouse = lance_gateway::catalog::layout::Warehouse::Cloud {
        scheme: "az",
        bucket: env.bucket,
        prefix,
    };
    (store, warehouse)
}
