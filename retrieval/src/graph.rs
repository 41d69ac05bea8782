//! Graph search: the best hits joined by the chunks of the documents
//! linked to theirs, both ways, `hops` deep.
//!
//! Each hit is followed by what it leads to, breadth first — the chunks
//! of its document's neighbours, then of theirs — each chunk once (a
//! chunk already placed, as a hit or through an earlier one, is not
//! placed again), scored at the leading hit's score halved per hop. So a
//! linked chunk always ranks below the hit that led to it, and a linked
//! document the query's words miss still gets in.

use std::collections::HashSet;

use crate::links::LinkGraph;

/// A chunk graph search placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The chunk.
    pub chunk: usize,
    /// Its score: a hit's own, or the leading hit's halved per hop.
    pub score: f64,
    /// The hit whose links brought it in (`None` for a hit).
    pub via: Option<usize>,
}

/// What graph search reads of a knowledge base: which document each chunk
/// is of, each document's chunks in order, and the links.
pub struct Corpus<'a> {
    /// The document of each chunk.
    pub document_of: &'a [usize],
    /// The chunks of each document, in order.
    pub chunks_of: &'a [Vec<usize>],
    /// The links between documents.
    pub links: &'a LinkGraph,
}

/// `hits` (chunks, best first, with their scores) each followed by the
/// chunks of the documents linked to its own, up to `hops` links away.
/// With `hops` 0, the hits alone.
pub fn expand(hits: &[(usize, f64)], corpus: &Corpus<'_>, hops: usize) -> Vec<Placed> {
    let mut placed: HashSet<usize> = hits.iter().map(|(chunk, _)| *chunk).collect();
    let mut out = Vec::with_capacity(hits.len());
    for &(hit, score) in hits {
        out.push(Placed {
            chunk: hit,
            score,
            via: None,
        });
        let Some(&start) = corpus.document_of.get(hit) else {
            continue;
        };
        let mut seen = HashSet::from([start]);
        let mut frontier = vec![start];
        let mut weight = score;
        for _ in 0..hops {
            weight /= 2.0;
            let mut next = Vec::new();
            for &document in &frontier {
                for &neighbour in corpus.links.neighbours(document) {
                    if seen.insert(neighbour) {
                        next.push(neighbour);
                    }
                }
            }
            for &document in &next {
                for &chunk in corpus
                    .chunks_of
                    .get(document)
                    .map_or(&[][..], Vec::as_slice)
                {
                    if placed.insert(chunk) {
                        out.push(Placed {
                            chunk,
                            score: weight,
                            via: Some(hit),
                        });
                    }
                }
            }
            frontier = next;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{Document, Format};

    fn doc(source: &str, text: &str) -> Document {
        Document {
            source: source.into(),
            text: text.into(),
            format: Format::Markdown,
            links: Vec::new(),
        }
    }

    /// a → b → c, and d alone; one chunk each but b, which has two.
    fn corpus_parts() -> (Vec<usize>, Vec<Vec<usize>>, LinkGraph) {
        let documents = vec![
            doc("a.md", "[b](b.md)"),
            doc("b.md", "[c](c.md)"),
            doc("c.md", "end"),
            doc("d.md", "alone"),
        ];
        let document_of = vec![0, 1, 1, 2, 3];
        let chunks_of = vec![vec![0], vec![1, 2], vec![3], vec![4]];
        (document_of, chunks_of, LinkGraph::of(&documents))
    }

    #[test]
    fn a_hit_is_followed_by_what_its_links_lead_to_hops_deep() {
        let (document_of, chunks_of, links) = corpus_parts();
        let corpus = Corpus {
            document_of: &document_of,
            chunks_of: &chunks_of,
            links: &links,
        };
        let hits = [(0, 1.0), (4, 0.5)];
        let order = |hops| -> Vec<(usize, Option<usize>)> {
            expand(&hits, &corpus, hops)
                .into_iter()
                .map(|p| (p.chunk, p.via))
                .collect()
        };
        assert_eq!(order(0), vec![(0, None), (4, None)]);
        assert_eq!(
            order(1),
            vec![(0, None), (1, Some(0)), (2, Some(0)), (4, None)]
        );
        assert_eq!(
            order(2),
            vec![
                (0, None),
                (1, Some(0)),
                (2, Some(0)),
                (3, Some(0)),
                (4, None)
            ]
        );
        let scores: Vec<f64> = expand(&hits, &corpus, 2).iter().map(|p| p.score).collect();
        assert_eq!(scores, vec![1.0, 0.5, 0.5, 0.25, 0.5]);
    }

    #[test]
    fn a_chunk_is_placed_once_and_a_hit_keeps_its_own_place() {
        let (document_of, chunks_of, links) = corpus_parts();
        let corpus = Corpus {
            document_of: &document_of,
            chunks_of: &chunks_of,
            links: &links,
        };
        // c's chunk is a hit of its own, below a's: a's links do not move it.
        let placed = expand(&[(0, 1.0), (3, 0.9)], &corpus, 2);
        let order: Vec<usize> = placed.iter().map(|p| p.chunk).collect();
        assert_eq!(order, vec![0, 1, 2, 3]);
        assert_eq!(placed[3].via, None);
    }
}
