//! The modes of the spec's create and drop requests, in every spelling clients send.

use crate::error::{Error, Result};

/// How CreateNamespace treats an existing namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    Create,
    ExistOk,
    Overwrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropMode {
    Fail,
    Skip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropBehavior {
    Restrict,
    Cascade,
}

/// Folds the spellings clients use (`ExistOk`, `exist_ok`, `EXIST_OK`) into one word.
/// LanceDB's Node client (0.31, remote) sends the mode JSON-encoded inside the string
/// (`"\"ExistOk\""`): one pair of surrounding quotes is taken off.
fn fold(mode: &str) -> String {
    let mode = mode.trim();
    let mode = mode
        .strip_prefix('"')
        .and_then(|m| m.strip_suffix('"'))
        .unwrap_or(mode);
    mode.chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect::<String>()
        .to_ascii_lowercase()
}

impl CreateMode {
    pub fn parse(mode: Option<&str>) -> Result<Self> {
        match mode.map(fold).as_deref() {
            None | Some("") | Some("create") => Ok(CreateMode::Create),
            Some("existok") => Ok(CreateMode::ExistOk),
            Some("overwrite") => Ok(CreateMode::Overwrite),
            Some(_) => Err(Error::invalid(format!(
                "unknown mode '{}': use Create, ExistOk or Overwrite",
                mode.unwrap_or_default()
            ))),
        }
    }
}

impl DropMode {
    pub fn parse(mode: Option<&str>) -> Result<Self> {
        match mode.map(fold).as_deref() {
            None | Some("") | Some("fail") => Ok(DropMode::Fail),
            Some("skip") => Ok(DropMode::Skip),
            Some(_) => Err(Error::invalid(format!(
                "unknown mode '{}': use Fail or Skip",
                mode.unwrap_or_default()
            ))),
        }
    }
}

impl DropBehavior {
    pub fn parse(behavior: Option<&str>) -> Result<Self> {
        match behavior.map(fold).as_deref() {
            None | Some("") | Some("restrict") => Ok(DropBehavior::Restrict),
            Some("cascade") => Ok(DropBehavior::Cascade),
            Some(_) => Err(Error::invalid(format!(
                "unknown behavior '{}': use Restrict or Cascade",
                behavior.unwrap_or_default()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_in_every_spelling() {
        for m in ["ExistOk", "exist_ok", "EXIST_OK", "exist-ok", "\"ExistOk\""] {
            assert_eq!(CreateMode::parse(Some(m)).unwrap(), CreateMode::ExistOk);
        }
        assert_eq!(CreateMode::parse(None).unwrap(), CreateMode::Create);
        assert!(CreateMode::parse(Some("sometimes")).is_err());
        assert_eq!(DropMode::parse(Some("SKIP")).unwrap(), DropMode::Skip);
        assert_eq!(DropMode::parse(Some("\"Skip\"")).unwrap(), DropMode::Skip);
        assert_eq!(
            DropBehavior::parse(Some("\"Cascade\"")).unwrap(),
            DropBehavior::Cascade
        );
        assert_eq!(
            DropBehavior::parse(Some("Cascade")).unwrap(),
            DropBehavior::Cascade
        );
    }
}
