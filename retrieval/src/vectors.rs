//! Vector search over a knowledge base's embeddings, exact or approximate.
//!
//! **Exact** search compares every chunk's embedding with the query's by
//! cosine similarity (lengths computed once, products summed in eight
//! lanes so that the CPU's vector instructions apply) and keeps the best
//! `k`: one pass over the vectors per query, linear in their number and
//! length, and always right. Measured on this project's 2-core machine
//! (`cargo run --release -p weft-retrieval --example scale`): 0.5 ms a
//! query over 10,000 embeddings of 256 dimensions, 2.6 ms at 1,536, 6 ms
//! over 100,000 of 256 — about 0.25 ns a float.
//!
//! **Approximate** search walks a hierarchical navigable small-world graph
//! (HNSW, built by the `instant-distance` crate) from its top layer down
//! to the chunks nearest the query, reading a few thousand embeddings
//! instead of all of them: a few milliseconds at any size, at the price of
//! a build that compares each embedding with thousands of others (35 s
//! for 100,000 of 256 dimensions, about a minute for 30,000 of 1,536) and
//! of sometimes missing a near chunk (recall@10 1.0 on clustered
//! embeddings, 0.64 on W9's hashed bags of words at 100,000).
//!
//! A knowledge base searches exactly while an exact query reads at most
//! [`EXACT_UP_TO`] floats (80,000 embeddings of 1,536 dimensions, 480,000
//! of 256: some 30 ms a query here), and approximately above that, unless
//! its `embeddings: {search: …}` says which.

use serde::{Deserialize, Serialize};

/// The most floats (embeddings × dimensions) a knowledge base searches
/// exactly when it does not say how: 80,000 embeddings of 1,536
/// dimensions, about 30 ms a query on this project's machine.
pub const EXACT_UP_TO: usize = 80_000 * 1_536;

/// How deep an approximate search looks (HNSW's `ef`): enough for a
/// ranking of `top_k` up to 50 (each ranking looks twice as deep as
/// `top_k`); a deeper one reads every embedding.
const SEARCH_DEPTH: usize = 100;

/// How widely each embedding looks for its neighbours while the graph is
/// built (HNSW's `efConstruction`). Each keeps its nearest (no pruning
/// heuristic): on W9's corpus (30,000 of 256 dimensions) the heuristic
/// built six times slower (64 s against 11 s) for recall@10 0.83 against
/// 0.77, and on clustered embeddings both found every neighbour.
const BUILD_DEPTH: usize = 100;

/// The seed of the graph's layer assignment, so one corpus builds one
/// graph on every worker.
const SEED: u64 = 0x5745_4654_4b42_0001;

/// How a knowledge base's embeddings are searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VectorSearch {
    /// Every embedding compared with the query's.
    Exact,
    /// Through an HNSW graph.
    Approximate,
}

impl VectorSearch {
    /// Its name in a graph's `embeddings: {search}` and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Approximate => "approximate",
        }
    }

    /// How `count` embeddings of `dimensions` are searched when the
    /// knowledge base does not say: exactly up to [`EXACT_UP_TO`] floats.
    pub fn for_size(count: usize, dimensions: usize) -> Self {
        if count.saturating_mul(dimensions) > EXACT_UP_TO {
            Self::Approximate
        } else {
            Self::Exact
        }
    }
}

/// Why vectors could not be compared or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VectorError {
    /// An embedding's length is not the query's.
    #[error("embedding {index} has {got} dimensions, the query {expected}")]
    Dimensions {
        /// Which vector.
        index: usize,
        /// Its length.
        got: usize,
        /// The query's.
        expected: usize,
    },
    /// The embeddings are not all of one length.
    #[error("embedding {index} has {got} dimensions, embedding 0 has {expected}")]
    Uneven {
        /// Which embedding.
        index: usize,
        /// Its length.
        got: usize,
        /// The first one's.
        expected: usize,
    },
    /// A packed graph that does not decode.
    #[error("the approximate vector index does not decode: {0}")]
    Malformed(String),
}

/// The dot product of `a` and `b` (of one length), summed in eight
/// lanes so that the compiler can use the CPU's vector instructions (a
/// single running sum must be added in order, one float at a time).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The cosine similarity of `a` and `b` (of one length): 0 when either
/// is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (aa, bb) = (dot(a, a), dot(b, b));
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot(a, b) / (aa.sqrt() * bb.sqrt())
}

/// One embedding with its length computed once.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Point {
    vector: Box<[f32]>,
    norm: f32,
}

impl Point {
    fn new(vector: Vec<f32>) -> Self {
        let norm = dot(&vector, &vector).sqrt();
        Self {
            vector: vector.into_boxed_slice(),
            norm,
        }
    }

    /// The cosine of the two: 0 when either is all zeros.
    fn similarity(&self, other: &Self) -> f32 {
        if self.norm == 0.0 || other.norm == 0.0 {
            return 0.0;
        }
        dot(&self.vector, &other.vector) / (self.norm * other.norm)
    }
}

/// The graph's distance between two embeddings: 1 − their cosine.
impl instant_distance::Point for Point {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - self.similarity(other)
    }
}

/// The best `k` of `scored` (chunk, similarity), best first, ties in the
/// chunks' order.
fn best(mut scored: Vec<(usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < scored.len() {
        scored.select_nth_unstable_by(k, order);
        scored.truncate(k);
    }
    scored.sort_by(order);
    scored
}

/// The graph: each point's value is its chunk's place.
type Graph = instant_distance::HnswMap<Point, u32>;

/// A knowledge base's embeddings, one per chunk, and how they are
/// searched.
pub struct Vectors {
    dimensions: usize,
    count: usize,
    kind: Kind,
}

enum Kind {
    /// One point per chunk, in the chunks' order.
    Exact(Vec<Point>),
    Approximate(Box<Graph>),
}

impl Vectors {
    /// `vectors` (one per chunk, in the chunks' order, all of one length),
    /// searched as `search` says, or as their size decides
    /// ([`VectorSearch::for_size`]). An approximate index is built here:
    /// call it off any async runtime.
    pub fn new(vectors: Vec<Vec<f32>>, search: Option<VectorSearch>) -> Result<Self, VectorError> {
        let dimensions = vectors.first().map_or(0, Vec::len);
        if let Some((index, odd)) = vectors
            .iter()
            .enumerate()
            .find(|(_, v)| v.len() != dimensions)
        {
            return Err(VectorError::Uneven {
                index,
                got: odd.len(),
                expected: dimensions,
            });
        }
        let count = vectors.len();
        let search = search.unwrap_or(VectorSearch::for_size(count, dimensions));
        let kind = match search {
            VectorSearch::Exact => Kind::Exact(vectors.into_iter().map(Point::new).collect()),
            VectorSearch::Approximate => {
                let chunks = (0..count as u32).collect();
                let points = vectors.into_iter().map(Point::new).collect();
                let graph = instant_distance::Builder::default()
                    .ef_construction(BUILD_DEPTH)
                    .select_heuristic(None)
                    .ef_search(SEARCH_DEPTH)
                    .seed(SEED)
                    .build(points, chunks);
                Kind::Approximate(Box::new(graph))
            }
        };
        Ok(Self {
            dimensions,
            count,
            kind,
        })
    }

    /// How they are searched.
    pub fn search(&self) -> VectorSearch {
        match self.kind {
            Kind::Exact(_) => VectorSearch::Exact,
            Kind::Approximate(_) => VectorSearch::Approximate,
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Their length.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The `k` embeddings nearest `query`, best first: (their chunks'
    /// places, their cosine similarities). An approximate index answers
    /// through its graph up to 100 deep, and exactly beyond.
    pub fn nearest(&self, query: &[f32], k: usize) -> Result<Vec<(usize, f32)>, VectorError> {
        if self.count > 0 && query.len() != self.dimensions {
            return Err(VectorError::Dimensions {
                index: 0,
                got: self.dimensions,
                expected: query.len(),
            });
        }
        let query = Point::new(query.to_vec());
        match &self.kind {
            Kind::Exact(points) => Ok(best(
                points
                    .iter()
                    .map(|point| point.similarity(&query))
                    .enumerate()
                    .collect(),
                k,
            )),
            // Deeper than the graph is searched: every embedding, as exact
            // search would.
            Kind::Approximate(graph) if k > SEARCH_DEPTH => Ok(best(
                graph
                    .iter()
                    .map(|(id, point)| {
                        let chunk = graph.values[id.into_inner() as usize] as usize;
                        (chunk, point.similarity(&query))
                    })
                    .collect(),
                k,
            )),
            Kind::Approximate(graph) => {
                let mut search = instant_distance::Search::default();
                Ok(graph
                    .search(&query, &mut search)
                    .take(k)
                    .map(|item| (*item.value as usize, item.point.similarity(&query)))
                    .collect())
            }
        }
    }

    /// Every embedding, in the chunks' order.
    pub fn into_order(self) -> Vec<Vec<f32>> {
        match self.kind {
            Kind::Exact(points) => points.into_iter().map(|p| p.vector.into_vec()).collect(),
            Kind::Approximate(graph) => {
                let mut ordered = vec![Vec::new(); self.count];
                for (id, point) in graph.iter() {
                    let chunk = graph.values[id.into_inner() as usize] as usize;
                    ordered[chunk] = point.vector.to_vec();
                }
                ordered
            }
        }
    }

    /// The exact kind's embeddings as little-endian `f32`s, or the
    /// approximate kind's graph (with its embeddings) as bincode.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), VectorError> {
        match &self.kind {
            Kind::Exact(points) => {
                out.reserve(self.count * self.dimensions * 4);
                for x in points.iter().flat_map(|p| p.vector.iter()) {
                    out.extend_from_slice(&x.to_le_bytes());
                }
                Ok(())
            }
            Kind::Approximate(graph) => bincode::serde::encode_into_std_write(
                graph.as_ref(),
                out,
                bincode::config::standard(),
            )
            .map(|_| ())
            .map_err(|e| VectorError::Malformed(e.to_string())),
        }
    }

    /// `count` embeddings of `dimensions` encoded exactly, as
    /// [`Self::encode`] writes them.
    pub(crate) fn decode_exact(raw: &[u8], count: usize, dimensions: usize) -> Self {
        let points = if dimensions == 0 {
            vec![Point::new(Vec::new()); count]
        } else {
            raw.chunks_exact(4 * dimensions)
                .map(|vector| {
                    Point::new(
                        vector
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect(),
                    )
                })
                .collect()
        };
        Self {
            dimensions,
            count,
            kind: Kind::Exact(points),
        }
    }

    /// An approximate index of `count` embeddings of `dimensions`, as
    /// [`Self::encode`] writes it; checked so that no search can step
    /// outside it.
    pub(crate) fn decode_approximate(
        raw: &[u8],
        count: usize,
        dimensions: usize,
    ) -> Result<Self, VectorError> {
        let malformed = |why: String| VectorError::Malformed(why);
        // Lengths in the bytes claim memory before it is read: no more
        // than the embeddings and their neighbour lists can need.
        let config = bincode::config::standard().with_limit::<{ 1 << 34 }>();
        let (graph, used): (Graph, usize) =
            bincode::serde::decode_from_slice(raw, config).map_err(|e| malformed(e.to_string()))?;
        if used != raw.len() {
            return Err(malformed(format!("{} bytes after it", raw.len() - used)));
        }
        if graph.values.len() != count {
            return Err(malformed(format!(
                "{} chunks in the graph, {count} expected",
                graph.values.len()
            )));
        }
        let mut seen = vec![false; count];
        for (id, point) in graph.iter() {
            let chunk = graph
                .values
                .get(id.into_inner() as usize)
                .map(|&c| c as usize)
                .filter(|&c| c < count && !seen[c])
                .ok_or_else(|| {
                    malformed(format!(
                        "point {} names no chunk of its own",
                        id.into_inner()
                    ))
                })?;
            seen[chunk] = true;
            if point.vector.len() != dimensions {
                return Err(malformed(format!(
                    "point {} has {} dimensions, {dimensions} expected",
                    id.into_inner(),
                    point.vector.len()
                )));
            }
        }
        Ok(Self {
            dimensions,
            count,
            kind: Kind::Approximate(Box::new(graph)),
        })
    }
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
            vec![1.0, 0.0],
        ];
        let exact = Vectors::new(vectors, Some(VectorSearch::Exact)).unwrap();
        let best = exact.nearest(&[1.0, 0.1], 3).unwrap();
        assert_eq!(
            best.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![0, 4, 2],
            "ties in the chunks' order"
        );
        // Sums over more than one lane agree with a plain one.
        let a: Vec<f32> = (0..37).map(|i| i as f32 / 7.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (37 - i) as f32 / 5.0).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-3 * plain);
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert_eq!(
            cosine(&[1.0, 0.0], &[0.0, 0.0]),
            0.0,
            "a zero vector is near nothing"
        );
    }

    #[test]
    fn a_vector_of_another_length_is_named() {
        let error = Vectors::new(vec![vec![1.0, 0.0], vec![1.0]], None)
            .err()
            .expect("refused");
        assert_eq!(
            error.to_string(),
            "embedding 1 has 1 dimensions, embedding 0 has 2"
        );
        let exact = Vectors::new(vec![vec![1.0, 0.0]], None).unwrap();
        assert_eq!(
            exact.nearest(&[1.0, 0.0, 0.0], 1).unwrap_err().to_string(),
            "embedding 0 has 2 dimensions, the query 3"
        );
    }

    #[test]
    fn the_size_decides_unless_told() {
        assert_eq!(VectorSearch::for_size(80_000, 1_536), VectorSearch::Exact);
        assert_eq!(
            VectorSearch::for_size(80_001, 1_536),
            VectorSearch::Approximate
        );
        assert_eq!(VectorSearch::for_size(480_000, 256), VectorSearch::Exact);
        let small = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        assert_eq!(
            Vectors::new(small.clone(), None).unwrap().search(),
            VectorSearch::Exact
        );
        assert_eq!(
            Vectors::new(small, Some(VectorSearch::Approximate))
                .unwrap()
                .search(),
            VectorSearch::Approximate
        );
    }

    /// Clustered points in 32 dimensions (a deterministic stream), as
    /// embeddings of texts on a few topics are.
    fn clustered(count: usize) -> Vec<Vec<f32>> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..40).map(|_| (0..32).map(|_| next()).collect()).collect();
        (0..count)
            .map(|i| {
                centres[i % centres.len()]
                    .iter()
                    .map(|c| c + 0.3 * next())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn approximate_search_finds_nearly_what_exact_search_finds() {
        let points = clustered(2_000);
        let queries: Vec<Vec<f32>> = clustered(2_040)[2_000..].to_vec();
        let exact = Vectors::new(points.clone(), Some(VectorSearch::Exact)).unwrap();
        let approximate = Vectors::new(points.clone(), Some(VectorSearch::Approximate)).unwrap();
        let (mut found, mut wanted) = (0, 0);
        for query in &queries {
            let truth: Vec<usize> = exact
                .nearest(query, 10)
                .unwrap()
                .iter()
                .map(|h| h.0)
                .collect();
            let got = approximate.nearest(query, 10).unwrap();
            assert_eq!(got.len(), 10);
            // Best first, and each similarity the chunk's own.
            for pair in got.windows(2) {
                assert!(pair[0].1 >= pair[1].1, "{got:?}");
            }
            for &(chunk, similarity) in &got {
                assert!((cosine(query, &points[chunk]) - similarity).abs() < 1e-4);
            }
            found += got.iter().filter(|h| truth.contains(&h.0)).count();
            wanted += truth.len();
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
        // Deeper than the graph is searched, it answers exactly.
        assert_eq!(
            approximate.nearest(&queries[0], SEARCH_DEPTH + 1).unwrap(),
            exact.nearest(&queries[0], SEARCH_DEPTH + 1).unwrap()
        );
        // The chunks' order survives the graph's own.
        assert_eq!(approximate.into_order(), points);
    }

    #[test]
    fn a_packed_approximate_index_answers_the_same_and_a_damaged_one_is_refused() {
        let points = clustered(500);
        let built = Vectors::new(points.clone(), Some(VectorSearch::Approximate)).unwrap();
        let mut raw = Vec::new();
        built.encode(&mut raw).unwrap();
        let read = Vectors::decode_approximate(&raw, 500, 32).unwrap();
        for query in &points[..20] {
            assert_eq!(
                read.nearest(query, 8).unwrap(),
                built.nearest(query, 8).unwrap()
            );
        }
        assert!(matches!(
            Vectors::decode_approximate(&raw, 501, 32),
            Err(VectorError::Malformed(why)) if why == "500 chunks in the graph, 501 expected"
        ));
        assert!(matches!(
            Vectors::decode_approximate(&raw, 500, 31),
            Err(VectorError::Malformed(why)) if why.contains("dimensions")
        ));
        let cut = Vectors::decode_approximate(&raw[..raw.len() / 2], 500, 32)
            .err()
            .expect("refused");
        assert!(
            cut.to_string()
                .starts_with("the approximate vector index does not decode"),
            "{cut}"
        );
        assert!(matches!(
            built.nearest(&[1.0], 3),
            Err(VectorError::Dimensions {
                got: 32,
                expected: 1,
                ..
            })
        ));
    }
}
