//! What the last look found at each table a sweep brought, for the next sweep's quiet look,
//! kept small enough for a warehouse of a million tables: 24 bytes a table (a sorted
//! vector, searched by a hash of the table's sweep key and catalog fingerprint), and the
//! table's data folder only when it is not the one its id names.
//!
//! A memo says: when the sweep saw this table with catalog fingerprint `listed`, a look
//! found nothing due, and nothing will be due until `until` unless `probe` (the manifest
//! its next version would have, or any manifest while it has none) appears. A memo is
//! found by table and fingerprint together, so a table whose record changed has none (the
//! old one, seen by no later sweep, goes with the others unseen).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// What a quiet look lists to tell that a table has not changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// Nothing: maintenance is off for the table.
    None,
    /// Any manifest (`_versions/`): the table holds no data yet.
    AnyManifest,
    /// The manifest of version `version`, in the V2 naming scheme when `v2`.
    Version { version: u64, v2: bool },
}

const PROBE_NONE: u64 = u64::MAX;
const PROBE_ANY: u64 = u64::MAX - 1;
const V2: u64 = 1 << 63;

impl Probe {
    fn pack(self) -> u64 {
        match self {
            Probe::None => PROBE_NONE,
            Probe::AnyManifest => PROBE_ANY,
            Probe::Version { version, v2 } => (version & !V2) | if v2 { V2 } else { 0 },
        }
    }

    fn unpack(v: u64) -> Self {
        match v {
            PROBE_NONE => Probe::None,
            PROBE_ANY => Probe::AnyManifest,
            v => Probe::Version {
                version: v & !V2,
                v2: v & V2 != 0,
            },
        }
    }

    /// The manifest `folder/_versions/...` a quiet look lists (none for `Probe::None`).
    pub(super) fn key_in(self, folder: &str) -> Option<String> {
        match self {
            Probe::None => None,
            Probe::AnyManifest => Some(format!("{folder}/_versions/")),
            Probe::Version { version, v2: true } => Some(format!(
                "{folder}/_versions/{:020}.manifest",
                u64::MAX - version
            )),
            Probe::Version { version, v2: false } => {
                Some(format!("{folder}/_versions/{version}.manifest"))
            }
        }
    }

    /// What a quiet look lists in `folder` (one key, under the listing's prefix), and how it
    /// reads the answer; `None` for `Probe::None`, which lists nothing.
    pub(super) fn listing(self, folder: &str) -> Option<Listing> {
        let probe = self.key_in(folder)?;
        Some(match self {
            // V2 names sort newest first: the first manifest listed is the table's latest,
            // and the table is unchanged while that is older than the probe's. A version
            // written and then cleaned up (by a short retention) behind a newer one still
            // shows, where looking for its own manifest would find nothing.
            Probe::Version { v2: true, .. } => Listing {
                prefix: format!("{folder}/_versions/"),
                older_than: Some(probe),
            },
            _ => Listing {
                prefix: probe,
                older_than: None,
            },
        })
    }

    /// The probe for the manifest key `next` (`_versions/<file>`, as `data::maintain`
    /// names the next version's); `None` when it is not a manifest name.
    pub(super) fn of_next_manifest(next: &str) -> Option<Self> {
        let file = next.strip_prefix("_versions/")?.strip_suffix(".manifest")?;
        let n: u64 = file.parse().ok()?;
        let v2 = file.len() == 20;
        let version = if v2 { u64::MAX - n } else { n };
        // Versions from 2^63 - 2 up would pack onto the markers (or the V2 bit): no table
        // reaches them, and such a table is simply looked at in full.
        (version < V2 - 2).then_some(Probe::Version { version, v2 })
    }
}

/// A quiet look's listing: the first key under `prefix`.
pub(super) struct Listing {
    pub prefix: String,
    /// When set, the table is unchanged while the first key sorts after this one (V2
    /// naming: an older version); otherwise while there is none.
    older_than: Option<String>,
}

impl Listing {
    /// Whether the first key listed (`None`: none) says the table is unchanged.
    pub(super) fn unchanged(&self, first: Option<&str>) -> bool {
        match (first, &self.older_than) {
            (None, _) => true,
            (Some(key), Some(probe)) => key > probe.as_str(),
            (Some(_), None) => false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Memo {
    /// The table's key and fingerprint, hashed together (`QuietBook::slot`).
    slot: u64,
    probe: u64,
    /// Minutes since the epoch until which nothing comes due (`u32::MAX`: never).
    until_min: u32,
    /// The sweep that last saw it (`DEAD`: forgotten, removed at the next merge).
    seen: u32,
}

const _: () = assert!(std::mem::size_of::<Memo>() == 24);

const DEAD: u32 = u32::MAX;

/// Memos written since the last merge at most: a merge is linear in the book, and the
/// map of fresh ones stays about a megabyte.
const FRESH_AT_MOST: usize = 16_384;

/// Sweeps a memo may go unseen before it is dropped even when no sweep was whole (a gateway
/// that sweeps some cells of an endpoint-mode warehouse and not others never has a whole
/// one): the book holds the tables of its recent sweeps, not every table it ever saw.
const UNSEEN_SWEEPS_AT_MOST: u32 = 8;

/// The memos of one gateway's sweeps.
#[derive(Default)]
pub(super) struct QuietBook {
    /// By slot; written in place.
    sorted: Vec<Memo>,
    /// Written since the last merge into `sorted` (none of them there).
    fresh: HashMap<u64, Memo>,
    /// Data folders of tables whose folder is not the one their id names.
    odd: HashMap<u64, Box<str>>,
    epoch: u32,
}

/// A quiet look's answer: what to list, in which folder (`None`: the one the id names).
pub(super) struct Quiet {
    pub probe: Probe,
    pub folder: Option<Box<str>>,
}

impl QuietBook {
    /// The book's key for a table's sweep key.
    pub(super) fn key_of(swept: &str) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        swept.hash(&mut h);
        h.finish()
    }

    /// Starts a sweep; its number, for `end_sweep`.
    pub(super) fn begin_sweep(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1) % DEAD;
        self.epoch
    }

    /// Where table `key` with fingerprint `listed` is remembered.
    fn slot(key: u64, listed: u64) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (key, listed).hash(&mut h);
        h.finish()
    }

    fn memo(&mut self, slot: u64) -> Option<&mut Memo> {
        match self.fresh.get_mut(&slot) {
            Some(m) => Some(m),
            None => {
                let at = self.sorted.binary_search_by_key(&slot, |m| m.slot).ok()?;
                Some(&mut self.sorted[at])
            }
        }
    }

    /// The memo of `key`, if the table's fingerprint is still `listed` and nothing has come
    /// due by time (`now_ms`); the sweep under way counts it as seen.
    pub(super) fn quiet(&mut self, key: u64, listed: u64, now_ms: u64) -> Option<Quiet> {
        let (epoch, slot) = (self.epoch, Self::slot(key, listed));
        let memo = self.memo(slot)?;
        let now_min = (now_ms / 60_000).min(u64::from(u32::MAX - 1)) as u32;
        if memo.seen == DEAD || now_min >= memo.until_min {
            return None;
        }
        memo.seen = epoch;
        let probe = Probe::unpack(memo.probe);
        Some(Quiet {
            probe,
            folder: self.odd.get(&slot).cloned(),
        })
    }

    /// Notes that table `key` had nothing due at fingerprint `listed`, what will show a
    /// change, its data folder when not the one its id names, and until when.
    pub(super) fn remember(
        &mut self,
        key: u64,
        listed: u64,
        probe: Probe,
        odd_folder: Option<&str>,
        until_ms: u64,
    ) {
        let until_min = if until_ms == u64::MAX {
            u32::MAX
        } else {
            (until_ms / 60_000).min(u64::from(u32::MAX - 1)) as u32
        };
        let slot = Self::slot(key, listed);
        let memo = Memo {
            slot,
            probe: probe.pack(),
            until_min,
            seen: self.epoch,
        };
        match self.sorted.binary_search_by_key(&slot, |m| m.slot) {
            Ok(at) => self.sorted[at] = memo,
            Err(_) => {
                self.fresh.insert(slot, memo);
            }
        }
        match odd_folder {
            Some(f) => {
                self.odd.insert(slot, f.into());
            }
            None => {
                self.odd.remove(&slot);
            }
        }
        if self.fresh.len() >= FRESH_AT_MOST {
            self.merge(None);
        }
    }

    /// Forgets table `key` at fingerprint `listed` (a look found it changed).
    pub(super) fn forget(&mut self, key: u64, listed: u64) {
        let slot = Self::slot(key, listed);
        if let Some(memo) = self.memo(slot) {
            memo.seen = DEAD;
        }
        self.odd.remove(&slot);
    }

    /// Ends sweep `epoch`: when it listed every table, the memos of tables it did not see
    /// (gone since) are dropped.
    pub(super) fn end_sweep(&mut self, epoch: u32, complete: bool) {
        self.merge(complete.then_some(epoch));
    }

    /// Moves `fresh` into `sorted` in place (sorted, then merged from the back, so in time
    /// linear in the book), dropping the forgotten and (with `keep_seen`) what that sweep
    /// did not see, or else what no sweep saw for `UNSEEN_SWEEPS_AT_MOST`.
    fn merge(&mut self, keep_seen: Option<u32>) {
        let epoch = self.epoch;
        let mut fresh: Vec<Memo> = std::mem::take(&mut self.fresh).into_values().collect();
        fresh.sort_unstable_by_key(|m| m.slot);
        let (mut old, mut new) = (self.sorted.len(), fresh.len());
        if let Some(&filler) = fresh.first() {
            self.sorted.reserve_exact(new);
            self.sorted.resize(old + new, filler);
        }
        let sorted = &mut self.sorted;
        while new > 0 {
            let to = old + new - 1;
            if old > 0 && sorted[old - 1].slot > fresh[new - 1].slot {
                sorted[to] = sorted[old - 1];
                old -= 1;
            } else {
                sorted[to] = fresh[new - 1];
                new -= 1;
            }
        }
        let odd = &mut self.odd;
        self.sorted.retain(|m| {
            let keep = m.seen != DEAD
                && match keep_seen {
                    Some(e) => m.seen == e,
                    None => epoch.wrapping_sub(m.seen) <= UNSEEN_SWEEPS_AT_MOST,
                };
            if !keep {
                odd.remove(&m.slot);
            }
            keep
        });
        if self.sorted.capacity() > 2 * self.sorted.len() + 4096 {
            self.sorted.shrink_to_fit();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sorted.len() + self.fresh.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    /// The sweep under way finds each of `keys` quiet (so counts it as seen).
    fn sees(book: &mut QuietBook, keys: impl Iterator<Item = u64>) {
        for key in keys {
            assert!(book.quiet(key, key, NOW).is_some(), "{key}");
        }
    }

    #[test]
    fn a_memo_answers_only_for_its_fingerprint_and_time() {
        let mut book = QuietBook::default();
        book.begin_sweep();
        let probe = Probe::Version {
            version: 7,
            v2: true,
        };
        book.remember(1, 100, probe, None, NOW + 3_600_000);
        let q = book.quiet(1, 100, NOW).expect("quiet while unchanged");
        assert_eq!(q.probe, probe);
        assert!(q.folder.is_none());
        assert!(book.quiet(1, 101, NOW).is_none(), "fingerprint changed");
        assert!(book.quiet(2, 100, NOW).is_none(), "never looked at");
        assert!(
            book.quiet(1, 100, NOW + 3_600_000).is_none(),
            "its time came"
        );
        book.forget(1, 100);
        assert!(book.quiet(1, 100, NOW).is_none(), "forgotten");
    }

    #[test]
    fn a_book_merged_many_times_answers_for_every_table() {
        // Remembered in no order, over many merges, and some again at a new fingerprint.
        let mut book = QuietBook::default();
        let first = book.begin_sweep();
        let shuffled = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let tables = 5 * FRESH_AT_MOST as u64 + 123;
        for i in 0..tables {
            book.remember(shuffled(i), 1, Probe::AnyManifest, None, u64::MAX);
        }
        for i in (0..tables).step_by(10) {
            book.remember(shuffled(i), 2, Probe::None, None, u64::MAX);
        }
        book.end_sweep(first, false);
        assert!(book.sorted.is_sorted_by_key(|m| m.slot) && book.fresh.is_empty());
        let second = book.begin_sweep();
        for i in 0..tables {
            let now = if i % 10 == 0 { 2 } else { 1 };
            let q = book.quiet(shuffled(i), now, NOW).expect("remembered");
            let probe = if now == 2 {
                Probe::None
            } else {
                Probe::AnyManifest
            };
            assert_eq!(q.probe, probe, "table {i}");
        }
        assert!(
            book.quiet(shuffled(1), 2, NOW).is_none(),
            "never at that fingerprint"
        );
        assert_eq!(book.len(), (tables + tables.div_ceil(10)) as usize);
        book.end_sweep(second, true);
        assert_eq!(
            book.len(),
            tables as usize,
            "the memos of the old fingerprints, unseen by a whole sweep, went"
        );
    }

    #[test]
    fn a_table_not_seen_by_a_whole_sweep_is_dropped() {
        let mut book = QuietBook::default();
        let first = book.begin_sweep();
        for key in 0..10_000u64 {
            book.remember(key, key, Probe::AnyManifest, None, u64::MAX);
        }
        book.remember(5, 5, Probe::None, Some("elsewhere/t.lance"), u64::MAX);
        book.end_sweep(first, true);
        assert_eq!(book.len(), 10_000);
        let second = book.begin_sweep();
        sees(&mut book, (0..10_000u64).filter(|k| k % 2 == 1));
        // A sweep cut short drops nothing.
        book.end_sweep(second, false);
        assert_eq!(book.len(), 10_000);
        let third = book.begin_sweep();
        sees(&mut book, (0..10_000u64).filter(|k| k % 2 == 1));
        book.end_sweep(third, true);
        assert_eq!(book.len(), 5_000);
        assert!(book.quiet(4, 4, NOW).is_none());
        let q = book.quiet(5, 5, NOW).expect("kept");
        assert_eq!(q.probe, Probe::None);
        assert_eq!(q.folder.as_deref(), Some("elsewhere/t.lance"));
    }

    #[test]
    fn probes_name_the_manifest_the_next_version_would_have() {
        for next in [
            "_versions/8.manifest",
            "_versions/18446744073709551607.manifest",
        ] {
            let probe = Probe::of_next_manifest(next).expect(next);
            assert_eq!(
                probe
                    .key_in("n/t.lance")
                    .expect("a version names its manifest"),
                format!("n/t.lance/{next}")
            );
            assert_eq!(Probe::unpack(probe.pack()), probe);
        }
        assert_eq!(Probe::of_next_manifest("_versions/x.manifest"), None);
        assert_eq!(
            Probe::AnyManifest
                .key_in("t.lance")
                .expect("no data: the versions folder"),
            "t.lance/_versions/"
        );
        assert_eq!(Probe::None.key_in("t.lance"), None);
        // Versions that would pack onto the markers are not remembered.
        for v in [u64::MAX / 2 - 1, u64::MAX / 2] {
            let v2_name = format!("_versions/{:020}.manifest", u64::MAX - v);
            assert_eq!(Probe::of_next_manifest(&v2_name), None, "{v}");
        }
    }

    #[test]
    fn a_v2_probe_sees_a_newer_version_whose_predecessor_was_cleaned_up() {
        let name = |v: u64| format!("t.lance/_versions/{:020}.manifest", u64::MAX - v);
        // The table was at version 5; the next would be 6.
        let listing = Probe::of_next_manifest(&name(6)["t.lance/".len()..])
            .expect("a V2 manifest name")
            .listing("t.lance")
            .expect("a version's probe lists");
        assert_eq!(listing.prefix, "t.lance/_versions/");
        assert!(listing.unchanged(Some(&name(5))), "still at 5");
        assert!(listing.unchanged(None), "no manifest listed");
        assert!(!listing.unchanged(Some(&name(6))), "6 written");
        assert!(
            !listing.unchanged(Some(&name(7))),
            "6 and 7 written, 6 cleaned up"
        );
        // V1 names do not sort by version: the next manifest itself is looked for.
        let v1 = Probe::of_next_manifest("_versions/6.manifest")
            .expect("a V1 manifest name")
            .listing("t.lance")
            .expect("a version's probe lists");
        assert_eq!(v1.prefix, "t.lance/_versions/6.manifest");
        assert!(v1.unchanged(None));
        assert!(!v1.unchanged(Some("t.lance/_versions/6.manifest")));
        let any = Probe::AnyManifest
            .listing("t.lance")
            .expect("a table without data lists its versions folder");
        assert!(any.unchanged(None));
        assert!(!any.unchanged(Some(&name(1))));
        assert!(Probe::None.listing("t.lance").is_none());
    }

    #[test]
    fn memos_unseen_for_many_sweeps_go_even_when_no_sweep_is_whole() {
        let mut book = QuietBook::default();
        let first = book.begin_sweep();
        for key in 0..100u64 {
            book.remember(key, key, Probe::AnyManifest, None, u64::MAX);
        }
        book.end_sweep(first, false);
        // Later sweeps, none whole, see only the even tables (the odd ones are in a cell
        // another gateway sweeps now).
        for _ in 0..UNSEEN_SWEEPS_AT_MOST {
            let e = book.begin_sweep();
            sees(&mut book, (0..100u64).filter(|k| k % 2 == 0));
            book.end_sweep(e, false);
        }
        assert_eq!(
            book.len(),
            100,
            "unseen for {UNSEEN_SWEEPS_AT_MOST} sweeps: kept"
        );
        let e = book.begin_sweep();
        sees(&mut book, (0..100u64).filter(|k| k % 2 == 0));
        book.end_sweep(e, false);
        assert_eq!(book.len(), 50);
        assert!(book.quiet(1, 1, NOW).is_none());
    }
}
