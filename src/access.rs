//! Who is asking, and what they may do. A request's `Ctx` (its principal and request id) is
//! built once by the HTTP layer and passed into every catalog call; the catalog decides,
//! with the `Grants`, because a listing or a cascade must look at each child, not only at
//! the id in the URL.
//!
//! Grants map principals and groups to id prefixes with a level: `read` (list, describe,
//! exists, read data), `write` (plus declare, register, commit, write data) or `admin` (plus
//! create and drop namespaces, drop, deregister and rename tables). Deny by default; the
//! highest matching grant wins. A caller sees a namespace when a grant covers it or lies
//! below it (so it can walk down to what it may use), and a table when it may read it;
//! what a caller cannot see answers as missing (no existence leaks), and what it sees but
//! may not change answers PermissionDenied (403, code 15).
//!
//! Without a grants file every caller may do everything (the gateway's behaviour before
//! grants existed); with one, the file is reloaded when it changes and on SIGHUP, and a file
//! that does not parse keeps the last good one (and says why in the log).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Deserialize;

use crate::catalog::names::{self, Id};

/// What a caller may do with an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    None,
    Read,
    Write,
    Admin,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Read => "read",
            Level::Write => "write",
            Level::Admin => "admin",
        }
    }
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub groups: Vec<String>,
    /// How it authenticated: `api-key`, `jwt`, `certificate`, `anonymous`, or `open` (no
    /// authentication configured).
    pub scheme: &'static str,
}

impl Principal {
    pub fn anonymous(scheme: &'static str) -> Self {
        Principal {
            name: "anonymous".into(),
            groups: Vec::new(),
            scheme,
        }
    }
}

/// What every catalog call knows about its request, and what it notes for the audit log.
/// Shared, not copied: the middleware keeps one and hands one to the handler, and each
/// copy is an `Arc`.
#[derive(Clone, Debug)]
pub struct Ctx(Arc<Request>);

/// A request's context, as `Ctx` shares it.
#[derive(Debug)]
pub struct Request {
    pub principal: Principal,
    pub request_id: String,
    notes: std::sync::Mutex<Notes>,
}

impl std::ops::Deref for Ctx {
    type Target = Request;

    fn deref(&self) -> &Request {
        &self.0
    }
}

/// What a request did that the audit log records beside its outcome.
#[derive(Clone, Debug, Default)]
pub struct Notes {
    /// Why access was refused (also when the refusal answers as "not found").
    pub denied: Option<String>,
    /// Credentials handed out.
    pub vended: Option<Vended>,
}

/// Credentials handed out, as the audit log shows them (never the secret).
#[derive(Clone, Debug)]
pub struct Vended {
    pub access: &'static str,
    /// The first characters of the access key id.
    pub key_id_prefix: String,
    pub expires_at_ms: Option<u64>,
}

impl Ctx {
    pub fn new(principal: Principal, request_id: impl Into<String>) -> Self {
        Ctx(Arc::new(Request {
            principal,
            request_id: request_id.into(),
            notes: Default::default(),
        }))
    }

    /// The context of work the gateway does for itself (recovery), which may do anything.
    pub fn internal() -> Self {
        Ctx::new(
            Principal {
                name: "lance-gateway".into(),
                groups: Vec::new(),
                scheme: "internal",
            },
            "internal",
        )
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn note_denied(&self, why: impl Into<String>) {
        self.notes().denied = Some(why.into());
    }

    pub fn note_vended(&self, vended: Vended) {
        self.notes().vended = Some(vended);
    }

    pub fn notes_taken(&self) -> Notes {
        std::mem::take(&mut *self.notes())
    }
}

/// Who a grant is for.
#[derive(Clone, Debug)]
enum Who {
    Principal(String),
    Group(String),
    /// Every authenticated principal (`principal = "*"`).
    Anyone,
}

#[derive(Clone, Debug)]
struct Grant {
    prefix: Id,
    level: Level,
}

/// An id prefix as written in the file: a list of names, or one string with `$` between
/// names (`""` or `"$"` is the root: everything).
#[derive(Deserialize)]
#[serde(untagged)]
enum IdText {
    Parts(Vec<String>),
    Joined(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantText {
    principal: Option<String>,
    group: Option<String>,
    id: IdText,
    access: Level,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsFile {
    #[serde(default)]
    grant: Vec<GrantText>,
}

/// A parsed grants file.
/// The grants, indexed by whom they name: a request looks only at its principal's, its
/// groups' and everyone's, so a file with thousands of grants costs no more per request.
#[derive(Clone, Debug, Default)]
pub struct GrantSet {
    count: usize,
    by_principal: HashMap<String, Vec<Grant>>,
    by_group: HashMap<String, Vec<Grant>>,
    anyone: Vec<Grant>,
}

impl GrantSet {
    /// Parses a grants file (TOML, `[[grant]]` tables).
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: GrantsFile = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let mut set = GrantSet::default();
        for (i, g) in file.grant.into_iter().enumerate() {
            let who = match (g.principal, g.group) {
                (Some(p), None) if p == "*" => Who::Anyone,
                (Some(p), None) if !p.is_empty() => Who::Principal(p),
                (None, Some(g)) if !g.is_empty() => Who::Group(g),
                _ => {
                    return Err(format!(
                        "grant {}: name exactly one of `principal` and `group`",
                        i + 1
                    ));
                }
            };
            let prefix = match g.id {
                IdText::Parts(parts) => parts,
                IdText::Joined(text) => names::split_id(&text, names::DEFAULT_DELIMITER)
                    .map_err(|e| format!("grant {}: {}", i + 1, e.message))?,
            };
            names::validate_id(&prefix, names::DEFAULT_DELIMITER)
                .map_err(|e| format!("grant {}: {}", i + 1, e.message))?;
            let grant = Grant {
                prefix,
                level: g.access,
            };
            match who {
                Who::Anyone => set.anyone.push(grant),
                Who::Principal(p) => set.by_principal.entry(p).or_default().push(grant),
                Who::Group(g) => set.by_group.entry(g).or_default().push(grant),
            }
            set.count += 1;
        }
        Ok(set)
    }

    /// The grants that name `p`: its own, its groups', and (unless anonymous) everyone's.
    fn of<'a>(&'a self, p: &'a Principal) -> impl Iterator<Item = &'a Grant> + 'a {
        let own = self.by_principal.get(&p.name).into_iter().flatten();
        let groups = p
            .groups
            .iter()
            .filter_map(|g| self.by_group.get(g))
            .flatten();
        let anyone = self.anyone.iter().filter(move |_| p.scheme != "anonymous");
        own.chain(groups).chain(anyone)
    }

    /// The highest level any grant of `p` gives on `id`.
    pub fn level(&self, p: &Principal, id: &[String]) -> Level {
        self.of(p)
            .filter(|g| id.starts_with(&g.prefix))
            .map(|g| g.level)
            .max()
            .unwrap_or(Level::None)
    }

    /// Whether `p` may see namespace `id`: a grant covers it or lies below it.
    pub fn sees(&self, p: &Principal, id: &[String]) -> bool {
        self.of(p).any(|g| {
            g.level > Level::None && (id.starts_with(&g.prefix) || g.prefix.starts_with(id))
        })
    }
}

/// The grants in force: everything to everyone without a file, else the last good parse of
/// the file.
pub struct Grants {
    path: Option<PathBuf>,
    current: RwLock<Option<Arc<GrantSet>>>,
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants").field("path", &self.path).finish()
    }
}

impl Grants {
    /// Every caller may do everything.
    pub fn open() -> Self {
        Grants {
            path: None,
            current: RwLock::new(None),
        }
    }

    /// Grants from a file, which must parse now.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let set = read(path)?;
        Ok(Grants {
            path: Some(path.to_path_buf()),
            current: RwLock::new(Some(Arc::new(set))),
        })
    }

    /// Grants from a set (tests of the rules).
    pub fn from_set(set: GrantSet) -> Self {
        Grants {
            path: None,
            current: RwLock::new(Some(Arc::new(set))),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Reads the file again; a file that does not parse keeps the grants in force.
    pub fn reload(&self) {
        let Some(path) = &self.path else { return };
        match read(path) {
            Ok(set) => {
                let count = set.count;
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(set));
                tracing::info!(path = %path.display(), grants = count, "reloaded the grants");
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "the grants file is not valid; the grants in force stay")
            }
        }
    }

    fn set(&self) -> Option<Arc<GrantSet>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What `ctx`'s principal may do with `id`.
    pub fn level(&self, ctx: &Ctx, id: &[String]) -> Level {
        match self.set() {
            Some(set) if ctx.principal.scheme != "internal" => set.level(&ctx.principal, id),
            _ => Level::Admin,
        }
    }

    /// Whether `ctx`'s principal may see namespace `id`.
    pub fn sees_namespace(&self, ctx: &Ctx, id: &[String]) -> bool {
        match self.set() {
            Some(set) if ctx.principal.scheme != "internal" => {
                id.is_empty() || set.sees(&ctx.principal, id)
            }
            _ => true,
        }
    }
}

fn read(path: &Path) -> Result<GrantSet, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    GrantSet::parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str, groups: &[&str]) -> Principal {
        Principal {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            scheme: "api-key",
        }
    }

    fn id(text: &str) -> Vec<String> {
        text.split('$')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    const FILE: &str = r#"
[[grant]]
principal = "alice"
id = ["ml"]
access = "write"

[[grant]]
group = "analysts"
id = "ml$emb"
access = "read"

[[grant]]
principal = "root"
id = []
access = "admin"

[[grant]]
principal = "*"
id = "public"
access = "read"
"#;

    #[test]
    fn the_highest_matching_grant_wins_and_the_rest_is_denied() {
        let set = GrantSet::parse(FILE).unwrap();
        let alice = who("alice", &["analysts"]);
        assert_eq!(set.level(&alice, &id("ml$x")), Level::Write);
        assert_eq!(set.level(&alice, &id("ml$emb")), Level::Write);
        assert_eq!(set.level(&alice, &id("ml")), Level::Write);
        assert_eq!(set.level(&alice, &id("other$t")), Level::None);
        assert_eq!(
            set.level(&alice, &id("mlx$t")),
            Level::None,
            "prefixes are whole names"
        );
        let bob = who("bob", &["analysts"]);
        assert_eq!(set.level(&bob, &id("ml$emb")), Level::Read);
        assert_eq!(set.level(&bob, &id("ml$other")), Level::None);
        assert_eq!(set.level(&who("root", &[]), &id("any$thing")), Level::Admin);
        assert_eq!(set.level(&bob, &id("public$t")), Level::Read);
        assert_eq!(
            set.level(&Principal::anonymous("anonymous"), &id("public$t")),
            Level::None,
            "`*` is every authenticated principal, not anonymous callers"
        );
    }

    #[test]
    fn a_namespace_is_seen_from_above_and_below() {
        let set = GrantSet::parse(FILE).unwrap();
        let bob = who("bob", &["analysts"]);
        assert!(set.sees(&bob, &id("ml")), "a grant below it");
        assert!(set.sees(&bob, &id("ml$emb")));
        assert!(!set.sees(&bob, &id("other")));
        assert!(!set.sees(&bob, &id("ml$emb2")));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        for (text, says) in [
            ("[[grant]]\nid = []\naccess = \"read\"\n", "principal"),
            (
                "[[grant]]\nprincipal = \"a\"\nid = []\naccess = \"all\"\n",
                "unknown variant",
            ),
            (
                "[[grant]]\nprincipal = \"a\"\nid = [\"\"]\naccess = \"read\"\n",
                "empty",
            ),
            ("[[grants]]\n", "unknown field"),
        ] {
            let err = GrantSet::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_bad_reload_keeps_the_grants_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.toml");
        std::fs::write(&path, FILE).unwrap();
        let grants = Grants::from_file(&path).unwrap();
        let ctx = Ctx::new(who("alice", &[]), "r");
        assert_eq!(grants.level(&ctx, &id("ml$t")), Level::Write);
        std::fs::write(&path, "not toml [[").unwrap();
        grants.reload();
        assert_eq!(grants.level(&ctx, &id("ml$t")), Level::Write);
        std::fs::write(
            &path,
            "[[grant]]\nprincipal = \"alice\"\nid = \"ml\"\naccess = \"read\"\n",
        )
        .unwrap();
        grants.reload();
        assert_eq!(grants.level(&ctx, &id("ml$t")), Level::Read);
        assert_eq!(Grants::open().level(&ctx, &id("any")), Level::Admin);
    }
}
