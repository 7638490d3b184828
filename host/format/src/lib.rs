#![deny(missing_docs)]
//! vauban's file formats, shared by every other crate of the host:
//!
//! - [`trace`]: the evidence-bearing record of one run (artifacts, spans,
//!   capabilities, what is missing and why) and the rules it must obey;
//! - [`bundle`]: traces on disk with their raw tensors, content-hashed,
//!   verified and lazily loaded;
//! - [`evidence`]: access levels, claim strengths, and the findings a
//!   claim may cite (shared by the host, claim mappers and the report);
//! - [`document`]: the Model Behavior Change Report as data (`report.json`);
//! - [`intervention`]: interventions and intervention policies as values
//!   every executor applies the same way;
//! - [`judge`]: the questions scorers ask judges and the answers kept;
//! - [`input`]: bounded reads of user-supplied files;
//! - [`atomic_file`]: writes that never leave a half-written file;
//! - [`hash`]: sha256 of bytes and files;
//! - [`text`]: text made safe to print.
//!
//! Data only: serde types and their checks. Running models, plugins and
//! the command line live in other crates, which depend on this one.

pub mod atomic_file;
pub mod bundle;
pub mod document;
pub mod evidence;
pub mod hash;
pub mod input;
pub mod intervention;
pub mod judge;
pub mod text;
pub mod trace;
