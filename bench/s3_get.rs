//! CPU per GetObject of a small object, for the two S3 clients in the binary: the AWS SDK
//! (aws-sdk-s3) and Apache Arrow's object_store (which Lance reads and writes data with).
//! The catalog's hot path is one GET per describe, so its client's cost per request is what a
//! describe on S3 pays beside the store's own work.
//!
//! `bench/run s3_get` runs it against the pinned SeaweedFS; by hand:
//!   AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… \
//!   cargo run --release --example s3_get -- http://127.0.0.1:8333 BUCKET [N]

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// CPU seconds (user + system) this process has used so far.
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn report(name: &str, n: usize, wall: f64, cpu: f64) {
    println!(
        "{name:<14} {n} GETs: {:>7.0} µs CPU each, {:>7.0} µs wall each",
        cpu / n as f64 * 1e6,
        wall / n as f64 * 1e6
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (endpoint, bucket) = (args[1].clone(), args[2].clone());
    let n: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(3000);
    let id = std::env::var("AWS_ACCESS_KEY_ID").expect("AWS_ACCESS_KEY_ID");
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").expect("AWS_SECRET_ACCESS_KEY");
    let key = "s3-get-bench/record.json";
    let body = vec![b'x'; 600];

    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(&id, &secret, None, None, "bench"))
        .force_path_style(true)
        .build();
    let sdk = aws_sdk_s3::Client::from_conf(conf);
    let _ = sdk.create_bucket().bucket(&bucket).send().await;
    sdk.put_object()
        .bucket(&bucket)
        .key(key)
        .body(body.into())
        .send()
        .await
        .expect("put");

    let os: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_bucket_name(&bucket)
            .with_region("us-east-1")
            .with_access_key_id(&id)
            .with_secret_access_key(&secret)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()
            .expect("object_store"),
    );
    let path = Path::from(key);
    for round in 0..2 {
        let (t, c) = (Instant::now(), cpu());
        for _ in 0..n {
            let out = sdk
                .get_object()
                .bucket(&bucket)
                .key(key)
                .send()
                .await
                .expect("sdk get");
            let _ = out.e_tag().map(str::len);
            out.body.collect().await.expect("sdk body");
        }
        if round == 1 {
            report("aws-sdk-s3", n, t.elapsed().as_secs_f64(), cpu() - c);
        }
        let (t, c) = (Instant::now(), cpu());
        for _ in 0..n {
            let out = os.get(&path).await.expect("object_store get");
            let _ = out.meta.e_tag.as_ref().map(String::len);
            out.bytes().await.expect("object_store body");
        }
        if round == 1 {
            report("object_store", n, t.elapsed().as_secs_f64(), cpu() - c);
        }
    }
}
