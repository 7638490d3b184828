//! A mixture of experts' routing, once for every backend: from the
//! router's probabilities (softmax over all experts, one row per token),
//! which experts each token uses and with what weight. The backends run
//! the experts on their own tensors; who runs what is decided here, so
//! candle, torch and MLX choose the same experts for the same
//! probabilities (ties included).

use super::config::Experts;

/// Which tokens each expert runs, and how each token's output is made
/// from the experts' outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    /// Per expert, the rows (tokens) it runs, in row order.
    pub rows: Vec<Vec<u32>>,
    /// Per token, its `used` picks in the order chosen (highest
    /// probability first): the expert and the pick's weight.
    pub picks: Vec<Vec<(usize, f32)>>,
}

impl Routing {
    /// Routes `probs` (`[tokens, experts.count]`, row-major): each token
    /// takes the `experts.used` experts of highest probability (a tie goes
    /// to the lower index, as `torch.topk` breaks it), weighted by their
    /// probabilities, renormalised to sum to one where the model says.
    pub fn of(probs: &[f32], experts: &Experts) -> Routing {
        let count = experts.count;
        let mut rows = vec![Vec::new(); count];
        let mut picks = Vec::with_capacity(probs.len() / count);
        for (row, scores) in probs.chunks_exact(count).enumerate() {
            let mut order: Vec<usize> = (0..count).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            let chosen = &order[..experts.used];
            let total: f32 = match experts.normalize {
                true => chosen.iter().map(|&e| scores[e]).sum(),
                false => 1.0,
            };
            for &e in chosen {
                rows[e].push(row as u32);
            }
            picks.push(chosen.iter().map(|&e| (e, scores[e] / total)).collect());
        }
        Routing { rows, picks }
    }

    /// Where each token's picks sit among the experts' outputs
    /// concatenated in expert order (expert 0's rows, then expert 1's ...),
    /// and their weights: `[tokens · used]` indices and weights, token by
    /// token. Gathering those rows, weighting and summing each token's
    /// `used` of them is the mixture's output.
    pub fn gather(&self) -> (Vec<u32>, Vec<f32>) {
        // Where each expert's rows start in the concatenation.
        let mut start = Vec::with_capacity(self.rows.len());
        let mut at = 0u32;
        for r in &self.rows {
            start.push(at);
            at += r.len() as u32;
        }
        let mut index = Vec::new();
        let mut weight = Vec::new();
        for (token, picks) in self.picks.iter().enumerate() {
            for &(e, w) in picks {
                // The token's place among expert e's rows (rows are in order).
                let within = self.rows[e]
                    .binary_search(&(token as u32))
                    .expect("a pick is among its expert's rows");
                index.push(start[e] + within as u32);
                weight.push(w);
            }
        }
        (index, weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experts(normalize: bool) -> Experts {
        Experts {
            count: 4,
            used: 2,
            ffn: 8,
            normalize,
        }
    }

    #[test]
    fn picks_the_highest_and_breaks_ties_to_the_lower_index() {
        let probs = [
            0.1, 0.4, 0.3, 0.2, // token 0: experts 1, 2
            0.3, 0.1, 0.3, 0.3, // token 1: a three-way tie: 0, 2
        ];
        let r = Routing::of(&probs, &experts(false));
        assert_eq!(r.rows, vec![vec![1], vec![0], vec![0, 1], vec![]]);
        assert_eq!(r.picks[0], vec![(1, 0.4), (2, 0.3)]);
        assert_eq!(r.picks[1], vec![(0, 0.3), (2, 0.3)]);
        let n = Routing::of(&probs, &experts(true));
        assert!((n.picks[0][0].1 - 0.4 / 0.7).abs() < 1e-6);
        assert!((n.picks[1][1].1 - 0.5).abs() < 1e-6);
    }

    #[test]
    fn gather_indexes_the_experts_outputs_in_expert_order() {
        let probs = [0.1, 0.4, 0.3, 0.2, 0.3, 0.1, 0.3, 0.3];
        let r = Routing::of(&probs, &experts(false));
        // Concatenation: expert 0 [token 1], expert 1 [token 0],
        // expert 2 [token 0, token 1].
        let (index, weight) = r.gather();
        assert_eq!(index, vec![1, 2, 0, 3]);
        assert_eq!(weight, vec![0.4, 0.3, 0.3, 0.3]);
    }
}
