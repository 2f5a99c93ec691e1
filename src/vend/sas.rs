//! Azure SAS tokens for the `sas` policy: a service SAS signed with the account key, for one
//! table's folder (a directory SAS, `sr=d`, on accounts with a hierarchical namespace) or
//! for the warehouse's container (`sr=c`, where the operator chose that scope: a flat
//! namespace has no folder a SAS can be limited to), read-only (`rl`) or read-write
//! (`racwdl`) by the caller's access, expiring after the configured duration.
//!
//! The string signed is the one Azure's "Create a service SAS" gives for versions
//! 2020-12-06 and later; Azurite checks it the same way.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use sha2::Sha256;

use crate::error::{Error, Result};

/// The service version the tokens are signed for.
pub const VERSION: &str = "2022-11-02";

/// What one SAS reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The table's folder and below (hierarchical namespace accounts).
    Directory,
    /// The whole container.
    Container,
}

pub struct Sas {
    account: String,
    key: Vec<u8>,
    container: String,
    scope: Scope,
    duration: std::time::Duration,
}

/// A token and when it stops working.
pub struct Issued {
    pub token: String,
    pub expires_at_ms: u64,
}

impl Sas {
    /// `key` is the account key as Azure shows it (base64).
    pub fn new(
        account: &str,
        key: &str,
        container: &str,
        scope: Scope,
        duration: std::time::Duration,
    ) -> Result<Self> {
        let key = STANDARD
            .decode(key.trim())
            .map_err(|_| Error::invalid("the Azure account key is not base64"))?;
        Ok(Sas {
            account: account.to_string(),
            key,
            container: container.to_string(),
            scope,
            duration,
        })
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// A token for the folder `path` (the blob path of the table's folder inside the
    /// container, no leading or trailing `/`), writable when `write`, issued at `now_ms`.
    pub fn issue(&self, path: &str, write: bool, now_ms: u64) -> Issued {
        let expires_at_ms = now_ms + self.duration.as_millis() as u64;
        // A minute's slack on the start for clocks behind ours.
        let start = iso(now_ms.saturating_sub(60_000));
        let expiry = iso(expires_at_ms);
        let permissions = if write { "racwdl" } else { "rl" };
        let path = path.trim_matches('/');
        let (resource, canonical, depth) = match self.scope {
            Scope::Directory => (
                "d",
                format!("/blob/{}/{}/{path}", self.account, self.container),
                Some(path.split('/').filter(|s| !s.is_empty()).count()),
            ),
            Scope::Container => (
                "c",
                format!("/blob/{}/{}", self.account, self.container),
                None,
            ),
        };
        let to_sign = [
            permissions,
            &start,
            &expiry,
            &canonical,
            "", // signed identifier
            "", // IP range
            "", // protocol: http and https
            VERSION,
            resource,
            "", // snapshot time
            "", // encryption scope
            "", // rscc
            "", // rscd
            "", // rsce
            "", // rscl
            "", // rsct
        ]
        .join("\n");
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(to_sign.as_bytes());
        let sig = STANDARD.encode(mac.finalize().into_bytes());
        let enc = |v: &str| utf8_percent_encode(v, NON_ALPHANUMERIC).to_string();
        let mut token = format!(
            "sv={VERSION}&st={}&se={}&sr={resource}&sp={permissions}",
            enc(&start),
            enc(&expiry)
        );
        if let Some(depth) = depth {
            token.push_str(&format!("&sdd={depth}"));
        }
        token.push_str(&format!("&sig={}", enc(&sig)));
        Issued {
            token,
            expires_at_ms,
        }
    }
}

fn iso(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(token: &str) -> std::collections::HashMap<String, String> {
        token
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (
                    k.to_string(),
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8()
                        .unwrap()
                        .into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn a_token_names_its_scope_permissions_and_expiry() {
        let key = STANDARD.encode(b"0123456789abcdef");
        let dir = Sas::new(
            "acct",
            &key,
            "wh",
            Scope::Directory,
            std::time::Duration::from_secs(3600),
        )
        .unwrap();
        let now = 1_800_000_000_000;
        let read = dir.issue("lake/ns/t1", false, now);
        let p = params(&read.token);
        assert_eq!(p["sr"], "d");
        assert_eq!(p["sdd"], "3");
        assert_eq!(p["sp"], "rl");
        assert_eq!(p["sv"], VERSION);
        assert_eq!(read.expires_at_ms, now + 3_600_000);
        assert_eq!(p["se"], iso(now + 3_600_000));
        let write = dir.issue("lake/ns/t1", true, now);
        assert_eq!(params(&write.token)["sp"], "racwdl");
        assert_ne!(params(&write.token)["sig"], p["sig"]);
        // Another folder, another signature: a token names the folder it was signed for.
        assert_ne!(
            params(&dir.issue("lake/ns/t2", false, now).token)["sig"],
            p["sig"]
        );
        let container = Sas::new(
            "acct",
            &key,
            "wh",
            Scope::Container,
            std::time::Duration::from_secs(60),
        )
        .unwrap();
        let c = params(&container.issue("lake/ns/t1", false, now).token);
        assert_eq!(c["sr"], "c");
        assert!(!c.contains_key("sdd"));
        assert!(
            Sas::new(
                "a",
                "not base64!",
                "c",
                Scope::Container,
                Default::default()
            )
            .is_err()
        );
    }
}
