//! The formats: versioned, pickle-free encodings of a metadata, written by `encode` and read by
//! `decode`: `to_json`/`from_json` and `to_dict`/`from_dict`.
//!
//! # `to_json()`: format `"aitune_fast.sample_metadata"`, version 2
//!
//! One JSON object (the schema ships as `aitune_fast/schema/sample_metadata.schema.json`):
//!
//! ```text
//! {"format": "aitune_fast.sample_metadata", "version": 2, "class"?: "ExactSampleMetadata",
//!  "strict": bool, "llm_phase": str|null, "is_output": bool,
//!  "tensor_data": [{"locator": STEPS, "access_path": str, "semantic_path": LOSSY,
//!                   "shape": [int|str], "min_shape": [int], "max_shape": [int],
//!                   "dtype": "torch.<name>"|null, "bs_multipliers": [number|null], "is_output"?: bool}],
//!  "other_data":  [{"locator": STEPS, "access_path": str, "semantic_path": LOSSY,
//!                   "exact_value": EXACT, "value": LOSSY, "is_output"?: bool}]}
//! ```
//!
//! `access_path`, `semantic_path`, `value`, `shape`, `min_shape`, `max_shape`, `dtype`, `strict` and
//! `llm_phase` hold what `json.dumps(md.to_json_dict())` holds. The rest makes the round trip exact:
//! `STEPS` is the locator as `[[accessor, object_type], ...]` (object types 0 to 3, accessors as
//! `EXACT` values), `bs_multipliers` the batch-size multipliers (`null`: unknown), `exact_value` the
//! other value, and `is_output` whether locators point into outputs (per entry only where an entry
//! differs from the document). `access_path`, `semantic_path` and `value` are derived, and checked
//! only for syntax (and `access_path` for being a string) on reading. `class` names the class that
//! wrote the document, one of aitune_fast's own: written for an `ExactSampleMetadata` (also for a
//! user's subclass of it), absent for a `SampleMetadata` (also in documents written before the key
//! existed); `from_json` and `from_dict` return that class, whichever class they are called on (a
//! document never names a user's class: making one would need pickle's trust).
//!
//! `EXACT` values: `null`, `true`/`false`, integers (any size), finite floats (always with `.` or
//! `e`), strings, arrays (lists), objects (dicts whose keys are all strings not starting with
//! `$`), and one-key tagged objects: `{"$tuple": [...]}`, `{"$set": [...]}`, `{"$frozenset":
//! [...]}`, `{"$dict": [[key, value], ...]}` (any other dict), `{"$bytes": "hex"}`, `{"$complex":
//! [real, imag]}`, `{"$dtype": "torch.<name>"}`, `{"$float": "nan"|"inf"|"-inf"}` (a float that
//! is not finite, also as a part of `$complex` and as a multiplier), `{"$device": "<type>[:<index>]"}`
//! (a `torch.device`: its `str()`, read back by `torch.device` alone, refused unless the device made
//! has that `str()`) and `{"$enum": ["<module>.<QualName>", "<member>"]}` (a member of an Enum class
//! on the user's allow-list, `safe_enums`, read back only while the class is on it; nothing a
//! document names is imported).
//!
//! `$device` and `$enum` were added within version 2 (and the parts' version 1): a reader from
//! before them refuses a document holding one as an unknown tag, and nothing else changed, so no
//! reader misreads one.
//!
//! The text is RFC 8259 JSON: no `NaN`/`Infinity` tokens. The LOSSY `value` and `semantic_path`
//! write a float that is not finite as the string `"NaN"`, `"Infinity"` or `"-Infinity"` (where
//! `json.dumps(md.to_json_dict())` writes the bare token).
//!
//! Version 1 (written before) differs only there: it wrote floats that are not finite as the
//! tokens `NaN`, `Infinity` and `-Infinity` everywhere; `from_json` reads it too.
//!
//! # `to_dict()`
//!
//! The reference's keys. `strict` and `llm_phase` are plain values; `tensor_data` and `other_data`
//! are bytes holding compact UTF-8 JSON documents, each with its format and version:
//!
//! ```text
//! {"format": "aitune_fast.sample_metadata.tensor_data", "version": 1,
//!  "class"?: "ExactSampleMetadata", "is_output": bool,
//!  "batch_size": number, "paths": PATHS, "dtypes": ["torch.<name>"|null, ...],
//!  "tensors": [[path, dtype, sizes] | [path, dtype, shape, min_shape, max_shape, bs_multipliers]]}
//! {"format": "aitune_fast.sample_metadata.other_data", "version": 1, "is_output": bool,
//!  "paths": PATHS, "others": [[path, EXACT], ...]}
//! ```
//!
//! `PATHS` is the locators' prefix tree: rows `[parent, accessor, object_type]` numbered from 1,
//! each parent 0 (the empty path) or an earlier row; rows refer to it by number (0: the empty
//! path), and to `dtypes` by position. A tensor that saw one shape is its sizes alone (its
//! multipliers follow from `batch_size`). Any row may end with `is_output` where it differs from
//! the part's. `from_dict` also reads dicts written by the reference: its pickled bytes (which
//! begin with `0x80`) go to `aitune_fast._legacy`, a restricted unpickler.
//!
//! # Errors
//!
//! Reading raises `ValueError` for anything but a well-formed document of a known format and
//! version: syntax, unknown or missing or repeated keys, wrong types, mismatched list lengths,
//! repeated locators, repeated set elements or dict keys. Writing raises `TypeError` for values it
//! cannot encode exactly and `ValueError` for circular or too deeply nested ones, naming the locator.

pub const FORMAT: &str = "aitune_fast.sample_metadata";
pub const FORMAT_TENSORS: &str = "aitune_fast.sample_metadata.tensor_data";
pub const FORMAT_OTHERS: &str = "aitune_fast.sample_metadata.other_data";
/// The version `to_json()` writes (2: RFC 8259 JSON, no `NaN`/`Infinity` tokens); `from_json`
/// reads versions 1 to this one.
pub const JSON_VERSION: i64 = 2;
/// The version of the `to_dict()` parts (written and read).
pub const VERSION: i64 = 1;
/// The values of the optional `class` key: the class that wrote the document (written only for
/// `ExactSampleMetadata`; absent means `SampleMetadata`).
pub const CLASSES: [&str; 2] = ["SampleMetadata", "ExactSampleMetadata"];
