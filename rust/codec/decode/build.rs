//! `Build`, the metadata being rebuilt from decoded entries: locator steps deduplicated into one
//! arena, specs and values in compact form, `is_output` resolved at the end.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasher;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::codec::error::{CodecError, CodecResult};

use crate::codec::shared::{dtype_named, guess_bs, mults_match, type_name};
use crate::metadata::{Compact, SampleMetadata, RANK_LIMIT_MESSAGE};
use crate::paths::{
    path_eq, py_int_hash, Accessor, Arena, Kind, Locator, PathIndex, SharedArena, Text,
};
use crate::tensor_spec::{dtype_id, multiplier, Dim, Spec, TensorSpec};

/// A step's accessor as read, before it becomes a node.
pub(super) enum Acc<'a, 'py> {
    Int(i64),
    Str(Cow<'a, str>),
    Obj(Bound<'py, PyAny>),
}

/// The dedup map: its keys are small integers (a node, a kind, an int step or a string's hash),
/// which foldhash hashes in a few instructions (std's SipHash cost more than the rest of a
/// lookup), from a per-process random seed so that crafted keys do not pile into one bucket.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A step of the previous locator read, so that the next one, which usually shares its prefix,
/// finds its nodes without a lookup.
pub(super) enum LastKey {
    Int(i64),
    Str(String),
    Never,
}

/// A node's Int children while they are exactly `0..next`, all of kind `kind`.
#[derive(Clone, Copy, Default)]
struct DenseChildren {
    next: u32,
    kind: u8,
}

/// Entry flags for `is_output`: not given (the document's), false, true.
pub(super) const OUT_DEFAULT: u8 = 0;

/// A tensor's sizes as read: its shape, the smallest and largest sizes seen and the batch-size
/// multipliers, one of each per axis (all four of equal length).
#[derive(Clone, Copy)]
pub(super) struct TensorDims<'a> {
    pub(super) shape: &'a [Dim],
    pub(super) min: &'a [i64],
    pub(super) max: &'a [i64],
    pub(super) mult: &'a [f64],
}

pub(super) struct Build<'py> {
    pub(super) py: Python<'py>,
    arena: Arena,
    /// `(parent, kind + 4 * accessor type, key hash)` -> node, for Str accessors and, once
    /// `indexed`, Int accessors too
    dedup: FastMap<(u32, u8, u64), u32>,
    /// per node, while not `indexed`: its Int children, which are exactly `0..next` of one kind
    dense: Vec<DenseChildren>,
    /// whether `dedup` holds every Int node (see `step_int`)
    indexed: bool,
    /// the previous locator's steps: `(kind, key, node)`
    pub(super) last: Vec<(Kind, LastKey, u32)>,
    /// whether equal paths always got the same node (no object accessors, no hash clashes)
    exact_nodes: bool,
    c: Compact,
    pub(super) t_nodes: Vec<u32>,
    t_out: Vec<u8>,
    learned: Vec<Option<Box<Spec>>>,
    n_learned: usize,
    bs: Option<f64>,
    pub(super) o_nodes: Vec<u32>,
    o_vals: Vec<Py<PyAny>>,
    o_out: Vec<u8>,
    pub(super) dtypes: HashMap<String, u16>,
    none_dtype: Option<u16>,
}

impl<'py> Build<'py> {
    pub(super) fn new(py: Python<'py>) -> Build<'py> {
        Build {
            py,
            arena: Arena::with_capacity(64),
            dedup: FastMap::default(),
            dense: Vec::new(),
            indexed: false,
            last: Vec::new(),
            exact_nodes: true,
            c: Compact::new_in(SharedArena::empty(py), false), // its arena is set by `finish`
            t_nodes: Vec::new(),
            t_out: Vec::new(),
            learned: Vec::new(),
            n_learned: 0,
            bs: None,
            o_nodes: Vec::new(),
            o_vals: Vec::new(),
            o_out: Vec::new(),
            dtypes: HashMap::new(),
            none_dtype: None,
        }
    }

    /// The node for Int step `v` below `parent`.
    ///
    /// Lists are written item by item, so a parent's Int children usually arrive as `0, 1, 2...`
    /// of one kind. While every parent's do, a new child `next` cannot exist yet and needs no
    /// lookup: a map of a million children, one cache miss per lookup, would cost more than the
    /// rest of the decoding. The first child that breaks the pattern puts every Int node made so
    /// far into `dedup` (once), and from then on each step is looked up.
    fn step_int(&mut self, parent: u32, v: i64, kind: Kind) -> CodecResult<u32> {
        if !self.indexed {
            if self.dense.len() <= parent as usize {
                self.dense
                    .resize(self.arena.len(), DenseChildren::default());
            }
            let d = self.dense[parent as usize];
            if v == i64::from(d.next) && (d.next == 0 || d.kind == kind as u8) && d.next < u32::MAX
            {
                let n = self
                    .arena
                    .push_hashed(parent, Accessor::Int(v), kind, py_int_hash(v))?;
                self.dense[parent as usize] = DenseChildren {
                    next: d.next + 1,
                    kind: kind as u8,
                };
                return Ok(n);
            }
            self.index_int_nodes();
        }
        let key = (parent, kind as u8, v as u64);
        if let Some(&n) = self.dedup.get(&key) {
            return Ok(n);
        }
        let n = self
            .arena
            .push_hashed(parent, Accessor::Int(v), kind, py_int_hash(v))?;
        self.dedup.insert(key, n);
        Ok(n)
    }

    /// Put every Int node into `dedup` (the first of equal ones wins, as it would have).
    fn index_int_nodes(&mut self) {
        for id in 1..self.arena.len() as u32 {
            let n = self.arena.node(id);
            if let Accessor::Int(x) = n.acc {
                self.dedup
                    .entry((n.parent, n.kind as u8, x as u64))
                    .or_insert(id);
            }
        }
        self.indexed = true;
        self.dense = Vec::new();
    }

    fn step_str(
        &mut self,
        parent: u32,
        s: &str,
        obj: Option<&Bound<'py, PyString>>,
        kind: Kind,
    ) -> CodecResult<u32> {
        let key = (parent, kind as u8 + 4, self.dedup.hasher().hash_one(s));
        let hit = self.dedup.get(&key).copied();
        if let Some(n) = hit {
            if let Accessor::Str(x) = &self.arena.node(n).acc {
                if x.bind(self.py).to_str().map(|t| t == s).unwrap_or(false) {
                    return Ok(n);
                }
            }
            self.exact_nodes = false;
        }
        let py_s = match obj {
            Some(o) => o.clone(),
            None => PyString::new(self.py, s),
        };
        let h = py_s.hash()?;
        let n = self
            .arena
            .push_hashed(parent, Accessor::Str(py_s.unbind()), kind, h)?;
        if hit.is_none() {
            self.dedup.insert(key, n);
        }
        Ok(n)
    }

    pub(super) fn step(&mut self, parent: u32, acc: Acc<'_, 'py>, kind: Kind) -> CodecResult<u32> {
        match acc {
            Acc::Int(v) => self.step_int(parent, v, kind),
            Acc::Str(s) => self.step_str(parent, &s, None, kind),
            Acc::Obj(o) => match Accessor::from_py(&o) {
                Accessor::Int(v) => self.step_int(parent, v, kind),
                Accessor::Str(s) => {
                    let s = s.into_bound(self.py);
                    match s.to_str() {
                        Ok(t) => {
                            let t = t.to_owned();
                            self.step_str(parent, &t, Some(&s), kind)
                        }
                        Err(_) => {
                            // a lone surrogate: no dedup key; equal paths are checked later
                            let h = s.hash()?;
                            self.exact_nodes = false;
                            Ok(self.arena.push_hashed(
                                parent,
                                Accessor::Str(s.unbind()),
                                kind,
                                h,
                            )?)
                        }
                    }
                }
                Accessor::Obj(o) => {
                    let o = o.into_bound(self.py);
                    let h = o.hash().map_err(|e| {
                        let msg =
                            format!("a locator accessor must be hashable, got {}", type_name(&o));
                        CodecError::refusing::<PyTypeError>(self.py, e, msg)
                    })?;
                    let acc = Accessor::Obj(o.clone().unbind());
                    let mut shown = Text::new();
                    if acc.format(self.py, &mut shown).is_err() {
                        return Err(CodecError::value(format!(
                            "the locator accessor {} cannot be displayed",
                            o.repr().map(|r| r.to_string()).unwrap_or_default()
                        )));
                    }
                    self.exact_nodes = false;
                    Ok(self.arena.push_hashed(parent, acc, kind, h)?)
                }
            },
        }
    }

    /// The dtype id of the torch dtype called `name` (a refusal, not yet placed, when there is
    /// none).
    pub(super) fn dtype_of_name(&mut self, name: &str) -> CodecResult<u16> {
        if let Some(&id) = self.dtypes.get(name) {
            return Ok(id);
        }
        let id = dtype_id(&dtype_named(self.py, name)?)?;
        self.dtypes.insert(name.to_owned(), id);
        Ok(id)
    }

    pub(super) fn dtype_none(&mut self) -> CodecResult<u16> {
        if let Some(id) = self.none_dtype {
            return Ok(id);
        }
        let id = dtype_id(&self.py.None().into_bound(self.py))?;
        self.none_dtype = Some(id);
        Ok(id)
    }

    /// Add a tensor.
    pub(super) fn add_tensor(
        &mut self,
        node: u32,
        out: u8,
        dims: TensorDims<'_>,
        dtype: u16,
    ) -> CodecResult<()> {
        let TensorDims {
            shape,
            min,
            max,
            mult,
        } = dims;
        let fresh = shape
            .iter()
            .zip(min.iter().zip(max))
            .all(|(d, (a, b))| matches!(d, Dim::Int(x) if x == a && x == b));
        self.t_nodes.push(node);
        self.t_out.push(out);
        if fresh {
            if self.bs.is_none() {
                if let Some(bs) = guess_bs(min, mult) {
                    if mults_match(min, mult, bs) {
                        self.bs = Some(bs);
                    }
                }
            }
            let ok = match self.bs {
                Some(bs) => mults_match(min, mult, bs),
                None => min.is_empty(),
            };
            if ok {
                self.learned.push(None);
                return self.push_tensor(node, min, dtype);
            }
        }
        self.push_tensor(node, max, dtype)?;
        self.learned.push(Some(Box::new(Spec {
            shape: shape.to_vec(),
            min: min.to_vec(),
            max: max.to_vec(),
            mult: mult.to_vec(),
            dtype,
        })));
        self.n_learned += 1;
        Ok(())
    }

    /// The compact item of a tensor (a refusal past the rank the storage holds).
    fn push_tensor(&mut self, node: u32, dims: &[i64], dtype: u16) -> CodecResult<()> {
        if !Compact::rank_fits(dims.len()) {
            return Err(CodecError::value(RANK_LIMIT_MESSAGE));
        }
        Ok(self.c.push_tensor(node, dims, dtype)?)
    }

    /// Add a tensor that saw one shape, `dims`, at batch size `bs`.
    pub(super) fn add_fresh(
        &mut self,
        node: u32,
        out: u8,
        dims: &[i64],
        dtype: u16,
        bs: f64,
    ) -> CodecResult<()> {
        let mine = *self.bs.get_or_insert(bs);
        if mine.to_bits() == bs.to_bits() || (mine.is_nan() && bs.is_nan()) {
            self.t_nodes.push(node);
            self.t_out.push(out);
            self.learned.push(None);
            return self.push_tensor(node, dims, dtype);
        }
        let shape: Vec<Dim> = dims.iter().map(|&d| Dim::Int(d)).collect();
        let mult: Vec<f64> = dims.iter().map(|&d| multiplier(d, bs)).collect();
        let seen = TensorDims {
            shape: &shape,
            min: dims,
            max: dims,
            mult: &mult,
        };
        self.add_tensor(node, out, seen, dtype)
    }

    pub(super) fn add_other(&mut self, node: u32, out: u8, value: Py<PyAny>) {
        self.o_nodes.push(node);
        self.o_out.push(out);
        self.o_vals.push(value);
    }

    /// Give the entries added since `t0`/`o0` that did not say, the document's `is_output`.
    pub(super) fn resolve_out(&mut self, t0: usize, o0: usize, is_output: bool) {
        let flag = if is_output { 2 } else { 1 };
        for f in self.t_out[t0..]
            .iter_mut()
            .chain(self.o_out[o0..].iter_mut())
        {
            if *f == OUT_DEFAULT {
                *f = flag;
            }
        }
    }

    fn find_dup(&self, nodes: &[u32]) -> CodecResult<Option<(usize, usize)>> {
        if self.exact_nodes {
            let mut seen: Vec<u32> = vec![u32::MAX; self.arena.len()];
            for (i, &n) in nodes.iter().enumerate() {
                let s = &mut seen[n as usize];
                if *s != u32::MAX {
                    return Ok(Some((*s as usize, i)));
                }
                *s = i as u32;
            }
            return Ok(None);
        }
        let mut index = PathIndex::with_capacity(nodes.len());
        for (i, &n) in nodes.iter().enumerate() {
            let h = self.arena.node(n).hash;
            let same = |j: usize| path_eq(self.py, &self.arena, nodes[j], &self.arena, n);
            if let Some(j) = index.find(h, same)? {
                return Ok(Some((j, i)));
            }
            index.insert(h, i);
        }
        Ok(None)
    }

    pub(super) fn finish(
        mut self,
        strict: bool,
        llm_phase: Option<Py<PyAny>>,
        default_out: bool,
        reject_duplicates: bool,
    ) -> CodecResult<SampleMetadata> {
        let py = self.py;
        let resolve = |f: u8| match f {
            1 => false,
            2 => true,
            _ => default_out,
        };
        let first = self
            .t_out
            .iter()
            .chain(&self.o_out)
            .map(|&f| resolve(f))
            .next()
            .unwrap_or(default_out);
        let uniform = self
            .t_out
            .iter()
            .chain(&self.o_out)
            .all(|&f| resolve(f) == first);
        let mut dups = false;
        for (list, nodes) in [
            ("tensor_data", &self.t_nodes),
            ("other_data", &self.o_nodes),
        ] {
            if let Some((i, j)) = self.find_dup(nodes)? {
                if reject_duplicates {
                    return Err(CodecError::value(format!(
                        "{list}[{i}] and {list}[{j}] have the same locator {:?}",
                        self.arena.display_path_lossy(py, nodes[j], default_out)
                    )));
                }
                dups = true;
            }
        }
        let bs = self.bs.unwrap_or(f64::NAN);
        let arena = SharedArena::new(py, std::mem::take(&mut self.arena))?;
        if uniform && !dups {
            let mut c = self.c;
            c.arena = arena;
            c.is_output = first;
            c.batch_size = bs;
            c.learned = if self.n_learned > 0 {
                self.learned
            } else {
                Vec::new()
            };
            c.others = self.o_nodes.into_iter().zip(self.o_vals).collect();
            return Ok(SampleMetadata::from_compact(c, strict, llm_phase));
        }
        // mixed `is_output`, or (legacy data only) repeated locators: hold Python pairs, as the
        // reference would
        let mut tensors = Vec::with_capacity(self.t_nodes.len());
        for i in 0..self.t_nodes.len() {
            let spec = match &self.learned[i] {
                Some(s) => (**s).clone(),
                None => Spec::fresh(self.c.dims_of(i), self.c.items[i].dtype, bs),
            };
            let loc = Bound::new(
                py,
                Locator::new_in(arena.clone_ref(py), self.t_nodes[i], resolve(self.t_out[i])),
            )?;
            let spec = Bound::new(py, TensorSpec::from_spec(py, &spec)?)?;
            tensors.push(PyTuple::new(py, [loc.into_any(), spec.into_any()])?);
        }
        let mut others = Vec::with_capacity(self.o_nodes.len());
        for (i, v) in self.o_vals.into_iter().enumerate() {
            let loc = Bound::new(
                py,
                Locator::new_in(arena.clone_ref(py), self.o_nodes[i], resolve(self.o_out[i])),
            )?;
            others.push(PyTuple::new(py, [loc.into_any(), v.into_bound(py)])?);
        }
        Ok(SampleMetadata::from_py_parts(
            PyTuple::new(py, tensors)?.into_any().unbind(),
            PyTuple::new(py, others)?.into_any().unbind(),
            strict,
            llm_phase,
        ))
    }
}
