//! Table-scoped credentials from STS. For each (principal, table, access) the gateway
//! assumes its configured role with an inline session policy that allows only that table's
//! own folder: reading and listing it, and for write access putting, deleting and the
//! multipart actions. STS intersects it with the role's own policy, so the role should be
//! limited to the warehouse already (a forgotten session policy then cannot widen past it).
//!
//! A policy names its folder in IAM resource patterns, where `*`, `?` and `${...}` mean
//! something: a folder holding any of them, `..`, or nothing below its bucket is refused
//! rather than written into a policy. Listing is allowed under `<folder>/*` only, never the
//! bare prefix (which would match a sibling such as `t1.lancex/`). SeaweedFS matches
//! resource patterns without regard to case; the catalog claims folders by their lower-case
//! names, so no two tables' folders differ only in case.
//!
//! Credentials are cached per (principal, folder, access) and renewed once less than half
//! the lifetime STS gave them is left (it may give less than asked for); concurrent
//! requests for one key wait for one AssumeRole.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sts::Client;

use crate::error::{Error, Result};

/// Credentials as vended.
#[derive(Clone, Debug)]
pub struct Issued {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expires_at_ms: u64,
    /// When they were obtained: STS may grant less time than asked for.
    pub issued_at_ms: u64,
}

type Key = (String, String, bool);

pub struct Sts {
    client: Client,
    role_arn: String,
    duration: Duration,
    /// Whether write credentials stop short of final manifest names (`session_policy`).
    gate: bool,
    cache: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Option<Issued>>>>>,
}

/// The bucket and key prefix of an `s3://bucket/key` location.
pub fn bucket_and_prefix(location: &str) -> Result<(String, String)> {
    let rest = location
        .strip_prefix("s3://")
        .ok_or_else(|| Error::invalid(format!("'{location}' is not an S3 location")))?;
    let (bucket, key) = rest
        .split_once('/')
        .ok_or_else(|| Error::invalid(format!("'{location}' names only a bucket")))?;
    let key = key.trim_end_matches('/');
    Ok((bucket.to_string(), key.to_string()))
}

/// The session policy for one table's folder, or why none may be written for it. With
/// `gate` (managed versioning), write access stops short of the final manifest names
/// (`*.manifest` anywhere in the folder: `_versions/` of main and of every branch): a client
/// writes data files and staged manifests (`<final name>-<id>`), and only the catalog, with
/// its own keys, publishes a version, so no client can commit behind its back.
pub fn session_policy(bucket: &str, prefix: &str, write: bool, gate: bool) -> Result<String> {
    let refuse = |why: &str| {
        Error::invalid(format!(
            "credentials cannot be scoped to 's3://{bucket}/{prefix}': {why}"
        ))
    };
    if bucket.is_empty() || prefix.is_empty() {
        return Err(refuse("it is a bucket root"));
    }
    let bad = |c: char| matches!(c, '*' | '?' | '$' | '"' | '\\') || c.is_control();
    if bucket.chars().any(bad) || prefix.chars().any(bad) {
        return Err(refuse(
            "its name holds a character IAM policies give a meaning to",
        ));
    }
    if prefix
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(refuse("it has an empty, '.' or '..' segment"));
    }
    let mut object_actions = vec!["s3:GetObject"];
    if write {
        object_actions.extend([
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ]);
    }
    let mut statements = vec![
        serde_json::json!({
            "Sid": "TableObjects",
            "Effect": "Allow",
            "Action": object_actions,
            "Resource": [format!("arn:aws:s3:::{bucket}/{prefix}/*")],
        }),
        serde_json::json!({
            "Sid": "TableListing",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{bucket}")],
            "Condition": {"StringLike": {"s3:prefix": [format!("{prefix}/*")]}},
        }),
    ];
    if write && gate {
        statements.push(serde_json::json!({
            "Sid": "CatalogPublishesVersions",
            "Effect": "Deny",
            "Action": ["s3:PutObject", "s3:DeleteObject"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{prefix}/*.manifest")],
        }));
    }
    let policy = serde_json::json!({"Version": "2012-10-17", "Statement": statements});
    Ok(policy.to_string())
}

/// A session name STS accepts (2 to 64 of `[\w+=,.@-]`) that shows who it was for.
fn session_name(principal: &str) -> String {
    let clean: String = principal
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    format!("lg-{clean}")
}

impl Sts {
    pub fn new(client: Client, role_arn: String, duration: Duration) -> Self {
        Sts {
            client,
            role_arn,
            duration,
            gate: false,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Under managed versioning: write credentials may not write final manifest names.
    pub fn with_commit_gate(mut self, gate: bool) -> Self {
        self.gate = gate;
        self
    }

    /// Whether credentials still have more than half of the lifetime they were given.
    fn fresh(&self, issued: &Issued) -> bool {
        let left = issued
            .expires_at_ms
            .saturating_sub(crate::catalog::records::now_ms());
        left > issued.expires_at_ms.saturating_sub(issued.issued_at_ms) / 2
    }

    /// Credentials for `principal` to read (or, with `write`, also write) the folder at
    /// `location`.
    pub async fn credentials(
        &self,
        principal: &str,
        location: &str,
        write: bool,
    ) -> Result<Issued> {
        let (bucket, prefix) = bucket_and_prefix(location)?;
        let policy = session_policy(&bucket, &prefix, write, self.gate)?;
        let slot = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() > 10_000 {
                // Forget expired entries rather than grow without bound.
                let now = crate::catalog::records::now_ms();
                cache.retain(|_, v| {
                    v.try_lock()
                        .map(|g| g.as_ref().is_some_and(|i| i.expires_at_ms > now))
                        .unwrap_or(true)
                });
            }
            cache
                .entry((principal.to_string(), location.to_string(), write))
                .or_default()
                .clone()
        };
        let mut held = slot.lock().await;
        if let Some(issued) = held.as_ref()
            && self.fresh(issued)
        {
            return Ok(issued.clone());
        }
        let issued_at_ms = crate::catalog::records::now_ms();
        let out = self
            .client
            .assume_role()
            .role_arn(&self.role_arn)
            .role_session_name(session_name(principal))
            .policy(policy)
            .duration_seconds(self.duration.as_secs() as i32)
            .send()
            .await
            .inspect(|_| crate::telemetry::sts_call(true))
            .inspect_err(|_| crate::telemetry::sts_call(false))
            .map_err(|e| {
                Error::unavailable("could not obtain credentials for the table")
                    .with_detail(aws_sdk_sts::error::DisplayErrorContext(&e).to_string())
            })?;
        let creds = out.credentials().ok_or_else(|| {
            Error::unavailable("could not obtain credentials for the table")
                .with_detail("STS answered AssumeRole without credentials")
        })?;
        let issued = Issued {
            access_key_id: creds.access_key_id().to_string(),
            secret_access_key: creds.secret_access_key().to_string(),
            session_token: creds.session_token().to_string(),
            expires_at_ms: creds.expiration().to_millis().unwrap_or(0).max(0) as u64,
            issued_at_ms,
        };
        *held = Some(issued.clone());
        Ok(issued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_allow_only_the_tables_folder() {
        let read: serde_json::Value =
            serde_json::from_str(&session_policy("lance", "ml/t1.lance", false, true).unwrap())
                .unwrap();
        assert_eq!(
            read["Statement"][0]["Resource"][0],
            "arn:aws:s3:::lance/ml/t1.lance/*"
        );
        assert_eq!(
            read["Statement"][0]["Action"],
            serde_json::json!(["s3:GetObject"])
        );
        assert_eq!(
            read["Statement"][1]["Condition"]["StringLike"]["s3:prefix"][0], "ml/t1.lance/*",
            "listing under the folder only, never the bare prefix"
        );
        assert_eq!(read["Statement"].as_array().unwrap().len(), 2);
        let write: serde_json::Value =
            serde_json::from_str(&session_policy("lance", "ml/t1.lance", true, false).unwrap())
                .unwrap();
        let actions = write["Statement"][0]["Action"].as_array().unwrap();
        assert!(actions.iter().any(|a| a == "s3:PutObject"));
        assert!(!actions.iter().any(|a| a.as_str().unwrap().contains('*')));
        assert_eq!(write["Statement"].as_array().unwrap().len(), 2);
        // Under managed versioning the final manifests are the catalog's to write.
        let gated: serde_json::Value =
            serde_json::from_str(&session_policy("lance", "ml/t1.lance", true, true).unwrap())
                .unwrap();
        let deny = &gated["Statement"][2];
        assert_eq!(deny["Effect"], "Deny");
        assert_eq!(
            deny["Resource"][0],
            "arn:aws:s3:::lance/ml/t1.lance/*.manifest"
        );
        assert!(
            session_policy("lance", "ml/t1.lance", true, true)
                .unwrap()
                .len()
                < 2048
        );
    }

    #[test]
    fn folders_that_would_widen_a_policy_are_refused() {
        for (bucket, prefix) in [
            ("lance", ""),
            ("lance", "ml/*"),
            ("lance", "ml/t?.lance"),
            ("lance", "${aws:username}/t"),
            ("lance", "ml/../other"),
            ("lance", "ml//t"),
            ("lance", "a\"b"),
        ] {
            assert!(
                session_policy(bucket, prefix, true, true).is_err(),
                "{prefix}"
            );
        }
        assert_eq!(
            bucket_and_prefix("s3://b/wh/ml/t.lance/").unwrap(),
            ("b".to_string(), "wh/ml/t.lance".to_string())
        );
        assert!(bucket_and_prefix("s3://b").is_err());
        assert!(bucket_and_prefix("file:///x").is_err());
    }

    #[test]
    fn session_names_are_what_sts_accepts() {
        assert_eq!(session_name("alice"), "lg-alice");
        let odd = session_name("CN=svc account/éx");
        assert!(
            odd.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c))
        );
        assert!(session_name(&"x".repeat(200)).len() <= 64);
    }
}
