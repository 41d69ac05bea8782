//! Rankings fused by reciprocal rank fusion (RRF): an item's score is the
//! sum, over the rankings it is in, of `1 / (60 + rank)`, its rank counted
//! from 1. It needs no scores, only orders, so a BM25 ranking and a cosine
//! ranking, whose scores do not compare, fuse fairly.

use std::collections::HashMap;
use std::hash::Hash;

/// RRF's constant: how much the first few ranks weigh over the rest.
pub const RRF_K: f64 = 60.0;

/// `rankings` (each best first) fused, best first, with their scores;
/// ties keep the order in which items were first met.
pub fn reciprocal_rank_fusion<T: Eq + Hash + Clone>(rankings: &[Vec<T>]) -> Vec<(T, f64)> {
    let mut scores: HashMap<&T, (f64, usize)> = HashMap::new();
    let mut met = 0;
    for ranking in rankings {
        for (rank, item) in ranking.iter().enumerate() {
            let entry = scores.entry(item).or_insert_with(|| {
                met += 1;
                (0.0, met)
            });
            entry.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(T, f64, usize)> = scores
        .into_iter()
        .map(|(item, (score, first))| (item.clone(), score, first))
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    fused
        .into_iter()
        .map(|(item, score, _)| (item, score))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_in_both_rankings_rise_above_those_in_one() {
        let keyword = vec!["a", "b", "c"];
        let vector = vec!["c", "d", "a"];
        let fused = reciprocal_rank_fusion(&[keyword, vector]);
        let order: Vec<&str> = fused.iter().map(|(item, _)| *item).collect();
        assert_eq!(order, vec!["a", "c", "b", "d"]);
        let a = 1.0 / 61.0 + 1.0 / 63.0;
        assert!((fused[0].1 - a).abs() < 1e-12);
        // b and d tie (rank 2 in one ranking each): b was met first.
        assert!((fused[2].1 - fused[3].1).abs() < 1e-12);
    }

    #[test]
    fn one_ranking_keeps_its_order() {
        let fused = reciprocal_rank_fusion(&[vec![3, 1, 2]]);
        assert_eq!(
            fused.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![3, 1, 2]
        );
        assert!(reciprocal_rank_fusion::<u8>(&[]).is_empty());
    }
}
