//! The path arena: a prefix tree of `(parent, accessor, kind)` steps, each node carrying the hash
//! of its whole path, and the display, semantic and access forms of a path.

use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::interp::interp;
use pyo3::types::{PyString, PyTuple};

use super::accessor::{mix, Accessor, Kind};
use super::shared::SharedArena;
use super::text::Text;

pub const ROOT: u32 = 0;
const ROOT_HASH: u64 = 0x243F_6A88_85A3_08D3;

pub struct Node {
    pub parent: u32,
    pub depth: u32,
    pub kind: Kind,
    pub acc: Accessor,
    /// Hash of the whole path from the root to this node.
    pub hash: u64,
}

/// The display path of the last parent seen; see [`Arena::write_display_path_cached`].
#[derive(Default)]
pub struct DisplayCache {
    parent: Option<u32>,
    text: Text,
}

/// A prefix tree of paths. Node 0 is the empty path (the root object itself).
pub struct Arena {
    pub nodes: Vec<Node>,
    /// a walk went through a mapping's `items()` that may yield a key twice (any but an
    /// `OrderedDict`'s): the same path can then occur more than once
    pub may_repeat: bool,
    /// While a walk repeats an earlier walk's steps: that walk's arena and how many of its nodes
    /// this one has matched so far (`nodes` then holds only the root). See [`Arena::replaying`].
    replay: Option<(SharedArena, usize)>,
    /// The last arena this one was compared with node for node ([`Arena::twins`]), by its serial
    /// number (which keeps it alive no more than a later arena at its address is taken for it),
    /// and whether they agreed.
    twin: Mutex<Option<(u64, bool)>>,
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

/// Buffers of at most this many entries are kept for the next walk on a thread (node buffers
/// here; the metadata's, see `metadata/reuse.rs`, which lists everything a thread keeps).
pub const SPARE_BOUND: usize = 4096;

thread_local! {
    /// The node buffer of this thread's last dropped arena (empty, capacity kept): the next walk
    /// builds in it instead of allocating.
    static SPARE_NODES: std::cell::Cell<Option<Vec<Node>>> = const { std::cell::Cell::new(None) };
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.nodes.capacity() == 0 || self.nodes.capacity() > SPARE_BOUND {
            return;
        }
        let mut nodes = std::mem::take(&mut self.nodes);
        nodes.clear();
        let _ = SPARE_NODES.try_with(|s| s.set(Some(nodes)));
    }
}

impl Arena {
    /// An arena of `nodes` (a built one: not repeating another's steps unless `replay` says so).
    fn from_parts(nodes: Vec<Node>, replay: Option<(SharedArena, usize)>) -> Arena {
        Arena {
            nodes,
            may_repeat: false,
            replay,
            twin: Mutex::new(None),
        }
    }

    /// Node 0: the empty path.
    fn root() -> Node {
        Node {
            parent: u32::MAX,
            depth: 0,
            kind: Kind::Sequence,
            acc: Accessor::Int(0),
            hash: ROOT_HASH,
        }
    }

    pub fn new() -> Arena {
        Arena::from_parts(vec![Arena::root()], None)
    }

    /// An arena with no nodes at all, not even the root: a placeholder, never walked into.
    pub fn empty() -> Arena {
        Arena::from_parts(Vec::new(), None)
    }

    /// An arena with room for `n` steps, in the node buffer this thread's last dropped arena
    /// left (if it had one) rather than a fresh allocation.
    pub fn with_capacity(n: usize) -> Arena {
        let mut nodes = SPARE_NODES
            .try_with(|s| s.take())
            .ok()
            .flatten()
            .unwrap_or_default();
        nodes.reserve(n + 1);
        nodes.push(Arena::root());
        Arena::from_parts(nodes, None)
    }

    /// An empty arena (room for `n` steps) that, while the steps pushed are those of `template`
    /// in the same order, only counts them: [`Arena::finish`] then hands back `template` itself.
    /// Callers describe the same kind of call again and again, so most walks repeat the previous
    /// one's paths; this spares building, hashing and later freeing a copy of them.
    pub fn replaying(template: Option<SharedArena>, n: usize) -> Arena {
        match template.filter(|t| t.replay.is_none() && !t.nodes.is_empty()) {
            // no node buffer until the walk parts from the template (see `settle`)
            Some(t) => Arena::from_parts(Vec::new(), Some((t, 1))),
            None => Arena::with_capacity(n),
        }
    }

    /// The arena as built: `template` when every step repeated it and nothing more was pushed,
    /// otherwise a new one.
    pub fn finish(mut self, py: Python<'_>) -> PyResult<SharedArena> {
        if let Some((t, len)) = &self.replay {
            if *len == t.nodes.len() && t.may_repeat == self.may_repeat {
                return Ok(t.clone_ref(py));
            }
        }
        self.settle(py);
        SharedArena::new(py, self)
    }

    /// Stop repeating: copy the steps matched so far into `nodes`.
    pub fn settle(&mut self, py: Python<'_>) {
        if let Some((t, len)) = self.replay.take() {
            if self.nodes.is_empty() {
                self.nodes = std::mem::take(&mut Arena::with_capacity(t.nodes.len()).nodes);
            }
            self.nodes.truncate(1);
            self.nodes.extend(t.nodes[1..len].iter().map(|n| Node {
                parent: n.parent,
                depth: n.depth,
                kind: n.kind,
                acc: n.acc.clone_ref(py),
                hash: n.hash,
            }));
        }
    }

    /// Whether node `i` of `a` and node `i` of `b` have the same path, for every `i`: the same
    /// arena, or two whose nodes agree one for one (same parent, kind and hash, equal plain keys).
    /// A metadata decoded from JSON, compared with each call's metadata, compares its arena with
    /// the same call arena again and again (each walk shares the previous one's paths): the answer
    /// is remembered, so later comparisons cost a lock instead of a walk over the nodes. Only
    /// arenas whose keys are all plain ([`Accessor::is_plain`]) agree: their equality runs no
    /// Python code, so it cannot change between two asks.
    pub fn twins(py: Python<'_>, a: &SharedArena, b: &SharedArena) -> PyResult<bool> {
        if SharedArena::ptr_eq(a, b) {
            return Ok(true);
        }
        let remembered = |x: &Arena, y: &SharedArena| {
            x.twin.lock().ok().and_then(|t| match *t {
                Some((serial, same)) if serial == y.serial() => Some(same),
                _ => None,
            })
        };
        if let Some(same) = remembered(a, b).or_else(|| remembered(b, a)) {
            return Ok(same);
        }
        let same = a.replay.is_none()
            && b.replay.is_none()
            && a.may_repeat == b.may_repeat
            && a.nodes.len() == b.nodes.len()
            && nodes_agree(py, &a.nodes, &b.nodes)?;
        for (x, y) in [(a, b), (b, a)] {
            if let Ok(mut t) = x.twin.lock() {
                *t = Some((y.serial(), same));
            }
        }
        Ok(same)
    }

    /// Whether every key is plain ([`Accessor::is_plain`]): holding on to them keeps no user object
    /// alive.
    pub fn keys_are_plain(&self) -> bool {
        self.nodes.iter().all(|n| n.acc.is_plain())
    }

    pub fn len(&self) -> usize {
        match &self.replay {
            Some((_, len)) => *len,
            None => self.nodes.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }

    /// For the cycle collector: visit the keys the steps hold that are neither ints nor strs (the
    /// objects a cycle can run through). Called by the arena's own Python object (see `shared`).
    pub(super) fn traverse_objects(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for n in &self.nodes {
            if let Accessor::Obj(o) = &n.acc {
                visit.call(o)?;
            }
        }
        Ok(())
    }

    /// Append a step below `parent`, given the accessor's Python hash.
    #[inline]
    pub fn push_hashed(
        &mut self,
        parent: u32,
        acc: Accessor,
        kind: Kind,
        acc_hash: isize,
    ) -> PyResult<u32> {
        debug_assert!(self.replay.is_none(), "push_hashed while replaying");
        let p = &self.nodes[parent as usize];
        let hash = mix(mix(p.hash, acc_hash as u64), kind as u64 + 1);
        let depth = p.depth + 1;
        let id = u32::try_from(self.nodes.len()).map_err(|_| {
            PyValueError::new_err("too many paths in one structure (more than 4 billion)")
        })?;
        self.nodes.push(Node {
            parent,
            depth,
            kind,
            acc,
            hash,
        });
        Ok(id)
    }

    /// Append a step below `parent`; while replaying, count it if it is the template's next node.
    #[inline(always)]
    pub fn push(
        &mut self,
        py: Python<'_>,
        parent: u32,
        acc: Accessor,
        kind: Kind,
    ) -> PyResult<u32> {
        if let Some((t, len)) = &mut self.replay {
            if let Some(n) = t.nodes.get(*len) {
                if n.parent == parent && n.kind == kind && n.acc.is_plain_same(&acc) {
                    let id = *len as u32;
                    *len += 1;
                    acc.release(py);
                    return Ok(id);
                }
            }
        }
        self.push_new(py, parent, acc, kind)
    }

    /// The node of a leaf the walk met at `step` (below its parent), pushed as [`Arena::push`]
    /// does; the root for the walked object itself (no step).
    #[inline(always)]
    pub fn push_leaf(
        &mut self,
        py: Python<'_>,
        step: Option<(u32, Accessor, Kind)>,
    ) -> PyResult<u32> {
        match step {
            Some((parent, acc, kind)) => self.push(py, parent, acc, kind),
            None => Ok(ROOT),
        }
    }

    #[inline(never)]
    fn push_new(
        &mut self,
        py: Python<'_>,
        parent: u32,
        acc: Accessor,
        kind: Kind,
    ) -> PyResult<u32> {
        self.settle(py);
        let h = acc.py_hash(py)?;
        self.push_hashed(parent, acc, kind, h)
    }

    #[inline]
    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    /// The steps from the root down to `id`.
    pub fn chain(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.node(id).depth as usize);
        let mut cur = id;
        while cur != ROOT {
            out.push(cur);
            cur = self.node(cur).parent;
        }
        out.reverse();
        out
    }

    /// The first step's node of `id`'s path, if the path is not empty.
    pub fn root_step(&self, id: u32) -> Option<u32> {
        let mut cur = id;
        if cur == ROOT {
            return None;
        }
        loop {
            let p = self.node(cur).parent;
            if p == ROOT {
                return Some(cur);
            }
            cur = p;
        }
    }

    /// Copy the path `id` of `src` into this arena (sharing nothing), returning the new node.
    pub fn import(&mut self, py: Python<'_>, src: &Arena, id: u32) -> PyResult<u32> {
        let mut cur = ROOT;
        for step in src.chain(id) {
            let n = src.node(step);
            let acc = n.acc.clone_ref(py);
            let h = n.acc.py_hash(py)?;
            cur = self.push_hashed(cur, acc, n.kind, h)?;
        }
        Ok(cur)
    }

    /// `Locator.display_path`: a Python-like rendering of the path.
    pub fn display_path<'py>(
        &self,
        py: Python<'py>,
        id: u32,
        is_output: bool,
    ) -> PyResult<Bound<'py, PyString>> {
        let mut out = Text::new();
        self.write_display_path(py, id, is_output, &mut out)?;
        out.to_py(py)
    }

    /// `display_path` for error messages (lone surrogates shown as U+FFFD).
    pub fn display_path_lossy(&self, py: Python<'_>, id: u32, is_output: bool) -> String {
        let mut out = Text::new();
        match self.write_display_path(py, id, is_output, &mut out) {
            Ok(()) => out.lossy().into_owned(),
            Err(_) => String::new(),
        }
    }

    pub fn write_display_path(
        &self,
        py: Python<'_>,
        id: u32,
        is_output: bool,
        out: &mut Text,
    ) -> PyResult<()> {
        let start = out.len();
        if is_output {
            out.push_str("output");
        }
        for (index, step) in self.chain(id).into_iter().enumerate() {
            self.write_step(py, step, index, is_output, start, out)?;
        }
        Ok(())
    }

    /// Append step `step` (the `index`-th of its path) to a display path that began at `start`.
    fn write_step(
        &self,
        py: Python<'_>,
        step: u32,
        index: usize,
        is_output: bool,
        start: usize,
        out: &mut Text,
    ) -> PyResult<()> {
        let n = self.node(step);
        match n.kind {
            Kind::Dataclass | Kind::UserType => {
                out.push('.');
                n.acc.format(py, out)?;
            }
            _ if !is_output && index == 0 && is_identifier(py, &n.acc)? => {
                // the reference writes `str(accessor)` here, `format(accessor, "")` elsewhere
                out.truncate(start);
                match &n.acc {
                    Accessor::Obj(o) => out.push_py(&o.bind(py).str()?)?,
                    acc => acc.format(py, out)?,
                }
            }
            Kind::Sequence => {
                out.push('[');
                n.acc.format(py, out)?;
                out.push(']');
            }
            Kind::Dict => {
                if n.acc.is_str(py) {
                    out.push_str("[\"");
                    n.acc.format(py, out)?;
                    out.push_str("\"]");
                } else {
                    out.push('[');
                    n.acc.format(py, out)?;
                    out.push(']');
                }
            }
        }
        Ok(())
    }

    /// `display_path` for many nodes in walk order: the parent's text is kept between calls, so
    /// siblings cost one step each.
    pub fn write_display_path_cached(
        &self,
        py: Python<'_>,
        id: u32,
        is_output: bool,
        cache: &mut DisplayCache,
        out: &mut Text,
    ) -> PyResult<()> {
        let n = self.node(id);
        if id == ROOT || n.parent == ROOT {
            return self.write_display_path(py, id, is_output, out);
        }
        if cache.parent != Some(n.parent) {
            cache.text.clear();
            self.write_display_path(py, n.parent, is_output, &mut cache.text)?;
            cache.parent = Some(n.parent);
        }
        let start = out.len();
        out.push_text(&cache.text);
        self.write_step(py, id, n.depth as usize - 1, is_output, start, out)
    }

    /// `Locator.path`: the accessors alone; a single step is returned bare.
    pub fn semantic_path<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyAny>> {
        let chain = self.chain(id);
        if chain.len() == 1 {
            return Ok(self.node(chain[0]).acc.to_py(py));
        }
        Ok(PyTuple::new(py, chain.iter().map(|&s| self.node(s).acc.to_py(py)))?.into_any())
    }

    /// The reference's `_access_path`: a tuple of `(accessor, ObjectType)` pairs.
    pub fn access_path<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyTuple>> {
        let it = interp(py)?;
        let items = self
            .chain(id)
            .into_iter()
            .map(|s| {
                let n = self.node(s);
                PyTuple::new(
                    py,
                    [
                        n.acc.to_py(py),
                        it.object_types[n.kind as usize].bind(py).clone(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }
}

fn is_identifier(py: Python<'_>, acc: &Accessor) -> PyResult<bool> {
    match acc {
        Accessor::Int(_) => Ok(false),
        Accessor::Str(s) => {
            let s = s.bind(py);
            match s.to_str() {
                Ok(text) if text.is_ascii() => {
                    let b = text.as_bytes();
                    Ok(!b.is_empty()
                        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
                        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_'))
                }
                _ => s
                    .call_method0(pyo3::intern!(py, "isidentifier"))?
                    .is_truthy(),
            }
        }
        Accessor::Obj(o) => {
            let o = o.bind(py);
            if o.is_instance_of::<PyString>() {
                o.call_method0(pyo3::intern!(py, "isidentifier"))?
                    .is_truthy()
            } else {
                Ok(false)
            }
        }
    }
}

/// Whether two node lists agree one for one, with plain keys only (see [`Arena::twins`]).
fn nodes_agree(py: Python<'_>, a: &[Node], b: &[Node]) -> PyResult<bool> {
    for (x, y) in a.iter().zip(b) {
        if x.hash != y.hash
            || x.parent != y.parent
            || x.depth != y.depth
            || x.kind != y.kind
            || !x.acc.is_plain()
            || !y.acc.is_plain()
            || !x.acc.eq(py, &y.acc)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Equality of path `a` in `aa` and path `b` in `ba`, step by step from the leaves up.
pub fn path_eq(py: Python<'_>, aa: &Arena, mut a: u32, ba: &Arena, mut b: u32) -> PyResult<bool> {
    if std::ptr::eq(aa, ba) && a == b {
        return Ok(true);
    }
    loop {
        let (na, nb) = (aa.node(a), ba.node(b));
        if na.hash != nb.hash || na.depth != nb.depth {
            return Ok(false);
        }
        if a == ROOT {
            return Ok(b == ROOT);
        }
        if na.kind != nb.kind || !na.acc.eq(py, &nb.acc)? {
            return Ok(false);
        }
        a = na.parent;
        b = nb.parent;
        if std::ptr::eq(aa, ba) && a == b {
            return Ok(true);
        }
    }
}

pub fn hash_to_isize(h: u64) -> isize {
    let v = h as isize;
    if v == -1 {
        -2
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_hashes_depend_on_order_and_kind() {
        let a = mix(mix(ROOT_HASH, 1), 2);
        let b = mix(mix(ROOT_HASH, 2), 1);
        assert_ne!(a, b);
        assert_ne!(
            mix(mix(ROOT_HASH, 7), Kind::Sequence as u64 + 1),
            mix(mix(ROOT_HASH, 7), Kind::Dict as u64 + 1)
        );
    }

    #[test]
    fn hash_values_never_return_minus_one() {
        assert_eq!(hash_to_isize(u64::MAX), -2);
        assert_eq!(hash_to_isize(7), 7);
    }
}
