//! Drawing a graph as text (SPEC section 10, seed 000 "Seeing the shape").
//!
//! Waves run top to bottom, so nodes drawn side by side are the ones that
//! run concurrently. A double rule (═) marks a start or end node, `▼` an
//! unconditional edge and `▽` a conditional one. Back-edges climb the right
//! margin and are named after their condition in the notes; one that would
//! have to cross a box is not drawn, and the notes say so rather than draw a
//! lie. Edges that skip a wave pass through it as a thin line in its row, so
//! no line is ever drawn through a box.
//!
//! Layout: each wave is a row of items (boxes, and one-column pass-throughs
//! for long edges), centred on the widest row. Between two rows, every edge
//! that must move sideways gets its own lane (one text row), so horizontal
//! runs never overlap; an arrow row follows.

use std::collections::HashMap;

use super::topology::{container_members, forward_order};
use super::{Condition, Graph, Guard, NodeIdx, NodeKind, Target};

mod canvas;
mod layering;
mod svg;
use canvas::{Canvas, DOWN, LEFT, RIGHT, UP};
use layering::{edge_pairs, layers, order_rows, split_long_edges};
pub use svg::svg;

const GAP: usize = 3;

/// Draws the graph. The graph should have passed validation (its forward
/// edges form a DAG); any cycle is reported in the notes instead.
pub fn diagram(graph: &Graph) -> String {
    Layout::new(graph).render()
}

/// An item in a wave row: a node's box, or a pass-through of a long edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Item {
    Node(NodeIdx),
    Pass(usize),
}

/// An edge between consecutive rows, after long edges are split.
#[derive(Debug, Clone, Copy)]
struct Segment {
    from: Item,
    to: Item,
    conditional: bool,
}

struct Layout<'a> {
    graph: &'a Graph,
    rows: Vec<Vec<Item>>,
    segments: Vec<Vec<Segment>>,
    back_edges: Vec<BackEdge>,
    width: usize,
}

/// A forward edge between drawn nodes, merged per pair: conditional only if
/// every edge of the pair is.
type Pair = (NodeIdx, NodeIdx, bool);
/// A loop edge, drawn in the right margin, with its condition's label.
type BackEdge = (NodeIdx, NodeIdx, Option<String>);
/// Where a node's box is: its label row, left and right columns.
type NodeBox = (usize, usize, usize);

impl<'a> Layout<'a> {
    fn new(graph: &'a Graph) -> Self {
        let layer = layers(graph);
        let depth = layer.values().max().map_or(0, |d| d + 1);
        let mut rows: Vec<Vec<Item>> = vec![Vec::new(); depth];
        for idx in 0..graph.nodes.len() {
            if let Some(&l) = layer.get(&idx) {
                rows[l].push(Item::Node(idx));
            }
        }
        let (pairs, back_edges) = edge_pairs(graph, &layer);
        let segments = split_long_edges(pairs, &layer, &mut rows);
        order_rows(graph, &mut rows, &segments);
        let mut layout = Self {
            graph,
            rows,
            segments,
            back_edges,
            width: 0,
        };
        layout.width = layout
            .rows
            .iter()
            .map(|row| layout.row_width(row))
            .max()
            .unwrap_or(0);
        layout
    }

    fn item_width(&self, item: Item) -> usize {
        match item {
            Item::Node(idx) => self.graph.node(idx).id.chars().count() + 4,
            Item::Pass(_) => 1,
        }
    }

    fn row_width(&self, row: &[Item]) -> usize {
        row.iter().map(|&it| self.item_width(it)).sum::<usize>() + GAP * row.len().saturating_sub(1)
    }

    /// Left column of every item of a row.
    fn lefts(&self, row: &[Item]) -> Vec<usize> {
        let mut x = (self.width - self.row_width(row)) / 2;
        row.iter()
            .map(|&it| {
                let left = x;
                x += self.item_width(it) + GAP;
                left
            })
            .collect()
    }

    fn render(&self) -> String {
        let columns = self.width + 3 + 2 * self.back_edges.len();
        let mut canvas = Canvas::new(columns);
        let mut boxes: HashMap<NodeIdx, NodeBox> = HashMap::new();
        let mut y = 0;
        let mut conditional_drawn = false;
        for l in 0..self.rows.len() {
            let centre = self.draw_row(&mut canvas, l, y, &mut boxes);
            y += 3;
            if let Some(segments) = self.segments.get(l).filter(|s| !s.is_empty()) {
                let (height, conditional) =
                    self.draw_segments(&mut canvas, l, y, &centre, segments);
                y += height;
                conditional_drawn |= conditional;
            }
        }
        let mut notes = self.draw_back_edges(&mut canvas, &boxes);
        notes.extend(self.notes());
        if conditional_drawn {
            notes.push("  ▽ conditional edge".to_owned());
        }
        let mut text = canvas.finish();
        if !notes.is_empty() {
            text.push('\n');
            for note in notes {
                text.push_str(&note);
                text.push('\n');
            }
        }
        text
    }

    /// Draws row `l` at height `y`: node boxes and pass-through lines.
    /// Returns each item's centre column and records where boxes are.
    fn draw_row(
        &self,
        canvas: &mut Canvas,
        l: usize,
        y: usize,
        boxes: &mut HashMap<NodeIdx, NodeBox>,
    ) -> HashMap<Item, usize> {
        let row = &self.rows[l];
        let mut centre = HashMap::new();
        for (&item, &left) in row.iter().zip(&self.lefts(row)) {
            let w = self.item_width(item);
            centre.insert(item, left + w / 2);
            match item {
                Item::Node(idx) => {
                    let double = self.graph.is_start(idx) || self.graph.is_end(idx);
                    canvas.draw_box(y, left, &self.graph.node(idx).id, double);
                    boxes.insert(idx, (y + 1, left, left + w - 1));
                }
                Item::Pass(_) => {
                    for r in y..y + 3 {
                        canvas.line(r, left, UP | DOWN);
                    }
                }
            }
        }
        centre
    }

    /// Draws the segments from row `l` to row `l + 1`, starting at height
    /// `y`: straight ones down, bent ones each in a lane of its own, then
    /// the arrow heads. Returns the height used and whether a conditional
    /// arrow was drawn.
    fn draw_segments(
        &self,
        canvas: &mut Canvas,
        l: usize,
        y: usize,
        centre: &HashMap<Item, usize>,
        segments: &[Segment],
    ) -> (usize, bool) {
        // Target centres are known once the next row is laid out.
        let next = &self.rows[l + 1];
        let next_centre: HashMap<Item, usize> = next
            .iter()
            .zip(&self.lefts(next))
            .map(|(&it, &left)| (it, left + self.item_width(it) / 2))
            .collect();
        let mut ordered: Vec<(usize, usize, Segment)> = segments
            .iter()
            .map(|s| (centre[&s.from], next_centre[&s.to], *s))
            .collect();
        ordered.sort_by_key(|(sx, tx, _)| (*sx, *tx));
        let bent: Vec<(usize, usize)> = ordered
            .iter()
            .filter(|(sx, tx, _)| sx != tx)
            .map(|(sx, tx, _)| (*sx, *tx))
            .collect();
        let lanes = bent.len().max(1);
        for (sx, _, _) in ordered.iter().filter(|(sx, tx, _)| sx == tx) {
            for r in 0..lanes {
                canvas.line(y + r, *sx, UP | DOWN);
            }
        }
        for (lane, &(sx, tx)) in bent.iter().enumerate() {
            for r in 0..lanes {
                let row = y + r;
                match r.cmp(&lane) {
                    std::cmp::Ordering::Less => canvas.line(row, sx, UP | DOWN),
                    std::cmp::Ordering::Greater => canvas.line(row, tx, UP | DOWN),
                    std::cmp::Ordering::Equal => {
                        let (toward, back) = if tx > sx {
                            (RIGHT, LEFT)
                        } else {
                            (LEFT, RIGHT)
                        };
                        canvas.line(row, sx, UP | toward);
                        for x in sx.min(tx) + 1..sx.max(tx) {
                            canvas.line(row, x, LEFT | RIGHT);
                        }
                        canvas.line(row, tx, DOWN | back);
                    }
                }
            }
        }
        let arrows_at = y + lanes;
        let mut arrows: Vec<(usize, Item, bool)> = Vec::new();
        for (_, tx, segment) in &ordered {
            match arrows.iter_mut().find(|(x, _, _)| x == tx) {
                Some(arrow) => arrow.2 &= segment.conditional,
                None => arrows.push((*tx, segment.to, segment.conditional)),
            }
        }
        let mut conditional_drawn = false;
        for (x, target, conditional) in arrows {
            match target {
                Item::Node(_) => {
                    conditional_drawn |= conditional;
                    canvas.put(arrows_at, x, if conditional { '▽' } else { '▼' });
                }
                Item::Pass(_) => canvas.line(arrows_at, x, UP | DOWN),
            }
        }
        (lanes + 1, conditional_drawn)
    }

    /// Draws loop edges in the right margin where there is room; returns a
    /// note for each.
    fn draw_back_edges(
        &self,
        canvas: &mut Canvas,
        boxes: &HashMap<NodeIdx, NodeBox>,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        for (i, &(from, to, ref label)) in self.back_edges.iter().enumerate() {
            let mut note = format!(
                "  ↺ {} → {}",
                self.graph.node(from).id,
                self.graph.node(to).id
            );
            if let Some(label) = label {
                note.push_str(&format!(" when {label}"));
            }
            let margin = self.width + 2 + 2 * i;
            if from == to || !self.rightmost(from) || !self.rightmost(to) {
                note.push_str(" (not drawn: no clear margin)");
            } else {
                let (ys, _, source_right) = boxes[&from];
                let (yt, _, target_right) = boxes[&to];
                let (at_source, at_target) = if yt < ys { (UP, DOWN) } else { (DOWN, UP) };
                for x in source_right + 1..margin {
                    canvas.line(ys, x, LEFT | RIGHT);
                }
                canvas.line(ys, margin, LEFT | at_source);
                canvas.put(yt, target_right + 1, '◀');
                for x in target_right + 2..margin {
                    canvas.line(yt, x, LEFT | RIGHT);
                }
                canvas.line(yt, margin, LEFT | at_target);
                for r in ys.min(yt) + 1..ys.max(yt) {
                    canvas.line(r, margin, UP | DOWN);
                }
            }
            notes.push(note);
        }
        notes
    }

    /// Notes for what the picture does not show: map chains, loop bodies,
    /// fallbacks and undeclared cycles.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (idx, node) in self.graph.nodes.iter().enumerate() {
            if let NodeKind::Map(map) = &node.kind {
                let chain: Vec<&str> = container_members(self.graph, idx)
                    .into_iter()
                    .map(|m| self.graph.node(m).id.as_str())
                    .collect();
                let over = match &map.over {
                    super::ListSource::Template(t) => t.source().to_owned(),
                    super::ListSource::Cel(c) => c.source().to_owned(),
                };
                notes.push(format!(
                    "  ⊞ {} maps each item of {over} through {}",
                    node.id,
                    chain.join(" → ")
                ));
            }
            if let NodeKind::Loop(config) = &node.kind {
                let body: Vec<&str> = container_members(self.graph, idx)
                    .into_iter()
                    .map(|m| self.graph.node(m).id.as_str())
                    .collect();
                let until = match &config.until {
                    super::Until::Condition(name, _) => name.clone(),
                    super::Until::Hosted(code) => code.label(),
                    super::Until::Sentence(sentence) => format!("\"{sentence}\""),
                };
                notes.push(format!(
                    "  ↻ {} repeats {} until {until} (at most {} times)",
                    node.id,
                    body.join(" → "),
                    config.max_iterations
                ));
            }
            for &e in self.graph.out_edges(idx) {
                let edge = &self.graph.edges[e];
                if let (Guard::Fallback, Target::Node(to)) = (&edge.guard, edge.to) {
                    notes.push(format!(
                        "  ✗ {} → {} on failure (fallback)",
                        node.id,
                        self.graph.node(to).id
                    ));
                }
            }
        }
        if let Err(cycles) = forward_order(self.graph) {
            for cycle in cycles {
                let names: Vec<&str> = cycle
                    .iter()
                    .map(|&i| self.graph.node(i).id.as_str())
                    .collect();
                notes.push(format!("  ⚠ undeclared cycle: {}", names.join(" → ")));
            }
        }
        for (function, used_by) in self.graph.python_functions() {
            notes.push(format!("  ƒ Python {}: {used_by}", function.label()));
        }
        notes
    }

    /// Reports whether nothing stands to the right of a node in its row.
    fn rightmost(&self, idx: NodeIdx) -> bool {
        self.rows
            .iter()
            .any(|row| row.last() == Some(&Item::Node(idx)))
    }
}

fn condition_label(condition: &Condition) -> String {
    condition.label()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Format, load_str};

    fn draw(yaml: &str) -> String {
        let (graph, _) = load_str(yaml, Format::Yaml, "t").unwrap_or_else(|e| panic!("{e}"));
        diagram(&graph)
    }

    /// The picture from seed 000, "Seeing the shape", line for line, drawn
    /// from the example graph that wires the seed's critique loop.
    #[test]
    fn seed_critique_loop_picture() {
        let yaml = include_str!("../../../examples/critique-loop.yaml");
        let expected = include_str!("../../tests/fixtures/critique-loop.diagram.txt");
        assert_eq!(draw(yaml), expected);
    }

    #[test]
    fn parallel_branches_sit_side_by_side() {
        let text = draw(
            "nodes:\n  a: {kind: task, handler: a, start: true, next: [b, c]}\n  b: {kind: task, handler: b}\n  c: {kind: task, handler: c}\n  d: {kind: task, handler: d, depends_on: [b, c], end: true}\n",
        );
        let lines: Vec<&str> = text.lines().collect();
        let row_with_b = lines.iter().find(|l| l.contains("│ b │")).unwrap();
        assert!(row_with_b.contains("│ c │"), "{text}");
        assert!(!text.contains('▽'), "{text}");
        assert!(!text.contains("conditional edge"), "{text}");
    }

    #[test]
    fn long_edges_pass_beside_boxes_never_through_them() {
        let text = draw(
            "nodes:\n  a: {kind: task, handler: a, start: true, next: [b, d]}\n  b: {kind: task, handler: b, next: c}\n  c: {kind: task, handler: c, next: d}\n  d: {kind: task, handler: d}\n",
        );
        // Every box row is intact: nothing overwrote a box character.
        for id in ["a", "b", "c", "d"] {
            assert!(text.contains(&format!("│ {id} │")), "{text}");
        }
        let c_row = text.lines().find(|l| l.contains("│ c │")).unwrap();
        assert!(
            c_row.matches('│').count() >= 3,
            "a pass-through line runs beside c:\n{text}"
        );
    }

    #[test]
    fn back_edge_without_clear_margin_is_noted_not_drawn() {
        let text = draw(
            r#"
nodes:
  a: { kind: task, handler: a, start: true }
  b: { kind: task, handler: b, start: true }
  c: { kind: task, handler: c, depends_on: [a, b] }
edges:
  - { from: c, to: a, loop: true, when: "state.again" }
"#,
        );
        assert!(
            text.contains("  ↺ c → a when state.again (not drawn: no clear margin)"),
            "{text}"
        );
        assert!(!text.contains('◀'), "{text}");
    }

    #[test]
    fn map_and_fallback_notes() {
        let text = draw(
            r#"
nodes:
  fan: { kind: map, start: true, over: "{{ xs }}", as: x, branch: step, collect_into: out, next: done }
  step: { kind: task, handler: step, fallback: rescue }
  rescue: { kind: task, handler: rescue }
  done: { kind: end }
"#,
        );
        assert!(
            text.contains("  ⊞ fan maps each item of {{ xs }} through step → rescue"),
            "{text}"
        );
        assert!(
            text.contains("  ✗ step → rescue on failure (fallback)"),
            "{text}"
        );
        assert!(
            !text.contains("│ step │"),
            "branch nodes are not drawn in the main flow:\n{text}"
        );
    }

    #[test]
    fn a_loop_is_drawn_with_a_note_naming_its_body_and_until() {
        let text = draw(
            "conditions:\n  ok: \"state.n > 2\"\nnodes:\n  \
             spin: { kind: loop, start: true, body: a, until: ok, max_iterations: 4 }\n  \
             a: { kind: task, handler: a, next: b }\n  b: { kind: task, handler: b }\n",
        );
        assert!(
            text.contains("  ↻ spin repeats a → b until ok (at most 4 times)"),
            "{text}"
        );
    }

    fn random_graph(edges: &[(usize, usize, bool)], loops: &[(usize, usize)], n: usize) -> String {
        let mut yaml = String::from("nodes:\n");
        for j in 0..n {
            let has_pred = edges.iter().any(|&(a, b, _)| b == j && a < b);
            let start = if has_pred { "" } else { ", start: true" };
            yaml.push_str(&format!("  node{j}: {{ kind: task, handler: h{start} }}\n"));
        }
        yaml.push_str("edges:\n");
        for &(a, b, conditional) in edges.iter().filter(|(a, b, _)| a < b) {
            let when = if conditional {
                ", when: \"state.go\""
            } else {
                ""
            };
            yaml.push_str(&format!("  - {{ from: node{a}, to: node{b}{when} }}\n"));
        }
        for &(a, b) in loops.iter().filter(|(a, b)| b <= a) {
            yaml.push_str(&format!(
                "  - {{ from: node{a}, to: node{b}, loop: true }}\n"
            ));
        }
        yaml.replace(
            "edges:\n",
            if edges.iter().any(|(a, b, _)| a < b) || loops.iter().any(|(a, b)| b <= a) {
                "edges:\n"
            } else {
                "edges: []\n"
            },
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the shape, every box is drawn whole: no line runs
        /// through one, and every node appears exactly once.
        #[test]
        fn no_line_is_ever_drawn_through_a_box(
            n in 1usize..10,
            edges in proptest::collection::vec((0usize..10, 0usize..10, proptest::prelude::any::<bool>()), 0..16),
            loops in proptest::collection::vec((0usize..10, 0usize..10), 0..3),
        ) {
            let edges: Vec<_> = edges.into_iter().filter(|&(a, b, _)| a < n && b < n).collect();
            let loops: Vec<_> = loops.into_iter().filter(|&(a, b)| a < n && b < n).collect();
            let yaml = random_graph(&edges, &loops, n);
            let (graph, _) = crate::parse_graph(&yaml, Format::Yaml, "p");
            let text = diagram(&graph);
            let rows: Vec<Vec<char>> = text.lines().map(|l| l.chars().collect()).collect();
            for j in 0..n {
                let label: Vec<char> = format!("│ node{j} │").chars().collect();
                let mut found = Vec::new();
                for (r, row) in rows.iter().enumerate() {
                    for c in 0..row.len() {
                        if row[c..].starts_with(&label) {
                            found.push((r, c));
                        }
                    }
                }
                proptest::prop_assert_eq!(found.len(), 1, "node{} drawn {} times:\n{}", j, found.len(), text);
                let (r, c) = found[0];
                proptest::prop_assert!(r >= 1 && r + 1 < rows.len(), "{}", text);
                let w = label.len();
                let top: String = rows[r - 1].get(c..c + w).map(|s| s.iter().collect()).unwrap_or_default();
                let bottom: String = rows[r + 1].get(c..c + w).map(|s| s.iter().collect()).unwrap_or_default();
                proptest::prop_assert!(top.starts_with('╭') && top.ends_with('╮') && top[3..top.len() - 3].chars().all(|ch| ch == '─' || ch == '═'),
                    "top of node{} broken:\n{}", j, text);
                proptest::prop_assert!(bottom.starts_with('╰') && bottom.ends_with('╯') && bottom[3..bottom.len() - 3].chars().all(|ch| ch == '─' || ch == '═'),
                    "bottom of node{} broken:\n{}", j, text);
            }
        }
    }
}
