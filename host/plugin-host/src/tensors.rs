//! The `tensors` import: raw tensors stay in the host; a plugin opens a
//! handle and reads rows in chunks or asks for native reductions.

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::component::Resource;

use crate::bundle::Bundle;

use super::sandbox::SandboxState;
use super::wit::current::scorer::vauban::plugin::tensors::{Host, HostTensor};

/// Most f32 values one `read-rows` returns (4 MiB), so one call cannot make
/// the host copy a whole logits tensor into the guest.
pub const MAX_READ_VALUES: u64 = 1 << 20;

/// Where the raw tensors of the traces being scored come from.
pub trait TensorSource: Send + Sync {
    /// The shape and values (as f32) of `artifact` in `trace`, or why
    /// there are none.
    fn tensor(&self, trace: &str, artifact: &str) -> Result<(Vec<usize>, Vec<f32>), String>;
    /// How many values the tensor holds, when known without reading it (so
    /// a tensor over a plugin's budget is refused before it is decoded).
    fn numel(&self, _trace: &str, _artifact: &str) -> Option<u64> {
        None
    }
}

impl TensorSource for Bundle {
    fn tensor(&self, trace: &str, artifact: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
        let t = Bundle::tensor(self, trace, artifact).map_err(|e| e.to_string())?;
        Ok((t.shape.to_vec(), t.to_f32_vec()))
    }

    fn numel(&self, trace: &str, artifact: &str) -> Option<u64> {
        self.tensor_numel(trace, artifact)
    }
}

/// An open tensor, as `[rows, width]` f32.
pub struct TensorHandle {
    /// (trace, artifact): which entry of [`Opened`] it shares.
    key: (String, String),
    values: Arc<[f32]>,
    rows: u64,
    width: u64,
}

/// A decoded tensor: its shape and values, shared by every handle to it.
type Decoded = (Vec<usize>, Arc<[f32]>);

/// Most tensor handles a plugin may hold open at once.
pub const MAX_OPEN_HANDLES: usize = 4096;

/// The tensors a plugin holds open in the current call. Each is decoded
/// once and shared by every handle to it; its bytes are charged to the
/// plugin's memory cap (with its linear memory) while any handle to it is
/// open, and given back when the last one is dropped: host memory a plugin
/// causes is charged to it, however often it opens a tensor.
#[derive(Default)]
pub struct Opened {
    tensors: HashMap<(String, String), Decoded>,
    handles: usize,
}

fn bytes_of(values: &[f32]) -> u64 {
    std::mem::size_of_val(values) as u64
}

impl SandboxState {
    /// Forgets the call's tensors (their handles went with the call) and
    /// gives their memory back.
    pub(crate) fn close_tensors(&mut self) {
        let held: u64 = self.opened.tensors.values().map(|(_, v)| bytes_of(v)).sum();
        self.memory.release_host(held);
        self.opened.tensors.clear();
        self.opened.handles = 0;
    }
}

impl TensorHandle {
    fn new(key: (String, String), shape: &[usize], values: Arc<[f32]>) -> TensorHandle {
        let width = shape.last().copied().unwrap_or(1).max(1) as u64;
        let rows = values.len() as u64 / width;
        TensorHandle {
            key,
            values,
            rows,
            width,
        }
    }

    fn row(&self, r: u64) -> &[f32] {
        let w = self.width as usize;
        &self.values[r as usize * w..(r as usize + 1) * w]
    }
}

type Answer<T> = wasmtime::Result<Result<T, String>>;

impl HostTensor for SandboxState {
    fn rows(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.rows)
    }

    fn width(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.width)
    }

    fn read_rows(
        &mut self,
        this: Resource<TensorHandle>,
        start: u64,
        count: u64,
    ) -> Answer<Vec<f32>> {
        let t = self.table.get(&this)?;
        let end = start.checked_add(count).filter(|&e| e <= t.rows);
        let Some(end) = end else {
            return Ok(Err(format!(
                "rows {start}..{} are outside the tensor's {} rows",
                start.saturating_add(count),
                t.rows
            )));
        };
        if count.saturating_mul(t.width) > MAX_READ_VALUES {
            return Ok(Err(format!(
                "{count} rows of {} values exceed the {MAX_READ_VALUES}-value limit of one read; read in chunks",
                t.width
            )));
        }
        let w = t.width as usize;
        Ok(Ok(t.values[start as usize * w..end as usize * w].to_vec()))
    }

    fn project(&mut self, this: Resource<TensorHandle>, vector: Vec<f32>) -> Answer<Vec<f32>> {
        let t = self.table.get(&this)?;
        if vector.len() as u64 != t.width {
            return Ok(Err(format!(
                "the vector has {} values; the tensor's rows have {}",
                vector.len(),
                t.width
            )));
        }
        Ok(Ok((0..t.rows)
            .map(|r| {
                t.row(r)
                    .iter()
                    .zip(&vector)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>() as f32
            })
            .collect()))
    }

    fn top_k(&mut self, this: Resource<TensorHandle>, row: u64, k: u32) -> Answer<Vec<(u32, f32)>> {
        let t = self.table.get(&this)?;
        if row >= t.rows {
            return Ok(Err(format!(
                "row {row} is outside the tensor's {} rows",
                t.rows
            )));
        }
        let mut pairs: Vec<(u32, f32)> = t
            .row(row)
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u32, *v))
            .collect();
        // NaN sorts last: it is never a "largest" value.
        pairs.sort_by(|a, b| {
            b.1.partial_cmp(&a.1)
                .unwrap_or_else(|| a.1.is_nan().cmp(&b.1.is_nan()))
        });
        pairs.truncate(k as usize);
        Ok(Ok(pairs))
    }

    fn logsumexp(&mut self, this: Resource<TensorHandle>) -> Answer<Vec<f32>> {
        let t = self.table.get(&this)?;
        Ok(Ok((0..t.rows).map(|r| logsumexp(t.row(r))).collect()))
    }

    fn drop(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<()> {
        let handle = self.table.delete(this)?;
        self.opened.handles = self.opened.handles.saturating_sub(1);
        // The last handle to a tensor: the host lets go of it.
        let last = Arc::strong_count(&handle.values) == 2;
        drop(handle.values);
        if last && let Some((_, values)) = self.opened.tensors.remove(&handle.key) {
            self.memory.release_host(bytes_of(&values));
        }
        Ok(())
    }
}

impl Host for SandboxState {
    fn open(&mut self, trace_id: String, artifact_id: String) -> Answer<Resource<TensorHandle>> {
        let Some(source) = &self.tensors else {
            return Ok(Err("no tensors are available to this call".into()));
        };
        if !self.open_traces.contains(&trace_id) {
            return Ok(Err(format!(
                "trace {trace_id:?} is not in the current batch"
            )));
        }
        if self.opened.handles >= MAX_OPEN_HANDLES {
            return Ok(Err(format!(
                "{MAX_OPEN_HANDLES} tensor handles are open; drop one before opening another"
            )));
        }
        let key = (trace_id, artifact_id);
        let (shape, values) = match self.opened.tensors.get(&key) {
            Some((shape, values)) => (shape.clone(), values.clone()),
            None => {
                let over = |why: String| format!("cannot open {}/{}: {why}", key.0, key.1);
                // Refused before decoding when the size is known up front.
                if let Some(n) = source.numel(&key.0, &key.1) {
                    let bytes = n.saturating_mul(std::mem::size_of::<f32>() as u64);
                    if let Err(why) = self.memory.charge_host(bytes) {
                        return Ok(Err(over(why)));
                    }
                    self.memory.release_host(bytes);
                }
                let (shape, values) = match source.tensor(&key.0, &key.1) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(e)),
                };
                if let Err(why) = self.memory.charge_host(bytes_of(&values)) {
                    return Ok(Err(over(why)));
                }
                let values: Arc<[f32]> = values.into();
                self.opened
                    .tensors
                    .insert(key.clone(), (shape.clone(), values.clone()));
                (shape, values)
            }
        };
        let handle = self.table.push(TensorHandle::new(key, &shape, values))?;
        self.opened.handles += 1;
        Ok(Ok(handle))
    }
}

/// log Σ exp(x), stable; NaN if any value is NaN.
pub fn logsumexp(row: &[f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = row.iter().map(|v| f64::from(v - max).exp()).sum();
    (f64::from(max) + sum.ln()) as f32
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::sandbox::SandboxOptions;

    /// A 1000 x 256 tensor (1 MB of f32), counting how often it is decoded.
    struct Counting(AtomicUsize);

    impl TensorSource for Counting {
        fn tensor(&self, _: &str, _: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok((vec![1000, 256], vec![0.5; 256_000]))
        }
        fn numel(&self, _: &str, a: &str) -> Option<u64> {
            // Artifact "unsized" does not say its size up front.
            (a != "unsized").then_some(256_000)
        }
    }

    fn state(memory_bytes: u64) -> (SandboxState, Arc<Counting>) {
        let mut s = SandboxState::new(&SandboxOptions {
            memory_bytes,
            ..Default::default()
        })
        .unwrap();
        let source = Arc::new(Counting(AtomicUsize::new(0)));
        s.tensors = Some(source.clone());
        s.open_traces = vec!["t".into()];
        (s, source)
    }

    #[test]
    fn reopening_a_tensor_shares_it_and_charges_it_once() {
        let (mut s, source) = state(256 << 20);
        for _ in 0..100 {
            let h = Host::open(&mut s, "t".into(), "a".into()).unwrap().unwrap();
            assert_eq!(
                HostTensor::rows(&mut s, Resource::new_borrow(h.rep())).unwrap(),
                1000
            );
        }
        assert_eq!(source.0.load(Ordering::Relaxed), 1, "decoded once");
        assert_eq!(s.memory.host_bytes(), 1_024_000);
    }

    #[test]
    fn closing_the_last_handle_gives_the_bytes_back() {
        // A budget of 1.5 tensors: open, close, open another, many times.
        let (mut s, _) = state(1_536_000);
        for i in 0..50 {
            let a = Host::open(&mut s, "t".into(), format!("a{i}"))
                .unwrap()
                .unwrap();
            let b = Host::open(&mut s, "t".into(), format!("a{i}"))
                .unwrap()
                .unwrap();
            HostTensor::drop(&mut s, a).unwrap();
            assert_eq!(
                s.memory.host_bytes(),
                1_024_000,
                "still held by the second handle"
            );
            HostTensor::drop(&mut s, b).unwrap();
            assert_eq!(s.memory.host_bytes(), 0);
        }
    }

    #[test]
    fn a_tensor_over_the_budget_is_refused_before_it_is_decoded() {
        let (mut s, source) = state(512 << 10);
        for _ in 0..10 {
            assert!(Host::open(&mut s, "t".into(), "a".into()).unwrap().is_err());
        }
        assert_eq!(source.0.load(Ordering::Relaxed), 0, "never decoded");
        // Without a size up front, it is decoded once, then refused.
        assert!(
            Host::open(&mut s, "t".into(), "unsized".into())
                .unwrap()
                .is_err()
        );
        assert_eq!(source.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn host_bytes_and_open_handles_are_bounded() {
        // A budget below one tensor: the open is refused, with the reason.
        let (mut s, _) = state(512 << 10);
        let e = Host::open(&mut s, "t".into(), "a".into())
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("pass the plugin's memory limit of 524288"),
            "{e}"
        );
        assert_eq!(s.memory.host_bytes(), 0);
        // Handles: the cap, then a refusal; dropping one frees a slot.
        let (mut s, _) = state(256 << 20);
        let mut last = None;
        for _ in 0..MAX_OPEN_HANDLES {
            last = Some(Host::open(&mut s, "t".into(), "a".into()).unwrap().unwrap());
        }
        let e = Host::open(&mut s, "t".into(), "a".into())
            .unwrap()
            .unwrap_err();
        assert!(e.contains("tensor handles are open"), "{e}");
        HostTensor::drop(&mut s, last.unwrap()).unwrap();
        assert!(Host::open(&mut s, "t".into(), "a".into()).unwrap().is_ok());
    }

    #[test]
    fn logsumexp_is_stable_and_exact() {
        let v = [1000.0f32, 1000.0];
        assert!((logsumexp(&v) - (1000.0 + 2f32.ln())).abs() < 1e-3);
        let w = [0.0f32, 1.0, 2.0];
        let direct = (1.0f64 + 1f64.exp() + 2f64.exp()).ln() as f32;
        assert!((logsumexp(&w) - direct).abs() < 1e-6);
    }
}
