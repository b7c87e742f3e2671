//! The AITune patch's runtime, the top layer, mirroring `python/aitune_fast/patch/`: what runs
//! on every tuned call under `patch_aitune()` and the scans the switch makes.
//! - `call_path.rs`: `_CallPath`, a tuned call in one native call (`_call_path.py` builds it);
//! - `bind_plan.rs`: `_BindPlan`, a call shape's binding, kept;
//! - `caches.rs`: `_BindCache` and `_DescribeCache`, the path's caches (Python called on a miss);
//! - `guard.rs`: `_ClassGuard` and `_NameGuard`, whether a class (a module) still holds the code a
//!   step does in its place;
//! - `parts.rs`: the parts a `_CallPath` is built from, one per stock step it does in place;
//! - `stats.rs`: dispatch statistics (opt in), counted by the tuned call;
//! - `live.rs`: the switch's scans of live objects and frames (`_objects.py`, `_quiescence.py`).

mod bind_plan;
mod caches;
mod call_path;
mod guard;
mod live;
mod parts;
mod stats;

pub use bind_plan::BindPlan;
pub use caches::{BindCache, DescribeCache};
pub use call_path::{stock_step, CallPath};
pub use guard::{ClassGuard, NameGuard};
pub use live::{_frames_running, _gc_objects_but_tuples, _still_running};
pub use parts::{
    ContextPart, EagerPart, ForwardPart, InferPart, MetricsPart, ModuleCallPart, TunedCallPart,
};
pub use stats::{_dispatch_stats, _dispatch_stats_on, _reset_dispatch_stats, _set_dispatch_stats};
