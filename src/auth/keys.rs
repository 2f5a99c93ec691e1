//! API keys. A key is `lgk_<id>_<secret>`: the id finds its entry in the keys file, which
//! holds only a salted SHA-256 of the secret (a key is 32 random bytes, so a fast hash is
//! enough: there is nothing to guess). `lance-gateway keys create` makes a key and prints
//! the line to add:
//!
//! ```text
//! # id       principal  groups          hash
//! 3f9a0c1e   alice      ml,analysts     sha256:<salt hex>:<hash hex>
//! ```
//!
//! The file is reloaded when it changes; a file that does not parse keeps the keys in force.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::access::Principal;
use crate::secrets::{hex, random_bytes, unhex};

const PREFIX: &str = "lgk_";

#[derive(Clone, Debug)]
struct Entry {
    principal: String,
    groups: Vec<String>,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

pub struct ApiKeys {
    path: PathBuf,
    entries: RwLock<Arc<HashMap<String, Entry>>>,
}

fn digest(salt: &[u8], secret: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(secret.as_bytes());
    h.finalize().to_vec()
}

/// Makes a key for `principal`: the key (to hand over) and the line for the keys file.
pub fn create(principal: &str, groups: &[String]) -> Result<(String, String), String> {
    let valid = |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == ',');
    if !valid(principal) {
        return Err("the principal must be a name without spaces or commas".into());
    }
    if let Some(g) = groups.iter().find(|g| !valid(g)) {
        return Err(format!(
            "group '{g}' must be a name without spaces or commas"
        ));
    }
    let id = hex(&random_bytes(4));
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes(32));
    let salt = random_bytes(16);
    let hash = digest(&salt, &secret);
    let groups = if groups.is_empty() {
        "-".to_string()
    } else {
        groups.join(",")
    };
    let line = format!(
        "{id} {principal} {groups} sha256:{}:{}",
        hex(&salt),
        hex(&hash)
    );
    Ok((format!("{PREFIX}{id}_{secret}"), line))
}

fn parse(text: &str) -> Result<HashMap<String, Entry>, String> {
    let mut entries = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, principal, groups, hash] = fields[..] else {
            return Err(format!(
                "line {}: expected `<id> <principal> <groups> sha256:<salt>:<hash>`",
                n + 1
            ));
        };
        let mut parts = hash.split(':');
        let (Some("sha256"), Some(salt), Some(hash), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "line {}: the hash must be sha256:<salt>:<hash>",
                n + 1
            ));
        };
        let (Some(salt), Some(hash)) = (unhex(salt), unhex(hash)) else {
            return Err(format!("line {}: salt and hash must be hexadecimal", n + 1));
        };
        if hash.len() != 32 {
            return Err(format!("line {}: a SHA-256 hash is 32 bytes", n + 1));
        }
        let groups = match groups {
            "-" => Vec::new(),
            g => g.split(',').map(str::to_string).collect(),
        };
        let entry = Entry {
            principal: principal.to_string(),
            groups,
            salt,
            hash,
        };
        if entries.insert(id.to_string(), entry).is_some() {
            return Err(format!("line {}: key id {id} appears twice", n + 1));
        }
    }
    Ok(entries)
}

fn read(path: &Path) -> Result<HashMap<String, Entry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    parse(&text)
}

impl ApiKeys {
    /// The keys of a file, which must parse now.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        Ok(ApiKeys {
            path: path.to_path_buf(),
            entries: RwLock::new(Arc::new(read(path)?)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again; a file that does not parse keeps the keys in force.
    pub fn reload(&self) {
        match read(&self.path) {
            Ok(entries) => {
                let count = entries.len();
                *self.entries.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(entries);
                tracing::info!(path = %self.path.display(), keys = count, "reloaded the API keys");
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "the API keys file is not valid; the keys in force stay")
            }
        }
    }

    /// Whether `presented` looks like one of our keys (so a bearer token can be told from a
    /// JWT).
    pub fn looks_like_key(presented: &str) -> bool {
        presented.starts_with(PREFIX)
    }

    /// The principal a key authenticates, or `None` for an unknown or wrong key.
    pub fn verify(&self, presented: &str) -> Option<Principal> {
        let rest = presented.strip_prefix(PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let entries = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let entry = entries.get(id)?;
        let matches: bool = digest(&entry.salt, secret).ct_eq(&entry.hash).into();
        matches.then(|| Principal {
            name: entry.principal.clone(),
            groups: entry.groups.clone(),
            scheme: "api-key",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_key_verifies_and_nothing_else_does() {
        let (key, line) = create("alice", &["ml".into(), "analysts".into()]).unwrap();
        let (other, other_line) = create("bob", &[]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, format!("# keys\n{line}\n")).unwrap();
        let keys = ApiKeys::from_file(&path).unwrap();
        let alice = keys.verify(&key).unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, vec!["ml", "analysts"]);
        assert!(keys.verify(&other).is_none(), "a key not in the file");
        let mut wrong = key.clone();
        wrong.pop();
        wrong.push(if key.ends_with('A') { 'B' } else { 'A' });
        assert!(keys.verify(&wrong).is_none(), "a wrong secret");
        assert!(keys.verify("lgk_").is_none() && keys.verify("nonsense").is_none());
        assert!(!line.contains(&key[12..]), "the file line holds the secret");
        // Reloaded with bob's key, and a bad file keeps both.
        std::fs::write(&path, format!("{line}\n{other_line}\n")).unwrap();
        keys.reload();
        assert_eq!(keys.verify(&other).unwrap().name, "bob");
        std::fs::write(&path, "garbage\n").unwrap();
        keys.reload();
        assert!(keys.verify(&key).is_some());
    }

    #[test]
    fn bad_files_say_which_line() {
        let (_, line) = create("alice", &[]).unwrap();
        for (text, says) in [
            ("a b c\n".to_string(), "line 1"),
            ("x y - md5:00:00\n".to_string(), "sha256"),
            ("x y - sha256:zz:00\n".to_string(), "hexadecimal"),
            (format!("{line}\n{line}\n"), "twice"),
        ] {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
        assert!(create("has space", &[]).is_err());
    }
}
