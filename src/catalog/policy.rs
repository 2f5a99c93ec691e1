//! The maintenance policy: for each task the gateway runs on tables by itself (compaction,
//! index upkeep, version cleanup), whether it runs and what makes a table due for it.
//!
//! The defaults come from the configuration; a namespace's properties override them for
//! every table below it, a deeper namespace's override a shallower one's, and a table's own
//! properties win over all. The property names are `maintenance.*` (`PROPERTIES` below;
//! the README lists them). A value that does not parse is refused when a namespace or table
//! is created with it (400, naming the property), so a stored record only ever holds
//! values that parse; one that does not anyway (written by hand) stops maintenance of the
//! tables it applies to, with the reason in the log and in `admin maintain`.

use std::time::Duration;

use super::records::Properties;
use crate::error::{Error, Result};

/// Compaction: rewrite small fragments into fragments of the target size, and fragments
/// with many deleted rows without them.
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
    pub enabled: bool,
    /// The rows a fragment is written to; a fragment with fewer is "small" (Lance's own
    /// candidacy rule).
    pub target_rows_per_fragment: u64,
    /// A table with at least this many small fragments is due.
    pub min_fragments: u64,
    /// A table in which at least this share of the rows is deleted (and kept in deletion
    /// files) is due; its fragments past the share are rewritten without them.
    pub deleted_share: f64,
}

/// Index upkeep: fold rows written since an index was built into it.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexUpkeep {
    pub enabled: bool,
    /// An index missing at least this many rows is due.
    pub unindexed_rows: u64,
    /// An index missing at least this share of the table's rows is due.
    pub unindexed_share: f64,
}

/// Version cleanup: delete old manifests and the files only they reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Cleanup {
    pub enabled: bool,
    /// Versions younger than this are kept (readers may still be reading them).
    pub retention: Duration,
    /// The newest this many versions are kept whatever their age.
    pub keep_versions: u64,
}

/// The whole policy for one table.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The one switch: off, no task runs.
    pub enabled: bool,
    pub compaction: Compaction,
    pub index: IndexUpkeep,
    pub cleanup: Cleanup,
    /// How long a dropped table is kept for undrop before its data is deleted (`dropped`);
    /// zero deletes at once, as a drop did before format 3. Not switched off by `enabled`:
    /// it says what a drop means, not what maintenance does.
    pub drop_retention: Duration,
    /// Where the heavy work runs when the gateway has a Ray cluster (`--ray-address`).
    pub ray: RayPolicy,
}

/// Which jobs leave the gateway for its Ray cluster: those over a table this large. Without
/// a cluster configured every job runs in the gateway whatever this says.
#[derive(Clone, Debug, PartialEq)]
pub struct RayPolicy {
    /// A table with at least this many rows (deleted ones included) is compacted, has its
    /// indices kept up and its old versions removed, and has the indices clients ask for
    /// built, on Ray.
    pub min_rows: u64,
}

impl Default for Policy {
    /// What a user expects of a catalog that keeps tables healthy (the README says why
    /// each value is what it is).
    fn default() -> Self {
        Policy {
            enabled: true,
            compaction: Compaction {
                enabled: true,
                // Lance's own default for writes and compaction.
                target_rows_per_fragment: 1024 * 1024,
                min_fragments: 16,
                // Lance's own threshold for rewriting a fragment without its deletions.
                deleted_share: 0.1,
            },
            index: IndexUpkeep {
                enabled: true,
                unindexed_rows: 10_000,
                unindexed_share: 0.1,
            },
            cleanup: Cleanup {
                enabled: true,
                // LanceDB's `optimize()` removes versions older than 7 days.
                retention: Duration::from_secs(7 * 24 * 3600),
                keep_versions: 10,
            },
            // Lakekeeper's default soft-deletion expiry for Iceberg tables is 7 days too.
            drop_retention: Duration::from_secs(7 * 24 * 3600),
            // Compaction in the gateway takes 9-12 s per million rows here (README): from
            // there on it is worth a job's start (a few seconds) to keep it off the gateway.
            ray: RayPolicy {
                min_rows: 1_000_000,
            },
        }
    }
}

/// One property: its name, what it holds, and how it changes a policy.
struct Property {
    name: &'static str,
    what: &'static str,
    apply: fn(&mut Policy, &str) -> std::result::Result<(), String>,
}

fn boolean(v: &str) -> std::result::Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err("use true or false".into()),
    }
}

fn count(v: &str) -> std::result::Result<u64, String> {
    v.trim()
        .replace('_', "")
        .parse::<u64>()
        .map_err(|_| "use a whole number".into())
}

fn positive(v: &str) -> std::result::Result<u64, String> {
    match count(v)? {
        0 => Err("use a whole number of at least 1".into()),
        n => Ok(n),
    }
}

fn share(v: &str) -> std::result::Result<f64, String> {
    let text = v.trim();
    let parsed = match text.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.parse::<f64>(),
    };
    match parsed {
        Ok(s) if (0.0..=1.0).contains(&s) => Ok(s),
        _ => Err("use a share between 0 and 1 (or a percentage like 10%)".into()),
    }
}

/// `7d`, `36h`, `90m`, `30s`, or a number of seconds.
pub fn duration(v: &str) -> std::result::Result<Duration, String> {
    let text = v.trim();
    let bad = || "use a duration like 7d, 12h, 30m, 45s (or seconds)".to_string();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    }
    .ok_or_else(bad)?;
    Ok(Duration::from_secs(secs))
}

const PROPERTIES: &[Property] = &[
    Property {
        name: "maintenance.enabled",
        what: "whether the gateway maintains the table at all",
        apply: |p, v| {
            p.enabled = boolean(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.compaction.enabled",
        what: "whether small fragments are compacted",
        apply: |p, v| {
            p.compaction.enabled = boolean(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.compaction.target_rows_per_fragment",
        what: "rows per compacted fragment; fewer makes a fragment small",
        apply: |p, v| {
            p.compaction.target_rows_per_fragment = positive(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.compaction.min_fragments",
        what: "small fragments that make a table due",
        apply: |p, v| {
            p.compaction.min_fragments = positive(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.compaction.deleted_share",
        what: "share of deleted rows that makes a table due",
        apply: |p, v| {
            p.compaction.deleted_share = share(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.index.enabled",
        what: "whether indices are brought up to date",
        apply: |p, v| {
            p.index.enabled = boolean(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.index.unindexed_rows",
        what: "unindexed rows that make an index due",
        apply: |p, v| {
            p.index.unindexed_rows = positive(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.index.unindexed_share",
        what: "share of unindexed rows that makes an index due",
        apply: |p, v| {
            p.index.unindexed_share = share(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.cleanup.enabled",
        what: "whether old versions are removed",
        apply: |p, v| {
            p.cleanup.enabled = boolean(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.cleanup.retention",
        what: "versions younger than this are kept",
        apply: |p, v| {
            p.cleanup.retention = duration(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.drop_retention",
        what: "how long a dropped table is kept for undrop (0s: deleted at once)",
        apply: |p, v| {
            p.drop_retention = duration(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.cleanup.keep_versions",
        what: "the newest versions kept whatever their age",
        apply: |p, v| {
            p.cleanup.keep_versions = positive(v)?;
            Ok(())
        },
    },
    Property {
        name: "maintenance.ray.min_rows",
        what: "rows from which a table's maintenance and index builds run on the Ray cluster (with --ray-address)",
        apply: |p, v| {
            p.ray.min_rows = count(v)?;
            Ok(())
        },
    },
];

/// The prefix every policy property starts with.
pub const PREFIX: &str = "maintenance.";

/// Every property name and what it holds, for `--help`-like listings and the README test.
pub fn property_names() -> impl Iterator<Item = (&'static str, &'static str)> {
    PROPERTIES.iter().map(|p| (p.name, p.what))
}

fn apply(policy: &mut Policy, properties: &Properties) -> Result<()> {
    // In name order, so that the first bad one named is always the same.
    let mut keys: Vec<&String> = properties
        .keys()
        .filter(|k| k.starts_with(PREFIX))
        .collect();
    keys.sort();
    for key in keys {
        let value = &properties[key];
        let Some(property) = PROPERTIES.iter().find(|p| p.name == key) else {
            return Err(Error::invalid(format!(
                "unknown maintenance property '{key}' (known: {})",
                PROPERTIES
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        (property.apply)(policy, value).map_err(|why| {
            Error::invalid(format!("property '{key}' = '{value}' is not valid: {why}"))
        })?;
    }
    Ok(())
}

/// Refuses properties that name a maintenance setting with a value that does not parse
/// (or a `maintenance.` name that is no setting): checked before a namespace or table is
/// created with them.
pub fn check(properties: &Properties) -> Result<()> {
    apply(&mut Policy::default(), properties)
}

impl Policy {
    /// This policy overridden by each layer of properties in turn: the namespaces from the
    /// root down, then the table.
    pub fn resolve<'a>(&self, layers: impl IntoIterator<Item = &'a Properties>) -> Result<Policy> {
        let mut policy = self.clone();
        for layer in layers {
            apply(&mut policy, layer)?;
        }
        Ok(policy)
    }

    /// Whether any task may run.
    pub fn any(&self) -> bool {
        self.enabled && (self.compaction.enabled || self.index.enabled || self.cleanup.enabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_deeper_layer_wins_and_unrelated_properties_are_ignored() {
        let ns = props(&[
            ("maintenance.compaction.min_fragments", "4"),
            ("maintenance.cleanup.retention", "2h"),
            ("owner", "ml-team"),
        ]);
        let child = props(&[("maintenance.compaction.min_fragments", "8")]);
        let table = props(&[("maintenance.index.enabled", "false")]);
        let p = Policy::default().resolve([&ns, &child, &table]).unwrap();
        assert_eq!(p.compaction.min_fragments, 8);
        assert_eq!(p.cleanup.retention, Duration::from_secs(7200));
        assert!(!p.index.enabled);
        assert!(p.compaction.enabled && p.enabled);
    }

    #[test]
    fn bad_values_and_unknown_names_are_refused_by_name() {
        for (key, value) in [
            ("maintenance.enabled", "maybe"),
            ("maintenance.compaction.min_fragments", "0"),
            ("maintenance.compaction.min_fragments", "-3"),
            ("maintenance.compaction.deleted_share", "1.5"),
            ("maintenance.cleanup.retention", "7 weeks"),
            ("maintenance.cleanup.keep_versions", "0"),
            ("maintenance.compacton.enabled", "true"),
        ] {
            let e = check(&props(&[(key, value)])).unwrap_err();
            assert!(e.message.contains(key), "{key}: {}", e.message);
        }
        assert!(check(&props(&[("maintenance.index.unindexed_share", "25%")])).is_ok());
        assert!(check(&props(&[("other.thing", "whatever")])).is_ok());
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration("7d").unwrap(), Duration::from_secs(604_800));
        assert_eq!(duration("90m").unwrap(), Duration::from_secs(5400));
        assert_eq!(duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(duration(" 3h ").unwrap(), Duration::from_secs(10_800));
        assert!(duration("h").is_err() && duration("3w").is_err() && duration("").is_err());
    }

    #[test]
    fn one_switch_turns_everything_off() {
        let p = Policy::default()
            .resolve([&props(&[("maintenance.enabled", "off")])])
            .unwrap();
        assert!(!p.any());
    }
}
