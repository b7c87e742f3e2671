"""Every AITune name the integration relies on, written once: AITune's modules, the names the patch swaps, the
entry points a switch gates, the code it waits for or refuses beside, and the releases it was made for."""

from __future__ import annotations

PACKAGE = "aitune"  # AITune's distribution and top-level package
# AITune's modules the integration reads or installs into
GLOBAL_CONTEXT = "aitune.global_context"
CONFIG = "aitune.torch.config"
LOCATOR = "aitune.torch.module.locator"
TENSOR_SPEC = "aitune.torch.module.tensor_spec"
SAMPLE_METADATA = "aitune.torch.module.sample_metadata"
EXACT_SAMPLE_METADATA = "aitune.torch.module.exact_sample_metadata"
TUNED_MODULE = "aitune.torch.module.tuned_module"
RECORDING_MODULE = "aitune.torch.module.recording_module"
WRAPPER_MODULE = "aitune.torch.module.wrapper_module"
FORWARD_SIGNATURE = "aitune.torch.module.forward_signature"
STORAGE_TASKS = "aitune.torch.checkpoint.storage_tasks"
TUNING = "aitune.torch.tuning"
BACKEND = "aitune.torch.backend.backend"
EAGER_BACKEND = "aitune.torch.backend.torch_eager"
INDUCTOR_JIT_BACKEND = "aitune.torch.backend.torch_inductor_jit_backend"
JIT_MODULE = "aitune.torch.jit.patched_module"
NVTX_ANNOTATION = "aitune.utils.monitoring.nvtx_annotation"
HARDWARE_METRICS = "aitune.utils.monitoring.hardware_metrics_annotation"
METRICS_SESSION = "aitune.utils.monitoring.setup_hardware_metrics"
METRICS_COLLECTOR = "aitune.utils.monitoring.hardware_metrics.collector"
BACKEND_CONTEXT = "aitune.utils.monitoring.context.backend_context"

# where AITune defines the names the patch swaps for aitune_fast's objects of the same names
DEFINITIONS: dict[str, tuple[str, ...]] = {
    LOCATOR: ("Locator", "ObjectType"),
    TENSOR_SPEC: ("TensorSpec", "InfoLevel"),
    SAMPLE_METADATA: ("SampleMetadata", "batch_tensor"),
    EXACT_SAMPLE_METADATA: ("ExactSampleMetadata",),
}
# the swapped classes whose objects are converted between AITune's and ours: metadata, locators, specs, object types
CONVERTED = ("SampleMetadata", "ExactSampleMetadata", "Locator", "TensorSpec", "ObjectType")

# AITune's entry points into its metadata code: while a switch runs, new calls wait there (`_quiescence`):
# (module, class or "" for a module-level function, attribute)
GATED: tuple[tuple[str, str, str], ...] = (
    (RECORDING_MODULE, "RecordingModule", "__call__"),
    (TUNED_MODULE, "TunedModule", "__call__"),
    (TUNED_MODULE, "TunedModule", "from_dict"),
    (TUNED_MODULE, "TunedModule", "to_dict"),
    (WRAPPER_MODULE, "Module", "tune"),
    (STORAGE_TASKS, "TorchSaveTask", "save"),
    (STORAGE_TASKS, "TorchLoadTask", "load"),
)
# more of AITune's code that holds a metadata between building it and storing or looking it up: a switch waits for
# the calls in it (and in the gated entries, and in the call path's own functions) to return
CALL_CODE: tuple[tuple[str, str, str], ...] = (
    (TUNED_MODULE, "TunedModule", "safe_call_backend"),
    (TUNED_MODULE, "TunedModule", "call_unique_backend"),
)
# the name every AITune loop that tunes a module calls (the module-tuning span of its report): a function whose
# code names it is tuning code, refused beside as LONG_CODE is (`Module.tune`, the JIT's `PatchedModule.tune`, ...)
TUNING_SPAN = "report_module_tune"
# work that holds metadata in local variables for long (tuning, checkpoint files): a switch refuses while it runs
LONG_CODE: tuple[tuple[str, str, str], ...] = (
    (TUNING, "", "tune"),
    (TUNING, "", "save"),
    (TUNING, "", "load"),
    (WRAPPER_MODULE, "Module", "tune"),
    (WRAPPER_MODULE, "Module", "from_dict"),
)

# AITune's Locator methods that act on aitune_fast's registry while patched
LOCATOR_REGISTRY_METHODS = ("register_user_type", "unregister_user_type", "ignore_type", "unignore_type", "find_leaves")
# the methods of AITune's classes that keep their own globals while patched (`_aitune.keep_stock_equality`)
EQUALITY_METHODS = ("__eq__", "__ne__", "__hash__")

# Every name the native call path (rust/patch/) reads of another library's objects, once, by the module whose source
# defines it (read from aitune 0.6.0, torch 2.8-2.10 and wrapt 2.0; "" for Python's own protocol and builtin methods,
# our own SampleMetadata's): tests/patch/test_names.py checks that the Rust reads these and no other, and that each
# library's installed source still has each of its names.
NATIVE_NAMES: dict[str, tuple[str, ...]] = {
    WRAPPER_MODULE: (
        "_self_state",
        "enable_recording",
        "_self_wrapper",
        "_self_orig_forward",
        "_self_proxy_forward",
        "_current_forward_pre_hooks",
        "_current_forward_hooks",
    ),
    TUNED_MODULE: (
        "_forward_signature",
        "_backend_func",
        "_module_name",
        "_unique_backend",
        "_backends",
        "_config",
        "SampleMetadata",
        "ERROR_NO_BACKEND_FOUND",
    ),
    CONFIG: ("strict_mode",),
    GLOBAL_CONTEXT: ("_lock", "_data_stack", "set"),
    BACKEND: ("infer", "_infer", "state", "name", "describe"),
    FORWARD_SIGNATURE: ("normalize",),
    BACKEND_CONTEXT: ("_method",),
    EAGER_BACKEND: ("_orig_module",),
    NVTX_ANNOTATION: ("nvtx", "_nvtx_annotation"),
    HARDWARE_METRICS: ("get_default_collector", "start_scope", "end_scope"),
    METRICS_SESSION: ("get_collector", "_should_collect", "_runtime_enabled", "_noop_collector"),
    "torch.nn.modules.module": (
        "forward",
        "_call_impl",
        "_compiled_call_impl",
        "_forward_hooks",
        "_forward_pre_hooks",
        "_backward_hooks",
        "_backward_pre_hooks",
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    ),
    "nvtx.nvtx": ("annotate",),
    "wrapt.wrappers": ("__wrapped__",),
    "": (
        "__call__",
        "__dict__",
        "__enter__",
        "__exit__",
        "__format__",
        "__func__",
        "__mro__",
        "__self__",
        "__setattr__",
        "__aitune_fast_version_probe__",  # looked up to find nothing (guard.rs)
        "append",
        "copy",
        "format",
        "from_inputs",
        "get",
        "pop",
        "strict",
        "release",
    ),
}

# the AITune releases the patch was made for (their metadata API, checkpoint layout and module names): [low, high)
SUPPORTED = ((0, 6, 0), (0, 7, 0))
SUPPORTED_TEXT = "aitune>=0.6.0,<0.7.0"


def is_aitune(name: str) -> bool:
    """Whether `name` is the name of an AITune module."""
    return name == PACKAGE or name.startswith(PACKAGE + ".")
