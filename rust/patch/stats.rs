//! Dispatch statistics (`aitune_fast.dispatch_stats`), opt in: per tuned module, its calls, the
//! hits of each backend, its misses (the last miss's metadata kept, which holds no tensors), the
//! calls whose backend the core did not pick, and the path's own time per call (the native call
//! less the time inside the backend), in a fixed log-scale histogram plus an exact maximum.
//!
//! Off (the default), a call costs one relaxed atomic load (`on()`). On, the records live here,
//! keyed by the module's address and checked through a weak reference to it, so that a dead
//! module's address taken by a new object never inherits its counts. The lock is held only while
//! no Python code can run: no allocation of a Python object (a collection could run a finalizer
//! that makes a tuned call), no release of one that may be the last reference; what a record
//! drops is dropped after the lock is released.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use hashbrown::HashMap;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyWeakrefMethods, PyWeakrefReference};

/// Tuned modules with a record; a new module beyond it is not recorded (the records of dead
/// modules are dropped whenever a new module is recorded).
pub const MAX_MODULES: usize = 4096;
/// Backends with a hit count per module; a hit on a new backend beyond it counts as `other`.
pub const MAX_BACKENDS: usize = 1024;
/// The histogram: 2**SUB_BITS buckets per power of two (each at most 1/8 of its values wide),
/// up to 2**TOP_BITS ns (about 18 minutes; longer calls land in the last bucket).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const TOP_BITS: u32 = 40;
const BUCKETS: usize = (TOP_BITS - SUB_BITS + 2) as usize * SUB;

static ON: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// ns this thread spent inside backends, as `backend_time` measured them (nested tuned calls'
    /// own measures are overwritten by the outer one's).
    static BACKEND_NS: Cell<u64> = const { Cell::new(0) };
}

/// Whether statistics are collected.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// `f()`, the backend's own work (its `_infer`, the module call, or stock code run in their
/// place), timed where statistics are on: that time is not the path's.
#[inline]
pub fn backend_time<T>(f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let before = BACKEND_NS.with(Cell::get);
    let start = Instant::now();
    let out = f();
    let spent = nanos(start);
    BACKEND_NS.with(|ns| ns.set(before.wrapping_add(spent)));
    out
}

fn nanos(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// What a tuned call's lookup found.
pub enum Outcome<'py> {
    /// The core did not pick the backend (stock's code did, or the call failed before).
    Other,
    /// This backend serves the call.
    Hit(Bound<'py, PyAny>),
    /// No backend: the call's metadata.
    Miss(Bound<'py, PyAny>),
}

/// One tuned call being recorded: started where statistics were on when it began.
pub struct Recording {
    start: Instant,
    backend_ns: u64,
}

impl Recording {
    #[inline]
    pub fn start() -> Option<Self> {
        on().then(|| Self {
            start: Instant::now(),
            backend_ns: BACKEND_NS.with(Cell::get),
        })
    }

    /// The call done: counted in `tuned`'s record.
    pub fn finish(self, tuned: &Bound<'_, PyAny>, outcome: &Outcome<'_>) {
        let total = nanos(self.start);
        let inside = BACKEND_NS.with(Cell::get).wrapping_sub(self.backend_ns);
        record(tuned, outcome, total.saturating_sub(inside));
    }
}

struct BackendHits {
    id: usize,
    backend: Py<PyWeakrefReference>,
    hits: u64,
}

struct Record {
    module: Py<PyWeakrefReference>,
    calls: u64,
    other: u64,
    misses: u64,
    backends: Vec<BackendHits>,
    last_miss: Option<Py<PyAny>>,
    histogram: Box<[u64; BUCKETS]>,
    max_ns: u64,
}

/// What the records dropped, released once the lock is not held.
#[derive(Default)]
struct Garbage {
    records: Vec<Record>,
    objects: Vec<Py<PyAny>>,
}

type Records = HashMap<usize, Record, foldhash::fast::FixedState>;

static RECORDS: Mutex<Option<Records>> = Mutex::new(None);

fn records() -> MutexGuard<'static, Option<Records>> {
    // a panic while it was held left plain counters behind: still usable
    RECORDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `weak` still refers to `obj`.
fn refers_to(weak: &Py<PyWeakrefReference>, obj: &Bound<'_, PyAny>) -> bool {
    // `obj` is alive (the caller holds it): the reference `upgrade` makes is never the last one
    weak.bind(obj.py()).upgrade().is_some_and(|o| o.is(obj))
}

fn bucket(ns: u64) -> usize {
    let ns = ns.min((1 << TOP_BITS) - 1);
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros();
    let sub = (ns >> (exp - SUB_BITS)) as usize & (SUB - 1);
    (exp - SUB_BITS + 1) as usize * SUB + sub
}

/// The largest value bucket `index` holds.
fn bucket_high(index: usize) -> u64 {
    if index < SUB {
        return index as u64;
    }
    let exp = (index / SUB) as u32 + SUB_BITS - 1;
    let low = (1u64 << exp) | ((index % SUB) as u64) << (exp - SUB_BITS);
    low + (1 << (exp - SUB_BITS)) - 1
}

/// What `record` needs made before it can count the call (outside the lock: it allocates).
enum Need {
    Done,
    Module,
    Backend,
}

fn record(tuned: &Bound<'_, PyAny>, outcome: &Outcome<'_>, own_ns: u64) {
    let mut module_ref = None;
    let mut backend_ref = None;
    let mut garbage = Garbage::default();
    loop {
        let need = {
            let mut guard = records();
            let records = guard.get_or_insert_with(Records::default);
            count(
                records,
                tuned,
                outcome,
                own_ns,
                &mut module_ref,
                &mut backend_ref,
                &mut garbage,
            )
        };
        let made = match need {
            Need::Done => break,
            Need::Module => PyWeakrefReference::new(tuned).map(|w| module_ref = Some(w.unbind())),
            Need::Backend => match outcome {
                Outcome::Hit(backend) => {
                    PyWeakrefReference::new(backend).map(|w| backend_ref = Some(w.unbind()))
                }
                _ => break,
            },
        };
        if made.is_err() {
            // an object without weak references: the module is not recorded, the backend is `other`
            if matches!(need, Need::Module) {
                break;
            }
            let other = Outcome::Other;
            let mut guard = records();
            let records = guard.get_or_insert_with(Records::default);
            count(
                records,
                tuned,
                &other,
                own_ns,
                &mut module_ref,
                &mut None,
                &mut garbage,
            );
            break;
        }
    }
    drop(garbage);
}

/// Counts the call in `tuned`'s record, or says what must be made first. Runs under the lock.
fn count(
    records: &mut Records,
    tuned: &Bound<'_, PyAny>,
    outcome: &Outcome<'_>,
    own_ns: u64,
    module_ref: &mut Option<Py<PyWeakrefReference>>,
    backend_ref: &mut Option<Py<PyWeakrefReference>>,
    garbage: &mut Garbage,
) -> Need {
    let id = tuned.as_ptr() as usize;
    let stale = records
        .get(&id)
        .is_some_and(|record| !refers_to(&record.module, tuned));
    if stale {
        // a dead module's address, now another object's
        garbage.records.extend(records.remove(&id));
    }
    if !records.contains_key(&id) {
        let Some(module) = module_ref.take() else {
            return Need::Module;
        };
        // a new module (rare): the records of dead ones dropped, with the last miss each kept
        let py = tuned.py();
        let dead: Vec<usize> = records
            .iter()
            .filter(|(_, r)| r.module.bind(py).upgrade().is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            garbage.records.extend(records.remove(&id));
        }
        if records.len() >= MAX_MODULES {
            garbage.objects.push(module.into_any());
            return Need::Done;
        }
        records.insert(
            id,
            Record {
                module,
                calls: 0,
                other: 0,
                misses: 0,
                backends: Vec::new(),
                last_miss: None,
                histogram: Box::new([0; BUCKETS]),
                max_ns: 0,
            },
        );
    }
    let Some(record) = records.get_mut(&id) else {
        return Need::Done;
    };
    match outcome {
        Outcome::Other => record.other += 1,
        Outcome::Miss(metadata) => {
            record.misses += 1;
            let kept = metadata.clone().unbind();
            garbage.objects.extend(record.last_miss.replace(kept));
        }
        Outcome::Hit(backend) => {
            if !hit(record, backend, backend_ref, garbage) {
                return Need::Backend;
            }
        }
    }
    record.calls += 1;
    record.histogram[bucket(own_ns)] += 1;
    record.max_ns = record.max_ns.max(own_ns);
    Need::Done
}

/// A hit counted on `backend`'s entry (made from `backend_ref`); false where that must be made.
fn hit(
    record: &mut Record,
    backend: &Bound<'_, PyAny>,
    backend_ref: &mut Option<Py<PyWeakrefReference>>,
    garbage: &mut Garbage,
) -> bool {
    let py = backend.py();
    let id = backend.as_ptr() as usize;
    if let Some(at) = record.backends.iter().position(|b| b.id == id) {
        if refers_to(&record.backends[at].backend, backend) {
            record.backends[at].hits += 1;
            return true;
        }
        let dead = record.backends.swap_remove(at); // a dead backend's address
        garbage.objects.push(dead.backend.into_any());
    }
    let Some(weak) = backend_ref.take() else {
        return false;
    };
    if record.backends.len() >= MAX_BACKENDS {
        let (live, dead): (Vec<_>, Vec<_>) = std::mem::take(&mut record.backends)
            .into_iter()
            .partition(|b| b.backend.bind(py).upgrade().is_some());
        record.backends = live;
        garbage
            .objects
            .extend(dead.into_iter().map(|b| b.backend.into_any()));
        if record.backends.len() >= MAX_BACKENDS {
            garbage.objects.push(weak.into_any());
            record.other += 1;
            return true;
        }
    }
    record.backends.push(BackendHits {
        id,
        backend: weak,
        hits: 1,
    });
    true
}

/// The share `q` of calls took at most this long (the bucket's largest value, at most the max).
fn percentile(record: &Record, q: f64) -> u64 {
    let timed: u64 = record.histogram.iter().sum();
    let rank = ((timed as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (index, n) in record.histogram.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_high(index).min(record.max_ns);
        }
    }
    record.max_ns
}

/// Switches collection on or off (`aitune_fast.configure(dispatch_stats=...)`).
#[pyfunction]
pub fn _set_dispatch_stats(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether collection is on.
#[pyfunction]
pub fn _dispatch_stats_on() -> bool {
    on()
}

/// `tuned`'s record as a dict (`calls`, `other`, `misses`, `hits`: a list of `(backend, hits)` of
/// the backends alive, `last_miss`: the last miss's metadata or None, `p50_ns`, `p99_ns`,
/// `max_ns`), or None where it has none.
#[pyfunction]
pub fn _dispatch_stats<'py>(tuned: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = tuned.py();
    let id = tuned.as_ptr() as usize;
    let copied = {
        let guard = records();
        let record = guard
            .as_ref()
            .and_then(|records| records.get(&id))
            .filter(|record| refers_to(&record.module, tuned));
        record.map(|record| {
            let backends: Vec<(Py<PyWeakrefReference>, u64)> = record
                .backends
                .iter()
                .map(|b| (b.backend.clone_ref(py), b.hits))
                .collect();
            let last_miss = record.last_miss.as_ref().map(|m| m.clone_ref(py));
            let times = [
                percentile(record, 0.5),
                percentile(record, 0.99),
                record.max_ns,
            ];
            (
                record.calls,
                record.other,
                record.misses,
                backends,
                last_miss,
                times,
            )
        })
    };
    let Some((calls, other, misses, backends, last_miss, times)) = copied else {
        return Ok(None);
    };
    let out = PyDict::new(py);
    out.set_item("calls", calls)?;
    out.set_item("other", other)?;
    out.set_item("misses", misses)?;
    let hits = PyList::empty(py);
    for (weak, n) in backends {
        if let Some(backend) = weak.bind(py).upgrade() {
            hits.append((backend, n))?;
        }
    }
    out.set_item("hits", hits)?;
    out.set_item("last_miss", last_miss)?;
    let timed = calls > 0;
    for (name, ns) in ["p50_ns", "p99_ns", "max_ns"].into_iter().zip(times) {
        out.set_item(name, timed.then_some(ns))?;
    }
    Ok(Some(out))
}

/// Drops `tuned`'s record: its counts start again from zero.
#[pyfunction]
pub fn _reset_dispatch_stats(tuned: &Bound<'_, PyAny>) {
    let id = tuned.as_ptr() as usize;
    let removed = records().as_mut().and_then(|records| records.remove(&id));
    drop(removed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_hold_their_values() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, (1 << 39) + 5, u64::MAX]) {
            let index = bucket(ns);
            assert!(index < BUCKETS && index >= last);
            last = index;
            assert!(bucket_high(index) >= ns.min((1 << TOP_BITS) - 1));
            assert!(index == 0 || bucket_high(index - 1) < ns.min((1 << TOP_BITS) - 1));
        }
    }
}
