//! The two sides of a comparison: [`SideName`] names one, [`Sides`] holds
//! one value per side. Everything the pipeline keeps per side (the loaded
//! models, the bundles, the traces, the scores) is a `Sides<T>`, indexed
//! by name, never by a number or a string.

use std::ops::{Index, IndexMut};

use crate::report::document::Side;

/// Which side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SideName {
    Baseline,
    Candidate,
}

impl SideName {
    /// Both sides, baseline first: the order every per-side loop runs in.
    pub const BOTH: [SideName; 2] = [SideName::Baseline, SideName::Candidate];

    pub fn as_str(self) -> &'static str {
        match self {
            SideName::Baseline => "baseline",
            SideName::Candidate => "candidate",
        }
    }

    /// The side as the report document names it.
    pub fn document(self) -> Side {
        match self {
            SideName::Baseline => Side::Baseline,
            SideName::Candidate => Side::Candidate,
        }
    }
}

impl std::fmt::Display for SideName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per side.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sides<T> {
    pub baseline: T,
    pub candidate: T,
}

impl<T> Sides<T> {
    pub fn new(baseline: T, candidate: T) -> Sides<T> {
        Sides {
            baseline,
            candidate,
        }
    }

    /// Each side's value from its name.
    pub fn from_fn(mut f: impl FnMut(SideName) -> T) -> Sides<T> {
        Sides::new(f(SideName::Baseline), f(SideName::Candidate))
    }

    /// Each side's value from its name, or the first error (the baseline's
    /// is computed first).
    pub fn try_from_fn<E>(mut f: impl FnMut(SideName) -> Result<T, E>) -> Result<Sides<T>, E> {
        Ok(Sides::new(f(SideName::Baseline)?, f(SideName::Candidate)?))
    }

    pub fn as_ref(&self) -> Sides<&T> {
        Sides::new(&self.baseline, &self.candidate)
    }

    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> Sides<U> {
        Sides::new(f(self.baseline), f(self.candidate))
    }

    /// Each side's name with its value, baseline first.
    pub fn iter(&self) -> impl Iterator<Item = (SideName, &T)> {
        [
            (SideName::Baseline, &self.baseline),
            (SideName::Candidate, &self.candidate),
        ]
        .into_iter()
    }
}

impl<T> Index<SideName> for Sides<T> {
    type Output = T;

    fn index(&self, side: SideName) -> &T {
        match side {
            SideName::Baseline => &self.baseline,
            SideName::Candidate => &self.candidate,
        }
    }
}

impl<T> IndexMut<SideName> for Sides<T> {
    fn index_mut(&mut self, side: SideName) -> &mut T {
        match side {
            SideName::Baseline => &mut self.baseline,
            SideName::Candidate => &mut self.candidate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_is_found_by_its_name_and_loops_run_baseline_first() {
        let mut s = Sides::from_fn(|side| side.as_str().len());
        assert_eq!(s[SideName::Baseline], 8);
        s[SideName::Candidate] += 1;
        assert_eq!(s.candidate, 10);
        let order: Vec<_> = s.iter().map(|(side, _)| side).collect();
        assert_eq!(order, SideName::BOTH);
        assert_eq!(SideName::Candidate.document(), Side::Candidate);
        let failed: Result<Sides<u8>, &str> = Sides::try_from_fn(|side| match side {
            SideName::Baseline => Err("baseline first"),
            SideName::Candidate => Err("candidate"),
        });
        assert_eq!(failed, Err("baseline first"));
    }
}
