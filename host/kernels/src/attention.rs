//! Causal self-attention for the CPU over per-sequence key/value caches,
//! with the rotary embedding applied on the way in.
//!
//! One call runs one layer of a ragged batch: each sequence brings its own
//! rows (new positions after what its cache holds), its own cache and its
//! own positions. The new keys and values are rotated and written into
//! the caches, then every query attends to its sequence's keys up to its
//! own position. Work is split by (sequence, key/value head), so the
//! query heads that share a key/value head (grouped-query attention) read
//! its keys and values once; a decode step of a batch is one call, not a
//! dozen tensor operations per sequence.
//!
//! The arithmetic follows the tensor form it replaces (scores, softmax,
//! then the weighted sum of values), so the two agree to f32 rounding
//! (`tests/attention.rs`). A cache may hold its keys and values as f16
//! ([`KvType::F16`]): half the memory and half the bytes each step reads,
//! at f16's rounding of every key and value (a relative 2^-11); the
//! arithmetic stays f32.

use std::ops::Range;

use half::f16;

use crate::Isa;
use crate::pool::Pool;
use crate::softmax::exp_shifted;

/// How a cache stores keys and values (`kv_cache` in a config: `f32` or
/// `f16`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    /// As computed: the cache adds no rounding.
    #[default]
    F32,
    /// Rounded to f16 on the way in (as llama.cpp's default cache). A key
    /// or value beyond f16's range (±65504) becomes infinite, and the
    /// attention output NaN: for such a model, keep f32.
    F16,
}

impl KvType {
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }

    /// Bytes one key or value element takes.
    pub fn size(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            _ => Err(format!("`{s}`: expected f32 or f16")),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How rotary embedding pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotary {
    /// Adjacent pairs `(2i, 2i + 1)` (GGUF llama layouts).
    Interleaved,
    /// Halves `(i, i + d/2)` (HF / NeoX layouts).
    Half,
}

/// How one layer scores a query against its keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scoring {
    pub rotary: Rotary,
    /// What multiplies `q·k` (`1/√head_dim` in most models; Gemma's
    /// `query_pre_attn_scalar^-½`).
    pub scale: f32,
    /// Scores capped smoothly as `cap · tanh(s / cap)` after scaling
    /// (Gemma 2's attention-logit soft-capping).
    pub softcap: Option<f32>,
    /// A sliding-window layer: a query sees the last `window` positions,
    /// itself included (a key `window` or more positions back is masked).
    pub window: Option<usize>,
}

impl Scoring {
    /// Causal attention over every earlier position, scaled by `1/√head_dim`.
    pub fn standard(rotary: Rotary, head_dim: usize) -> Scoring {
        Scoring {
            rotary,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            window: None,
        }
    }
}

/// The attention heads of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }
    fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}

/// The rotary angles' cosines and sines for every row of a pass,
/// `[rows][head_dim / 2]`, computed once and shared by every layer.
pub struct RopeTable {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl RopeTable {
    /// Angles `position · inv_freqs[i]` for each row's position.
    pub fn new(inv_freqs: &[f32], positions: impl IntoIterator<Item = usize>) -> Self {
        let mut table = RopeTable::empty(inv_freqs.len());
        table.extend(inv_freqs, positions, 1.0);
        table
    }

    /// A table of no rows, for rotating `2 · half` dimensions.
    pub fn empty(half: usize) -> Self {
        RopeTable {
            cos: Vec::new(),
            sin: Vec::new(),
            half,
        }
    }

    /// Appends rows at `positions` with their own frequencies (each
    /// sequence of a batch can run its own: LongRoPE), cos and sin scaled
    /// by `magnitude` (LongRoPE's attention factor; 1 otherwise).
    pub fn extend(
        &mut self,
        inv_freqs: &[f32],
        positions: impl IntoIterator<Item = usize>,
        magnitude: f32,
    ) {
        assert_eq!(inv_freqs.len(), self.half, "one frequency per rotated pair");
        for p in positions {
            for &f in inv_freqs {
                let angle = p as f32 * f;
                self.cos.push(angle.cos() * magnitude);
                self.sin.push(angle.sin() * magnitude);
            }
        }
    }

    /// Writes `x` rotated to the angles of `row` into `out`. A table
    /// narrower than the head rotates its first `2 · half` dimensions and
    /// copies the rest (partial rotary embedding: Phi-4-mini, NeoX).
    fn rotate(&self, style: Rotary, row: usize, x: &[f32], out: &mut [f32]) {
        let h = self.half;
        out[2 * h..].copy_from_slice(&x[2 * h..]);
        let (cos, sin) = (
            &self.cos[row * h..(row + 1) * h],
            &self.sin[row * h..(row + 1) * h],
        );
        match style {
            Rotary::Interleaved => {
                for i in 0..h {
                    let (a, b) = (x[2 * i], x[2 * i + 1]);
                    out[2 * i] = a * cos[i] - b * sin[i];
                    out[2 * i + 1] = a * sin[i] + b * cos[i];
                }
            }
            Rotary::Half => {
                for i in 0..h {
                    let (a, b) = (x[i], x[i + h]);
                    out[i] = a * cos[i] - b * sin[i];
                    out[i + h] = a * sin[i] + b * cos[i];
                }
            }
        }
    }
}

/// Query rows one task of a long prompt takes.
const ROWS_PER_TASK: usize = 16;

/// Positions a cache holds before its first growth.
const START_CAPACITY: usize = 256;

/// One sequence's keys and values at one layer, `[kv_heads][capacity][head_dim]`
/// each; the capacity doubles when a pass needs more.
#[derive(Debug, Clone)]
pub struct LayerCache {
    k: Buf,
    v: Buf,
    capacity: usize,
}

/// A cache buffer in its element type.
#[derive(Debug, Clone)]
enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Buf {
    fn new(kind: KvType) -> Buf {
        match kind {
            KvType::F32 => Buf::F32(Vec::new()),
            KvType::F16 => Buf::F16(Vec::new()),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Buf::F32(b) => b.len() * 4,
            Buf::F16(b) => b.len() * 2,
        }
    }

    /// A buffer of `cap` positions per head holding the first `len` of this
    /// one's (`old_cap` per head).
    fn grown(&self, h: &Heads, old_cap: usize, len: usize, cap: usize) -> Buf {
        fn grow<T: Copy + Default>(
            b: &[T],
            h: &Heads,
            old_cap: usize,
            len: usize,
            cap: usize,
        ) -> Vec<T> {
            let d = h.head_dim;
            let mut grown = vec![T::default(); h.kv_heads * cap * d];
            for kh in 0..h.kv_heads {
                let old = &b[kh * old_cap * d..][..len * d];
                grown[kh * cap * d..][..len * d].copy_from_slice(old);
            }
            grown
        }
        match self {
            Buf::F32(b) => Buf::F32(grow(b, h, old_cap, len, cap)),
            Buf::F16(b) => Buf::F16(grow(b, h, old_cap, len, cap)),
        }
    }

    /// Writes `x` at element `at`, rounded to the buffer's type.
    fn store(&mut self, at: usize, x: &[f32]) {
        match self {
            Buf::F32(b) => b[at..at + x.len()].copy_from_slice(x),
            Buf::F16(b) => {
                for (o, &x) in b[at..at + x.len()].iter_mut().zip(x) {
                    *o = f16::from_f32(x);
                }
            }
        }
    }
}

impl LayerCache {
    /// An empty cache that stores `kind`.
    pub fn new(kind: KvType) -> LayerCache {
        LayerCache {
            k: Buf::new(kind),
            v: Buf::new(kind),
            capacity: 0,
        }
    }

    /// What this cache stores.
    pub fn kind(&self) -> KvType {
        match self.k {
            Buf::F32(_) => KvType::F32,
            Buf::F16(_) => KvType::F16,
        }
    }

    /// Bytes allocated (the capacity, not just the positions held).
    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }

    /// Room for `need` positions, keeping the first `len`.
    fn reserve(&mut self, h: &Heads, len: usize, need: usize) {
        if need <= self.capacity {
            return;
        }
        let cap = need.max(2 * self.capacity).max(START_CAPACITY);
        self.k = self.k.grown(h, self.capacity, len, cap);
        self.v = self.v.grown(h, self.capacity, len, cap);
        self.capacity = cap;
    }
}

impl Default for LayerCache {
    fn default() -> Self {
        LayerCache::new(KvType::F32)
    }
}

/// One sequence of a pass: rows `first..first + rows` of the pass's
/// matrices, at positions `offset..offset + rows`, after the `offset`
/// positions its cache holds.
pub struct SeqRows<'a> {
    pub first: usize,
    pub rows: usize,
    pub offset: usize,
    pub cache: &'a mut LayerCache,
}

/// One layer's attention for a ragged batch. `q` is `[rows, heads ·
/// head_dim]`, `k` and `v` are `[rows, kv_heads · head_dim]` (before the
/// rotary embedding; `table` holds each row's angles), `out` receives
/// `[rows, heads · head_dim]`. The new keys and values are written into
/// each sequence's cache; the caller advances the sequences' lengths.
///
/// # Panics
/// If a shape does not agree, or the sequences' rows do not tile the pass
/// in order (the first from row 0, each after the one before).
#[allow(clippy::too_many_arguments)]
pub fn attend(
    h: &Heads,
    scoring: &Scoring,
    table: &RopeTable,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seqs: &mut [SeqRows<'_>],
    out: &mut [f32],
) {
    let rows: usize = seqs.iter().map(|s| s.rows).sum();
    let (d, qw, kw) = (h.head_dim, h.q_width(), h.kv_width());
    assert_eq!(q.len(), rows * qw, "q is not rows × heads · head_dim");
    assert_eq!(k.len(), rows * kw, "k is not rows × kv_heads · head_dim");
    assert_eq!(v.len(), rows * kw, "v is not rows × kv_heads · head_dim");
    assert_eq!(out.len(), rows * qw, "out is not rows × heads · head_dim");
    assert!(
        table.half > 0 && table.half * 2 <= d,
        "the rotary table is not at most head_dim / 2 wide"
    );
    assert!(
        h.kv_heads > 0 && h.heads.is_multiple_of(h.kv_heads),
        "heads share kv heads evenly"
    );
    assert_eq!(
        table.cos.len(),
        rows * table.half,
        "the rotary table has one row per row of the pass"
    );
    // The sequences tile the pass in order: every task then writes rows no
    // other task writes (what makes the shared output sound).
    let mut next = 0;
    for s in seqs.iter() {
        assert_eq!(s.first, next, "the sequences' rows tile the pass in order");
        next += s.rows;
    }
    let style = scoring.rotary;
    // The new keys (rotated) and values into the caches.
    let mut rotated = vec![0f32; d];
    for s in seqs.iter_mut() {
        s.cache.reserve(h, s.offset, s.offset + s.rows);
        let cap = s.cache.capacity;
        for r in 0..s.rows {
            let (row, pos) = (s.first + r, s.offset + r);
            for kh in 0..h.kv_heads {
                let at = (kh * cap + pos) * d;
                let src = row * kw + kh * d;
                table.rotate(style, row, &k[src..src + d], &mut rotated);
                s.cache.k.store(at, &rotated);
                s.cache.v.store(at, &v[src..src + d]);
            }
        }
    }
    let seqs: Vec<(&LayerCache, Range<usize>, usize)> = seqs
        .iter()
        .map(|s| (&*s.cache, s.first..s.first + s.rows, s.offset))
        .collect();
    // Tasks of (sequence, key/value head, up to 16 query rows): a long
    // prompt splits into enough tasks to keep every thread busy (its
    // later rows attend to more keys, so equal tasks would not balance).
    //
    // A sequence of one row (a decode step) splits by query head instead:
    // a batch of one would otherwise be `kv_heads` tasks, three for
    // SmolLM2, which two threads share badly; the query heads of a
    // key/value head then read its keys from cache, not memory.
    let rep = h.heads / h.kv_heads;
    let tasks: Vec<(usize, Range<usize>, Range<usize>)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(s, (_, rows, _))| {
            let rows = rows.clone();
            let group = if rows.len() == 1 { 1 } else { rep };
            (0..h.heads).step_by(group).flat_map(move |qh| {
                rows.clone()
                    .step_by(ROWS_PER_TASK)
                    .map(move |r| (s, qh..qh + group, r..(r + ROWS_PER_TASK).min(rows.end)))
            })
        })
        .collect();
    let simd = Isa::detect().avx2();
    let shared = SharedOut(out.as_mut_ptr());
    Pool::global().run(tasks.len(), &|t| {
        let (s, ref heads, ref rows) = tasks[t];
        let (cache, ref all, offset) = seqs[s];
        let task = Task {
            h,
            style,
            table,
            q,
            heads: heads.clone(),
            kv_head: heads.start / rep,
            rows: rows.clone(),
            first: all.start,
            offset,
            capacity: cache.capacity,
            scoring,
            simd,
            out: &shared,
        };
        match (&cache.k, &cache.v) {
            (Buf::F32(k), Buf::F32(v)) => task.run(k, v),
            (Buf::F16(k), Buf::F16(v)) => task.run(k, v),
            _ => unreachable!("a cache's keys and values share one type"),
        }
    });
}

/// One task of [`attend`]: some query heads of one key/value head, for
/// some rows of one sequence.
struct Task<'a> {
    h: &'a Heads,
    style: Rotary,
    table: &'a RopeTable,
    q: &'a [f32],
    heads: Range<usize>,
    /// The key/value head `heads` read.
    kv_head: usize,
    rows: Range<usize>,
    /// The sequence's first row in the pass, at position `offset`.
    first: usize,
    offset: usize,
    capacity: usize,
    scoring: &'a Scoring,
    simd: bool,
    out: &'a SharedOut,
}

impl Task<'_> {
    fn run<T: Elem>(&self, keys: &[T], values: &[T]) {
        let (h, d) = (self.h, self.h.head_dim);
        let qw = h.q_width();
        let keys = &keys[self.kv_head * self.capacity * d..];
        let values = &values[self.kv_head * self.capacity * d..];
        let mut qr = vec![0f32; d];
        let mut acc = vec![0f32; d];
        let mut scores = Vec::with_capacity(self.offset + self.rows.len());
        for qh in self.heads.clone() {
            for row in self.rows.clone() {
                self.table
                    .rotate(self.style, row, &self.q[row * qw + qh * d..][..d], &mut qr);
                // Causal: position offset + i sees keys 0..=offset + i; a
                // sliding window only the last `window` of them.
                let seen = self.offset + (row - self.first) + 1;
                let from = match self.scoring.window {
                    Some(w) => seen.saturating_sub(w),
                    None => 0,
                };
                scores.resize(seen - from, 0.0);
                let (keys, values) = (&keys[from * d..seen * d], &values[from * d..seen * d]);
                key_scores(self.simd, &qr, keys, self.scoring.scale, &mut scores);
                if let Some(cap) = self.scoring.softcap {
                    for s in scores.iter_mut() {
                        *s = cap * (*s / cap).tanh();
                    }
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum = exp_shifted(self.simd, &mut scores, max);
                let inv = 1.0 / sum;
                for p in scores.iter_mut() {
                    *p *= inv;
                }
                weighted_sum(self.simd, &scores, values, &mut acc);
                // SAFETY: the sequences tile the pass (asserted in `attend`)
                // and the tasks split each sequence's rows by query heads
                // and row block, so this (row, query head) slice is this
                // task's alone; `attend` returns after every task.
                unsafe { self.out.write(row * qw + qh * d, &acc) };
            }
        }
    }
}

/// The output, written by every task at disjoint slices.
struct SharedOut(*mut f32);

// SAFETY: see the write in `attend`.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Copies `values` to `at..at + values.len()`.
    ///
    /// # Safety
    /// In bounds, and no other task writes or reads those elements meanwhile.
    unsafe fn write(&self, at: usize, values: &[f32]) {
        // SAFETY: forwarded from the caller.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.0.add(at), values.len()) }
    }
}

/// What the vector kernels need of a cache element: its eight-lane load on
/// x86-64, nothing elsewhere.
#[cfg(target_arch = "x86_64")]
use x86::Lanes as Vector;
#[cfg(not(target_arch = "x86_64"))]
trait Vector {}
#[cfg(not(target_arch = "x86_64"))]
impl<T> Vector for T {}

/// A cache element: f32 or f16.
trait Elem: Copy + Vector {
    fn to_f32(self) -> f32;
}

impl Elem for f32 {
    fn to_f32(self) -> f32 {
        self
    }
}

impl Elem for f16 {
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// `out[j] = scale · q·k_j` for the keys `k_j`, rows of `q.len()`.
fn key_scores<T: Elem>(simd: bool, q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd && q.len().is_multiple_of(8) {
        // SAFETY: `simd` is set only where AVX2, FMA and F16C were
        // detected; the widths are checked there.
        return unsafe { x86::scores(q, keys, scale, out) };
    }
    let _ = simd;
    portable_scores(q, keys, scale, out)
}

/// `out = Σ p_j · v_j` for the values `v_j`, rows of `out.len()`.
fn weighted_sum<T: Elem>(simd: bool, p: &[f32], values: &[T], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd && out.len().is_multiple_of(x86::SUM_WIDTH) {
        // SAFETY: as in `key_scores`.
        return unsafe { x86::weighted_sum(p, values, out) };
    }
    let _ = simd;
    portable_weighted_sum(p, values, out)
}

fn portable_scores<T: Elem>(q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
    for (o, k) in out.iter_mut().zip(keys.chunks_exact(q.len())) {
        *o = q.iter().zip(k).map(|(a, b)| a * b.to_f32()).sum::<f32>() * scale;
    }
}

fn portable_weighted_sum<T: Elem>(p: &[f32], values: &[T], out: &mut [f32]) {
    out.fill(0.0);
    for (&p, v) in p.iter().zip(values.chunks_exact(out.len())) {
        for (o, v) in out.iter_mut().zip(v) {
            *o += p * v.to_f32();
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::x86::hsum;

    /// Eight lanes of a cache element type, widened to f32.
    pub trait Lanes: Copy {
        /// # Safety
        /// Eight elements at `p` are readable, and the CPU has AVX2 and F16C.
        unsafe fn load8(p: *const Self) -> __m256;
    }

    impl Lanes for f32 {
        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            // SAFETY: forwarded from the caller.
            unsafe { _mm256_loadu_ps(p) }
        }
    }

    impl Lanes for half::f16 {
        #[inline(always)]
        unsafe fn load8(p: *const half::f16) -> __m256 {
            // SAFETY: forwarded from the caller.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
        }
    }

    /// `out[j] = scale · q·k_j`, four keys at a time so that one
    /// horizontal reduction serves four scores. `q.len()` is a multiple of 8.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores<T: Lanes>(q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
        let d = q.len();
        assert!(d.is_multiple_of(8) && keys.len() >= out.len() * d);
        let (pq, pk) = (q.as_ptr(), keys.as_ptr());
        let n = out.len();
        let mut j = 0;
        // SAFETY: every load reads 8 elements of row j..j + 4 (< n) of
        // `keys`, or of `q`, in bounds by the assert.
        unsafe {
            while j + 4 <= n {
                let mut a = [_mm256_setzero_ps(); 4];
                for c in (0..d).step_by(8) {
                    let qv = _mm256_loadu_ps(pq.add(c));
                    for (r, a) in a.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(qv, T::load8(pk.add((j + r) * d + c)), *a);
                    }
                }
                let s01 = _mm256_hadd_ps(a[0], a[1]);
                let s23 = _mm256_hadd_ps(a[2], a[3]);
                let s = _mm256_hadd_ps(s01, s23);
                let four = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
                _mm_storeu_ps(
                    out.as_mut_ptr().add(j),
                    _mm_mul_ps(four, _mm_set1_ps(scale)),
                );
                j += 4;
            }
            while j < n {
                let mut a = _mm256_setzero_ps();
                for c in (0..d).step_by(8) {
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(c)), T::load8(pk.add(j * d + c)), a);
                }
                out[j] = hsum(a) * scale;
                j += 1;
            }
        }
    }

    /// Columns one sweep of [`weighted_sum`] keeps in registers.
    pub const SUM_WIDTH: usize = 32;

    /// `out = Σ p_j · v_j`, 32 columns at a time held in four registers over
    /// every value row. `out.len()` is a multiple of 32.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn weighted_sum<T: Lanes>(p: &[f32], values: &[T], out: &mut [f32]) {
        let d = out.len();
        assert!(d.is_multiple_of(SUM_WIDTH) && values.len() >= p.len() * d);
        let pv = values.as_ptr();
        for c in (0..d).step_by(SUM_WIDTH) {
            let mut a = [_mm256_setzero_ps(); 4];
            // SAFETY: row j < p.len() of `values`, columns c..c + 32 < d.
            unsafe {
                for (j, &w) in p.iter().enumerate() {
                    let w = _mm256_set1_ps(w);
                    let row = pv.add(j * d + c);
                    for (r, a) in a.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(w, T::load8(row.add(8 * r)), *a);
                    }
                }
                for (r, a) in a.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * r), *a);
                }
            }
        }
    }
}
