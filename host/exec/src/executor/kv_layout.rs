//! Where the sequences of a batched pass sit in a tensor-library KV cache,
//! kept on the host and written once for every library.
//!
//! A batch cache holds, per block, keys and values `[rows, kv_heads,
//! capacity, head_dim]`, preallocated. Every pass writes the same columns
//! for every row (`start..start + width`, width the longest row's tokens):
//! a shorter row's tokens come first and the rest of its columns are
//! holes, which no query attends to. So a pass is one slice write per
//! block and one attention call over the whole batch, however ragged the
//! rows. [`Layout`] records which column holds each position of each row;
//! [`Layout::plan`] turns a pass's rows into the positions (for the rotary
//! embedding) and masks the library runs, and [`Layout::commit`] records
//! the pass once it succeeded (a failed pass changes nothing). Host logic
//! only, built in every build, so its tests run without either library.

use std::borrow::Cow;

use crate::model::ModelError;
use crate::model::config::ModelConfig;

/// One row of a batch cache: the column of each position it holds, in
/// order, and that position's token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowLayout {
    pub cols: Vec<usize>,
    pub ids: Vec<u32>,
}

impl RowLayout {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    /// Whether its positions sit in columns `0..len` (no holes).
    pub fn is_compact(&self) -> bool {
        self.cols.iter().enumerate().all(|(i, &c)| i == c)
    }
}

/// The rows of a batch cache and the columns written so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Columns every row's passes have written (holes included).
    pub used: usize,
    pub rows: Vec<RowLayout>,
}

/// One row's part of a batched pass: its next tokens (none: the row sits
/// the pass out, as a finished sequence in a decode step) and where its
/// logits start.
#[derive(Debug, Clone, Copy)]
pub struct RowIds<'i> {
    pub ids: &'i [u32],
    /// Logits from this position of the row's tokens on.
    pub from: usize,
}

/// Which keys the queries of a pass attend to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attend {
    /// Every key: one query of one row, its whole past within the window.
    All,
    /// Each query the keys up to its own column: rows of equal length
    /// from column 0, within the window.
    Causal,
    /// As the mask says, `[rows, width, keys]` row-major (`true`: attends).
    Masked(Vec<bool>),
}

impl Attend {
    /// The mask written out, whatever the case, `[rows, width, keys]`.
    pub fn mask(self, rows: usize, width: usize, keys: usize) -> Vec<bool> {
        match self {
            Attend::Masked(m) => m,
            Attend::All => vec![true; rows * width * keys],
            Attend::Causal => (0..rows * width)
                .flat_map(|q| (0..keys).map(move |k| k <= keys - width + q % width))
                .collect(),
        }
    }
}

/// A batched pass, planned: what each row runs, where, at which positions.
#[derive(Debug)]
pub struct PassPlan<'i> {
    /// Each row's tokens: as asked or, where the pass crosses LongRoPE's
    /// switch ([`ModelConfig::reruns`]), the row's whole sequence again
    /// from position 0, its logits still this pass's.
    pub ids: Vec<Cow<'i, [u32]>>,
    /// Where each row's logits start, in its tokens of this pass.
    pub from: Vec<usize>,
    /// Whether the row forgets what it held (a rerun from position 0).
    pub reset: Vec<bool>,
    /// The first column the pass writes.
    pub start: usize,
    /// Columns written: the longest row's tokens (0: no row runs).
    pub width: usize,
    /// The position of each query, `[rows, width]` row-major; a hole's is
    /// its row's next position (it is never read).
    pub positions: Vec<i64>,
    /// Each row's LongRoPE set ([`ModelConfig::rope_set`]).
    pub rope_sets: Vec<usize>,
    /// Each row's positions before the pass (after a reset, 0).
    pub past: Vec<usize>,
}

impl PassPlan<'_> {
    /// Rows in the pass.
    pub fn rows(&self) -> usize {
        self.ids.len()
    }
    /// Columns the attention reads: every column up to the pass's last.
    pub fn keys(&self) -> usize {
        self.start + self.width
    }
    /// The rows' tokens side by side, `[rows, width]` row-major, holes
    /// filled with token 0 (their outputs are never read).
    pub fn tokens(&self) -> Vec<u32> {
        let mut tokens = vec![0; self.rows() * self.width];
        for (j, ids) in self.ids.iter().enumerate() {
            tokens[j * self.width..j * self.width + ids.len()].copy_from_slice(ids);
        }
        tokens
    }

    /// Where the logits are asked: the indices into the pass's `[rows ·
    /// width]` tokens, row after row, and how many each row has (none for
    /// a row that sat the pass out).
    pub fn logit_rows(&self) -> (Vec<usize>, Vec<Option<usize>>) {
        let mut picked = Vec::new();
        let mut counts = Vec::with_capacity(self.rows());
        for (j, ids) in self.ids.iter().enumerate() {
            let at = j * self.width;
            picked.extend(at + self.from[j]..at + ids.len());
            counts.push((!ids.is_empty()).then(|| ids.len() - self.from[j]));
        }
        (picked, counts)
    }

    /// Whether one set of rotary frequencies serves every row.
    pub fn one_rope_set(&self) -> Option<usize> {
        let first = *self.rope_sets.first()?;
        self.rope_sets.iter().all(|&s| s == first).then_some(first)
    }
}

/// Refuses a pass no model can run: no tokens, a token id outside the
/// vocabulary, more positions than the context holds after the `past`
/// ones (never handed to the library, whose errors can be panics). `from`
/// (where the logits start) must be a position of the pass.
pub fn check_pass(
    c: &ModelConfig,
    ids: &[u32],
    past: usize,
    from: usize,
) -> Result<(), ModelError> {
    if ids.is_empty() {
        return Err(ModelError::EmptyInput);
    }
    assert!(from < ids.len(), "logits from a position of the pass");
    if let Some(&id) = ids.iter().find(|&&i| i as usize >= c.vocab) {
        return Err(ModelError::TokenOutOfRange { id, vocab: c.vocab });
    }
    match c.context_length {
        Some(limit) if past + ids.len() > limit => Err(ModelError::ContextExceeded {
            needed: past + ids.len(),
            limit,
        }),
        _ => Ok(()),
    }
}

impl Layout {
    /// An empty layout of `rows` rows.
    pub fn new(rows: usize) -> Layout {
        Layout {
            used: 0,
            rows: vec![RowLayout::default(); rows],
        }
    }

    /// Checks each row's tokens against the model (see [`check_pass`]) and
    /// plans the pass; every row must be one of this layout's.
    pub fn plan<'i>(
        &self,
        c: &ModelConfig,
        rows: &[RowIds<'i>],
    ) -> Result<PassPlan<'i>, ModelError> {
        assert_eq!(rows.len(), self.rows.len(), "one entry per row");
        let (mut ids, mut from, mut reset, mut past) = (vec![], vec![], vec![], vec![]);
        for (row, held) in rows.iter().zip(&self.rows) {
            if row.ids.is_empty() {
                ids.push(Cow::Borrowed(row.ids));
                from.push(0);
                reset.push(false);
                past.push(held.len());
                continue;
            }
            check_pass(c, row.ids, held.len(), row.from)?;
            if c.reruns(held.len(), row.ids.len()) {
                let mut all = held.ids.clone();
                all.extend_from_slice(row.ids);
                from.push(held.len() + row.from);
                ids.push(Cow::Owned(all));
                reset.push(true);
                past.push(0);
            } else {
                ids.push(Cow::Borrowed(row.ids));
                from.push(row.from);
                reset.push(false);
                past.push(held.len());
            }
        }
        let width = ids.iter().map(|i| i.len()).max().unwrap_or(0);
        let mut positions = Vec::with_capacity(rows.len() * width);
        for p in &past {
            positions.extend((0..width).map(|t| (p + t) as i64));
        }
        let rope_sets = ids
            .iter()
            .zip(&past)
            .map(|(i, p)| c.rope_set(p + i.len()))
            .collect();
        Ok(PassPlan {
            ids,
            from,
            reset,
            start: self.used,
            width,
            positions,
            rope_sets,
            past,
        })
    }

    /// The positions each row holds once `plan` ran: its columns (a reset
    /// row's from this pass on only).
    fn row_after(&self, plan: &PassPlan<'_>, j: usize) -> (Vec<usize>, usize) {
        let held = &self.rows[j];
        let mut cols = match plan.reset[j] {
            true => Vec::new(),
            false => held.cols.clone(),
        };
        let n = plan.ids[j].len();
        cols.extend(plan.start..plan.start + n);
        (cols, n)
    }

    /// Which keys each query of `plan` attends to, in a layer whose
    /// window is `window` positions (none: every earlier position). A
    /// query attends to the keys of its row's positions up to its own
    /// (within the window); a hole's query attends only to its own
    /// column, so that it stays finite and no row reads it.
    pub fn attend(&self, plan: &PassPlan<'_>, window: Option<usize>) -> Attend {
        let (width, keys) = (plan.width, plan.keys());
        let within = window.is_none_or(|w| keys <= w);
        let full = (0..plan.rows()).all(|j| plan.ids[j].len() == width && !plan.reset[j]);
        if within && full && plan.rows() == 1 && width == 1 && self.rows[0].is_compact() {
            return Attend::All;
        }
        if within && full && plan.start == 0 {
            return Attend::Causal;
        }
        let mut mask = vec![false; plan.rows() * width * keys];
        for j in 0..plan.rows() {
            let (cols, n) = self.row_after(plan, j);
            let first_new = cols.len() - n;
            for t in 0..width {
                let at = (j * width + t) * keys;
                let row = &mut mask[at..at + keys];
                if t >= n {
                    row[plan.start + t] = true;
                    continue;
                }
                let q = first_new + t;
                let lowest = window.map_or(0, |w| (q + 1).saturating_sub(w));
                for &col in &cols[lowest..=q] {
                    row[col] = true;
                }
            }
        }
        Attend::Masked(mask)
    }

    /// Records `plan` as run: each row's new positions in their columns.
    pub fn commit(&mut self, plan: &PassPlan<'_>) {
        for j in 0..plan.rows() {
            let (cols, _) = self.row_after(plan, j);
            let row = &mut self.rows[j];
            if plan.reset[j] {
                row.ids.clear();
            }
            row.ids.extend_from_slice(&plan.ids[j]);
            row.cols = cols;
        }
        self.used = plan.keys();
    }

    /// Several one-row layouts as the rows of one, each row's positions in
    /// columns `0..len` (the caches' stacking copies them there).
    pub fn stack(rows: &[&Layout]) -> Layout {
        let rows: Vec<RowLayout> = rows
            .iter()
            .map(|l| {
                let r = &l.rows[0];
                RowLayout {
                    cols: (0..r.len()).collect(),
                    ids: r.ids.clone(),
                }
            })
            .collect();
        Layout {
            used: rows.iter().map(RowLayout::len).max().unwrap_or(0),
            rows,
        }
    }

    /// Row `j` alone, its positions in columns `0..len` (the caches'
    /// unstacking gathers them there).
    pub fn row(&self, j: usize) -> Layout {
        let r = &self.rows[j];
        Layout {
            used: r.len(),
            rows: vec![RowLayout {
                cols: (0..r.len()).collect(),
                ids: r.ids.clone(),
            }],
        }
    }

    /// The one row's layout cut to its first `to` positions; a one-row
    /// layout is always compact, so the columns are cut too.
    pub fn cut(&mut self, to: usize) {
        assert_eq!(self.rows.len(), 1, "a one-row cache");
        let r = &mut self.rows[0];
        assert!(to <= r.len(), "a position the cache holds");
        debug_assert!(r.is_compact(), "a one-row cache has no holes");
        r.ids.truncate(to);
        r.cols.truncate(to);
        self.used = to;
    }
}

/// The capacity a cache grows to so that it holds `needed` columns:
/// doubling, in steps of 64 columns, so a sequence grown one token at a
/// time is copied a logarithmic number of times.
pub fn grown_capacity(capacity: usize, needed: usize) -> usize {
    if needed <= capacity {
        return capacity;
    }
    needed.max(2 * capacity).div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        crate::model::config::tests::tiny_config()
    }

    fn keys_of(mask: &[bool], keys: usize, row: usize) -> Vec<usize> {
        mask[row * keys..(row + 1) * keys]
            .iter()
            .enumerate()
            .filter_map(|(i, &m)| m.then_some(i))
            .collect()
    }

    #[test]
    fn a_ragged_pass_attends_only_to_each_rows_own_positions() {
        let c = config();
        let mut layout = Layout::new(2);
        // Row 0 runs 3 tokens, row 1 runs 1: row 1's columns 1 and 2 are holes.
        let plan = layout
            .plan(
                &c,
                &[
                    RowIds {
                        ids: &[1, 2, 3],
                        from: 0,
                    },
                    RowIds { ids: &[4], from: 0 },
                ],
            )
            .unwrap();
        assert_eq!((plan.start, plan.width, plan.keys()), (0, 3, 3));
        assert_eq!(plan.positions, [0, 1, 2, 0, 1, 2]);
        assert_eq!(plan.tokens(), [1, 2, 3, 4, 0, 0]);
        assert_eq!(
            plan.logit_rows(),
            (vec![0, 1, 2, 3], vec![Some(3), Some(1)])
        );
        let mask = layout.attend(&plan, None).mask(2, 3, 3);
        assert_eq!(keys_of(&mask, 3, 0), [0]);
        assert_eq!(keys_of(&mask, 3, 2), [0, 1, 2]);
        assert_eq!(keys_of(&mask, 3, 3), [0], "row 1's token sees itself");
        assert_eq!(keys_of(&mask, 3, 4), [1], "a hole sees only its column");
        layout.commit(&plan);
        assert_eq!(layout.rows[1].cols, [0]);
        // A decode step: row 1's next position sits at column 3, after its holes.
        let plan = layout
            .plan(
                &c,
                &[RowIds { ids: &[5], from: 0 }, RowIds { ids: &[6], from: 0 }],
            )
            .unwrap();
        assert_eq!(plan.positions, [3, 1]);
        let mask = layout.attend(&plan, None).mask(2, 1, 4);
        assert_eq!(keys_of(&mask, 4, 0), [0, 1, 2, 3]);
        assert_eq!(keys_of(&mask, 4, 1), [0, 3]);
        // A window of 2 positions: row 1's query at position 1 sees 0 and 1.
        let mask = layout.attend(&plan, Some(2)).mask(2, 1, 4);
        assert_eq!(keys_of(&mask, 4, 0), [2, 3]);
        assert_eq!(keys_of(&mask, 4, 1), [0, 3]);
        // A row that sits the step out keeps its positions.
        layout.commit(&plan);
        let plan = layout
            .plan(
                &c,
                &[RowIds { ids: &[7], from: 0 }, RowIds { ids: &[], from: 0 }],
            )
            .unwrap();
        assert_eq!(plan.logit_rows(), (vec![0], vec![Some(1), None]));
        layout.commit(&plan);
        assert_eq!(layout.rows[1].ids, [4, 6]);
        assert_eq!(layout.rows[0].ids, [1, 2, 3, 5, 7]);
        assert_eq!(layout.used, 5);
    }

    #[test]
    fn rows_of_one_length_from_the_start_are_causal_and_one_query_sees_all() {
        let c = config();
        let layout = Layout::new(2);
        let plan = layout
            .plan(
                &c,
                &[
                    RowIds {
                        ids: &[1, 2],
                        from: 1,
                    },
                    RowIds {
                        ids: &[3, 4],
                        from: 0,
                    },
                ],
            )
            .unwrap();
        assert_eq!(layout.attend(&plan, None), Attend::Causal);
        assert_eq!(
            Attend::Causal.mask(1, 2, 3),
            [true, true, false, true, true, true],
            "the queries are the last two columns"
        );
        assert!(matches!(layout.attend(&plan, Some(1)), Attend::Masked(_)));
        let mut one = Layout::new(1);
        let plan = one
            .plan(
                &c,
                &[RowIds {
                    ids: &[1, 2],
                    from: 1,
                }],
            )
            .unwrap();
        one.commit(&plan);
        let plan = one.plan(&c, &[RowIds { ids: &[3], from: 0 }]).unwrap();
        assert_eq!(one.attend(&plan, None), Attend::All);
        assert_eq!(
            one.attend(&plan, Some(2)).mask(1, 1, 3),
            [false, true, true],
            "the window drops position 0"
        );
        one.commit(&plan);
        one.cut(1);
        assert_eq!((one.used, one.rows[0].ids.as_slice()), (1, &[1][..]));
    }

    #[test]
    fn a_token_outside_the_vocabulary_is_refused_before_any_pass() {
        let c = config();
        let layout = Layout::new(1);
        let bad = c.vocab as u32;
        assert!(matches!(
            layout.plan(
                &c,
                &[RowIds {
                    ids: &[bad],
                    from: 0
                }]
            ),
            Err(ModelError::TokenOutOfRange { .. })
        ));
    }

    #[test]
    fn capacity_doubles_in_steps_of_64() {
        assert_eq!(grown_capacity(0, 5), 64);
        assert_eq!(grown_capacity(64, 64), 64);
        assert_eq!(grown_capacity(64, 65), 128);
        assert_eq!(grown_capacity(128, 300), 320);
    }
}
