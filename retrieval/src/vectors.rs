//! Exact vector search: every chunk's embedding compared with the query's
//! by cosine similarity, the best `k` kept. It costs one pass over the
//! vectors per query, linear in their number and length. Measured on this
//! project's 2-core machine (`cargo run --release -p weft-retrieval
//! --example scale`, median of 9 queries): 3.0 ms for 10,000 embeddings
//! of 256 dimensions, 27.9 ms for 100,000; 14.5 ms for 10,000 of 1,536
//! dimensions, 142 ms for 100,000. So exact search suits up to about
//! 20,000 chunks at 1,536 dimensions (100,000 at 256), some 30 ms a
//! query; beyond that a knowledge base wants an approximate index.

/// Why vectors could not be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    /// A vector's length is not the query's.
    #[error("embedding {index} has {got} dimensions, the query {expected}")]
    Dimensions {
        /// Which vector.
        index: usize,
        /// Its length.
        got: usize,
        /// The query's.
        expected: usize,
    },
}

/// The cosine similarity of `a` and `b` (of one length): 0 when either
/// is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut aa, mut bb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot / (aa.sqrt() * bb.sqrt())
}

/// The `k` vectors nearest `query`, best first: (their places, their
/// similarities); ties keep the vectors' order.
pub fn nearest(
    query: &[f32],
    vectors: &[Vec<f32>],
    k: usize,
) -> Result<Vec<(usize, f32)>, VectorError> {
    let mut scored = Vec::with_capacity(vectors.len());
    for (index, vector) in vectors.iter().enumerate() {
        if vector.len() != query.len() {
            return Err(VectorError::Dimensions {
                index,
                got: vector.len(),
                expected: query.len(),
            });
        }
        scored.push((index, cosine(query, vector)));
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    Ok(scored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_vectors_come_first() {
        let vectors = vec![
            vec![1.0, 0.0],
            vec![0.0, 1.0],
            vec![0.7, 0.7],
            vec![0.0, 0.0],
        ];
        let best = nearest(&[1.0, 0.1], &vectors, 2).unwrap();
        assert_eq!(best.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 2]);
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert_eq!(
            cosine(&[1.0, 0.0], &[0.0, 0.0]),
            0.0,
            "a zero vector is near nothing"
        );
    }

    #[test]
    fn a_vector_of_another_length_is_named() {
        let error = nearest(&[1.0, 0.0], &[vec![1.0, 0.0], vec![1.0]], 5).unwrap_err();
        assert_eq!(
            error.to_string(),
            "embedding 1 has 1 dimensions, the query 2"
        );
    }
}
