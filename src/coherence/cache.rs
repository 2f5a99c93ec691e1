//! The read cache: catalog objects and listings as the store last answered them, kept only
//! while nothing can have changed them. The rules, each enforced here under one lock:
//!
//! - **Pins.** A writer pins every key it is about to change (`pin`) before it sends the
//!   write, and unpins after the store answered. A pin removes the key's entry and every
//!   listing of a folder above it, and while any pin covers a key nothing is installed for
//!   it or for a listing above it.
//! - **Tickets.** A read that missed takes a ticket *before* it asks the store and installs
//!   its answer only if no pin came or went on its stripe meanwhile (`install_*`), so an
//!   answer the store gave before a write landed is never kept after it.
//! - **The lease.** Entries are answered only while this gateway holds its lease on the
//!   registry (`serve_until`): a gateway that writers could not reach is revoked there, and
//!   stops answering from memory before they write (`peers`).
//!
//! So an entry present and answered equals the object in the store at that instant.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::{Object, Page};

/// Pins and tickets are tracked per stripe of the key space: a write elsewhere in the
/// stripe only makes a concurrent miss skip its install.
const STRIPES: usize = 4096;

/// The longest a pin is honoured without its unpin (a writer that died holding it).
pub const MAX_PIN: Duration = Duration::from_secs(600);

/// What a listing was asked for: its page is cached under these.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ListArgs {
    pub start_after: Option<String>,
    pub limit: usize,
    pub shallow: bool,
    pub etags: bool,
}

/// A read's right to install what the store answers.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    incarnation: u64,
    stripe: usize,
    generation: u64,
    everything_gen: u64,
}

pub struct ReadCache {
    state: Mutex<State>,
    budget: usize,
    hasher: std::hash::RandomState,
}

struct Pin {
    stripes: Vec<usize>,
    everything: bool,
    until: Instant,
}

struct State {
    serving_until: Option<Instant>,
    incarnation: u64,
    objects: HashMap<String, Option<Object>>,
    lists: HashMap<String, HashMap<ListArgs, Page>>,
    bytes: usize,
    gens: Vec<u64>,
    pinned: Vec<u32>,
    everything_gen: u64,
    everything_pinned: u32,
    pins: HashMap<u128, Pin>,
    next_expiry: Option<Instant>,
}

/// The folders above a key, each ending in `/`: `a/b/c` has `a/` and `a/b/`.
fn folders_above(key: &str) -> impl Iterator<Item = &str> {
    key.match_indices('/').map(move |(i, _)| &key[..=i])
}

fn object_bytes(key: &str, value: &Option<Object>) -> usize {
    64 + key.len() + value.as_ref().map_or(0, |o| o.body.len() + o.etag.len())
}

fn page_bytes(prefix: &str, page: &Page) -> usize {
    64 + prefix.len()
        + page.keys.iter().map(|k| k.len() + 24).sum::<usize>()
        + page.etags.iter().map(|e| e.len() + 24).sum::<usize>()
}

impl ReadCache {
    /// A cache of about `budget` bytes; it answers nothing until `serve_until` is given.
    pub fn new(budget: usize) -> Self {
        ReadCache {
            state: Mutex::new(State {
                serving_until: None,
                incarnation: 0,
                objects: HashMap::new(),
                lists: HashMap::new(),
                bytes: 0,
                gens: vec![0; STRIPES],
                pinned: vec![0; STRIPES],
                everything_gen: 0,
                everything_pinned: 0,
                pins: HashMap::new(),
                next_expiry: None,
            }),
            budget,
            hasher: std::hash::RandomState::new(),
        }
    }

    fn stripe(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) as usize) % STRIPES
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if state.next_expiry.is_some_and(|at| at <= now) {
            let expired: Vec<u128> = state
                .pins
                .iter()
                .filter(|(_, p)| p.until <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                tracing::warn!("a peer's pin expired without its unpin");
                state.release(id);
            }
            state.next_expiry = state.pins.values().map(|p| p.until).min();
        }
        state
    }

    /// Answers from memory until `until` (the lease's end); `None` stops answering now.
    pub fn serve_until(&self, until: Option<Instant>) {
        self.lock().serving_until = until;
    }

    /// Whether entries are answered now.
    pub fn serving(&self) -> bool {
        self.lock().serving()
    }

    /// Forgets every entry, and makes every ticket out void.
    pub fn clear(&self) {
        let mut state = self.lock();
        state.incarnation += 1;
        state.objects.clear();
        state.lists.clear();
        state.bytes = 0;
    }

    /// The object as cached: `Some(None)` for one known absent; `None` for a miss.
    pub fn object(&self, key: &str) -> Option<Option<Object>> {
        let state = self.lock();
        if !state.serving() {
            return None;
        }
        state.objects.get(key).cloned()
    }

    pub fn list(&self, prefix: &str, args: &ListArgs) -> Option<Page> {
        let state = self.lock();
        if !state.serving() {
            return None;
        }
        state.lists.get(prefix)?.get(args).cloned()
    }

    /// A ticket for a read of `key` (an object's key, or a listed folder), or `None` when
    /// what it reads may not be kept (pinned, or not serving).
    pub fn ticket(&self, key: &str) -> Option<Ticket> {
        let stripe = self.stripe(key);
        let state = self.lock();
        if !state.serving() || state.pinned[stripe] > 0 || state.everything_pinned > 0 {
            return None;
        }
        Some(Ticket {
            incarnation: state.incarnation,
            stripe,
            generation: state.gens[stripe],
            everything_gen: state.everything_gen,
        })
    }

    pub fn install_object(&self, ticket: Ticket, key: &str, value: Option<Object>) {
        let mut state = self.lock();
        if !state.valid(&ticket) {
            return;
        }
        state.bytes += object_bytes(key, &value);
        if let Some(old) = state.objects.insert(key.to_string(), value) {
            state.bytes -= object_bytes(key, &old);
        }
        self.trim(&mut state);
    }

    pub fn install_list(&self, ticket: Ticket, prefix: &str, args: ListArgs, page: Page) {
        let mut state = self.lock();
        if !state.valid(&ticket) {
            return;
        }
        state.bytes += page_bytes(prefix, &page);
        let old = state
            .lists
            .entry(prefix.to_string())
            .or_default()
            .insert(args, page);
        if let Some(old) = old {
            state.bytes -= page_bytes(prefix, &old);
        }
        self.trim(&mut state);
    }

    /// Pins `keys` (and, with `everything`, every key) under `id` for at most `ttl`.
    /// Pinning an id twice is pinning it once.
    pub fn pin(&self, id: u128, keys: &[String], everything: bool, ttl: Duration) {
        let mut state = self.lock();
        if state.pins.contains_key(&id) {
            return;
        }
        let mut stripes = Vec::new();
        for key in keys {
            stripes.push(self.stripe(key));
            let above: Vec<&str> = folders_above(key).collect();
            stripes.extend(above.iter().map(|f| self.stripe(f)));
            if let Some(old) = state.objects.remove(key.as_str()) {
                state.bytes -= object_bytes(key, &old);
            }
            for folder in above {
                if let Some(pages) = state.lists.remove(folder) {
                    state.bytes -= pages.values().map(|p| page_bytes(folder, p)).sum::<usize>();
                }
            }
        }
        stripes.sort_unstable();
        stripes.dedup();
        for &s in &stripes {
            state.pinned[s] += 1;
            state.gens[s] += 1;
        }
        if everything {
            state.everything_pinned += 1;
            state.everything_gen += 1;
            state.objects.clear();
            state.lists.clear();
            state.bytes = 0;
        }
        let until = Instant::now() + ttl.min(MAX_PIN);
        state.next_expiry = Some(state.next_expiry.map_or(until, |at| at.min(until)));
        state.pins.insert(
            id,
            Pin {
                stripes,
                everything,
                until,
            },
        );
    }

    pub fn unpin(&self, id: u128) {
        self.lock().release(id);
    }

    /// How many entries are held (objects and listed pages).
    pub fn len(&self) -> usize {
        let state = self.lock();
        state.objects.len() + state.lists.values().map(HashMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the cache within its budget, dropping entries in no particular order.
    fn trim(&self, state: &mut State) {
        if state.bytes <= self.budget {
            return;
        }
        let target = self.budget - self.budget / 4;
        let keys: Vec<String> = state.objects.keys().cloned().collect();
        for key in keys {
            if state.bytes <= target {
                return;
            }
            if let Some(old) = state.objects.remove(&key) {
                state.bytes -= object_bytes(&key, &old);
            }
        }
        let folders: Vec<String> = state.lists.keys().cloned().collect();
        for folder in folders {
            if state.bytes <= target {
                return;
            }
            if let Some(pages) = state.lists.remove(&folder) {
                state.bytes -= pages
                    .values()
                    .map(|p| page_bytes(&folder, p))
                    .sum::<usize>();
            }
        }
    }
}

impl State {
    fn serving(&self) -> bool {
        self.serving_until
            .is_some_and(|until| Instant::now() < until)
    }

    fn valid(&self, t: &Ticket) -> bool {
        self.serving()
            && t.incarnation == self.incarnation
            && t.everything_gen == self.everything_gen
            && self.everything_pinned == 0
            && self.gens[t.stripe] == t.generation
            && self.pinned[t.stripe] == 0
    }

    fn release(&mut self, id: u128) {
        let Some(pin) = self.pins.remove(&id) else {
            return;
        };
        for s in pin.stripes {
            self.pinned[s] -= 1;
            self.gens[s] += 1;
        }
        if pin.everything {
            self.everything_pinned -= 1;
            self.everything_gen += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn obj(body: &str) -> Option<Object> {
        Some(Object {
            body: Bytes::from(body.to_string()),
            etag: format!("e-{body}"),
        })
    }

    fn serving() -> ReadCache {
        let cache = ReadCache::new(1 << 20);
        cache.serve_until(Some(Instant::now() + Duration::from_secs(60)));
        cache
    }

    /// A ticket that the rule under test says must be given.
    fn ticket(cache: &ReadCache, key: &str) -> Ticket {
        cache
            .ticket(key)
            .unwrap_or_else(|| panic!("no ticket for {key}: pinned or not serving"))
    }

    fn args() -> ListArgs {
        ListArgs {
            start_after: None,
            limit: 100,
            shallow: true,
            etags: false,
        }
    }

    #[test]
    fn an_installed_object_is_answered_until_it_is_pinned() {
        let cache = serving();
        let t = ticket(&cache, "a/t.json");
        cache.install_object(t, "a/t.json", obj("1"));
        let cached = cache.object("a/t.json").expect("answered from memory");
        assert_eq!(cached.expect("present").etag, "e-1");
        cache.pin(7, &["a/t.json".into()], false, Duration::from_secs(5));
        assert!(cache.object("a/t.json").is_none());
        // While pinned, nothing is installed for it.
        assert!(cache.ticket("a/t.json").is_none());
        cache.unpin(7);
        let t = ticket(&cache, "a/t.json");
        cache.install_object(t, "a/t.json", None);
        assert!(
            matches!(cache.object("a/t.json"), Some(None)),
            "known absent"
        );
    }

    #[test]
    fn a_read_that_overlapped_a_write_is_not_kept() {
        let cache = serving();
        // The read takes its ticket, the writer pins, writes and unpins, then the read's
        // (old) answer arrives.
        let t = ticket(&cache, "a/t.json");
        cache.pin(1, &["a/t.json".into()], false, Duration::from_secs(5));
        cache.unpin(1);
        cache.install_object(t, "a/t.json", obj("old"));
        assert!(cache.object("a/t.json").is_none());
    }

    #[test]
    fn a_write_below_a_folder_drops_its_listings_and_stops_their_installs() {
        let cache = serving();
        let t = ticket(&cache, "a/");
        cache.install_list(t, "a/", args(), Page::default());
        assert!(cache.list("a/", &args()).is_some());
        let late = ticket(&cache, "a/");
        cache.pin(2, &["a/b/t.json".into()], false, Duration::from_secs(5));
        assert!(cache.list("a/", &args()).is_none());
        cache.unpin(2);
        cache.install_list(late, "a/", args(), Page::default());
        assert!(cache.list("a/", &args()).is_none());
        // A write elsewhere leaves the folder's listing alone.
        let t = ticket(&cache, "a/");
        cache.install_list(t, "a/", args(), Page::default());
        cache.pin(3, &["z/t.json".into()], false, Duration::from_secs(5));
        assert!(cache.list("a/", &args()).is_some());
    }

    #[test]
    fn nothing_is_answered_outside_the_lease_and_a_clear_voids_tickets() {
        let cache = ReadCache::new(1 << 20);
        assert!(cache.ticket("k").is_none());
        cache.serve_until(Some(Instant::now() + Duration::from_secs(60)));
        let t = ticket(&cache, "k");
        cache.install_object(t, "k", obj("1"));
        cache.serve_until(Some(Instant::now()));
        assert!(cache.object("k").is_none());
        cache.serve_until(Some(Instant::now() + Duration::from_secs(60)));
        let t = ticket(&cache, "k");
        cache.clear();
        cache.install_object(t, "k", obj("2"));
        assert!(cache.object("k").is_none());
    }

    #[test]
    fn a_pin_whose_unpin_never_comes_expires() {
        let cache = serving();
        cache.pin(9, &["k".into()], false, Duration::from_millis(30));
        assert!(cache.ticket("k").is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.ticket("k").is_some());
    }

    #[test]
    fn pinning_everything_empties_the_cache_until_unpinned() {
        let cache = serving();
        let t = ticket(&cache, "k");
        cache.install_object(t, "k", obj("1"));
        cache.pin(4, &[], true, Duration::from_secs(5));
        assert!(cache.object("k").is_none());
        assert!(cache.ticket("other").is_none());
        cache.unpin(4);
        assert!(cache.ticket("other").is_some());
    }

    #[test]
    fn the_budget_is_kept() {
        let cache = ReadCache::new(10_000);
        cache.serve_until(Some(Instant::now() + Duration::from_secs(60)));
        for i in 0..1000 {
            let key = format!("k{i}");
            let t = ticket(&cache, &key);
            cache.install_object(t, &key, obj("0123456789"));
        }
        assert!(cache.len() < 200, "{} entries", cache.len());
    }
}
