//! Reading a recorded tensor back from a bundle, with an error that names
//! the artifact, the trace and the bundle when it cannot be read: what the
//! KL and the projections rest on.

use anyhow::Context;

use crate::bundle::Bundle;
use crate::pipeline::sides::SideName;
use crate::trace::Trace;

/// The raw tensor of artifact `a` of `t`, with the words that name it in
/// errors (`{what} `id` of trace `t` in the {side} bundle PATH`); an error
/// in those words when it cannot be read.
pub(super) fn raw_tensor<'b>(
    bundle: &'b Bundle,
    side: impl std::fmt::Display,
    t: &Trace,
    a: &crate::trace::Artifact,
    what: &str,
) -> anyhow::Result<(crate::trace::TensorRef<'b>, String)> {
    let what = format!(
        "{what} `{}` of trace `{}` in the {side} bundle {}",
        a.id,
        t.id,
        bundle.root().display()
    );
    let r = bundle
        .tensor(&t.id, &a.id)
        .with_context(|| format!("cannot read {what}"))?;
    Ok((r, what))
}

/// The raw `[positions, k]` tensor of artifact `a` of `t`, with `k` and
/// the words that name it in errors; an error naming the artifact, the
/// trace and the bundle when it cannot be read or is not a non-empty table.
pub(super) fn table<'b>(
    bundle: &'b Bundle,
    side: SideName,
    t: &Trace,
    a: &crate::trace::Artifact,
    what: &str,
) -> anyhow::Result<(crate::trace::TensorRef<'b>, usize, String)> {
    let (r, what) = raw_tensor(bundle, side, t, a, what)?;
    match r.shape {
        &[rows, k] if rows > 0 && k > 0 => Ok((r, k, what)),
        shape => anyhow::bail!("{what} has shape {shape:?}, not a non-empty [positions, k]"),
    }
}
