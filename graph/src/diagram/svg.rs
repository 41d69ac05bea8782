//! The diagram as SVG, for the run viewer: the same layout as the text
//! diagram (waves top to bottom, the same order within a wave, long edges
//! passing beside boxes), scaled to pixels, with loop edges drawn as arcs
//! in the right margin and the text diagram's notes below the picture.
//!
//! Each node is a `<g class="node" data-node="ID" data-kind="KIND">` (a
//! map or loop with `data-steps="A B"`, the nodes of its chain or body,
//! which the diagram lists in its notes rather than draws), so a page
//! colours it by status by setting a class or attribute on the group, with
//! no layout of its own.

use std::collections::HashMap;
use std::fmt::Write;

use super::{Item, Layout};

/// Pixels per column of the text layout.
const CHAR: usize = 9;
/// A box's height, and the height of a wave's row with the space below it.
const BOX: usize = 34;
const ROW: usize = 84;
/// The margin around the picture, and between two loop edges' arcs.
const MARGIN: usize = 16;
const ARC_STEP: usize = 14;
/// The height of a line of notes, and the width of one of its characters.
const NOTE: usize = 18;
const NOTE_CHAR: usize = 8;

/// How the picture looks on its own; a page's stylesheet overrides it
/// (a node's status as a class on its group, say).
const STYLE: &str = "<style>\
.weft-diagram{font:13px ui-monospace,monospace}\
.weft-diagram .node rect{fill:#fff;stroke:#444;stroke-width:1.2}\
.weft-diagram .node.terminal rect{stroke-width:2.6}\
.weft-diagram .edge{stroke:#555;stroke-width:1.2}\
.weft-diagram .edge.conditional{stroke-dasharray:5 4}\
.weft-diagram .edge.loop{stroke:#888}\
.weft-diagram marker path{fill:#555}\
.weft-diagram .note{fill:#555;font-size:12px}\
</style>";

/// Draws the graph as an SVG document (see the module's docs).
pub fn svg(graph: &super::Graph) -> String {
    Layout::new(graph).svg()
}

/// ` data-steps="A B"`: the nodes of a map's chain or a loop's body (not
/// drawn as boxes of their own), so a page can tell whose item a step's
/// event is; nothing for other nodes.
fn steps(graph: &super::Graph, idx: usize) -> String {
    let members = crate::topology::container_members(graph, idx);
    if members.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = members.iter().map(|&m| escape(&graph.node(m).id)).collect();
    format!(r#" data-steps="{}""#, ids.join(" "))
}

/// Escapes text for XML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Where an item sits: its left and right pixel and its row's top.
#[derive(Debug, Clone, Copy)]
struct Place {
    left: usize,
    right: usize,
    top: usize,
}

impl Place {
    fn centre(&self) -> usize {
        (self.left + self.right) / 2
    }
}

impl Layout<'_> {
    fn svg(&self) -> String {
        let mut places: HashMap<(usize, Item), Place> = HashMap::new();
        for (l, row) in self.rows.iter().enumerate() {
            for (&item, &left) in row.iter().zip(&self.lefts(row)) {
                let left = MARGIN + left * CHAR;
                let place = Place {
                    left,
                    right: left + self.item_width(item) * CHAR,
                    top: MARGIN + l * ROW,
                };
                places.insert((l, item), place);
            }
        }
        let picture_width = MARGIN + self.width * CHAR;
        let arcs_width = ARC_STEP * (self.back_edges.len() + 1);
        let mut notes: Vec<String> = self
            .back_edges
            .iter()
            .map(|(from, to, label)| {
                let (from, to) = (&self.graph.node(*from).id, &self.graph.node(*to).id);
                match label {
                    Some(label) => format!("↺ {from} → {to} when {label}"),
                    None => format!("↺ {from} → {to}"),
                }
            })
            .collect();
        notes.extend(self.notes().iter().map(|note| note.trim().to_owned()));
        // The last row needs its box, not the space below it.
        let pictured = MARGIN + self.rows.len().saturating_sub(1) * ROW + BOX + MARGIN;
        // A note's line may be wider than the picture.
        let widest_note = notes.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let width = (picture_width + arcs_width + MARGIN).max(2 * MARGIN + widest_note * NOTE_CHAR);
        let height = pictured + notes.len() * NOTE + MARGIN;

        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="weft-diagram" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
        );
        out.push_str(STYLE);
        out.push_str(
            r#"<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z"/></marker></defs>"#,
        );
        self.svg_segments(&mut out, &places);
        self.svg_arcs(&mut out, &places, picture_width);
        self.svg_items(&mut out, &places);
        for (i, note) in notes.iter().enumerate() {
            let y = pictured + (i + 1) * NOTE - 4;
            let _ = write!(
                out,
                r#"<text class="note" x="{MARGIN}" y="{y}">{}</text>"#,
                escape(note)
            );
        }
        out.push_str("</svg>\n");
        out
    }

    /// Boxes for nodes, lines through their rows for pass-throughs.
    fn svg_items(&self, out: &mut String, places: &HashMap<(usize, Item), Place>) {
        for (l, row) in self.rows.iter().enumerate() {
            for &item in row {
                let place = places[&(l, item)];
                match item {
                    Item::Node(idx) => {
                        let node = self.graph.node(idx);
                        let id = escape(&node.id);
                        let kind = node.kind.name();
                        let terminal = if self.graph.is_start(idx) || self.graph.is_end(idx) {
                            " terminal"
                        } else {
                            ""
                        };
                        let (x, y, w) = (place.left, place.top, place.right - place.left);
                        let steps = steps(self.graph, idx);
                        let _ = write!(
                            out,
                            r#"<g class="node{terminal}" data-node="{id}" data-kind="{kind}"{steps}><title>{id} ({kind})</title><rect x="{x}" y="{y}" width="{w}" height="{BOX}" rx="6"/><text x="{}" y="{}" text-anchor="middle">{id}</text></g>"#,
                            place.centre(),
                            y + BOX / 2 + 5,
                        );
                    }
                    Item::Pass(_) => {
                        let x = place.centre();
                        let _ = write!(
                            out,
                            r#"<line class="edge" x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                            place.top,
                            place.top + BOX
                        );
                    }
                }
            }
        }
    }

    /// The edges between consecutive rows: from the bottom of an item to
    /// the top of the next, bent halfway when they move sideways; dashed
    /// when conditional. A pass-through has no arrow head.
    fn svg_segments(&self, out: &mut String, places: &HashMap<(usize, Item), Place>) {
        for (l, segments) in self.segments.iter().enumerate() {
            for segment in segments {
                let from = places[&(l, segment.from)];
                let to = places[&(l + 1, segment.to)];
                let (x1, y1) = (from.centre(), from.top + BOX);
                let (x2, y2) = (to.centre(), to.top);
                let middle = (y1 + y2) / 2;
                let class = if segment.conditional {
                    "edge conditional"
                } else {
                    "edge"
                };
                let head = match segment.to {
                    Item::Node(_) => r#" marker-end="url(#arrow)""#,
                    Item::Pass(_) => "",
                };
                let _ = write!(
                    out,
                    r#"<path class="{class}" d="M{x1},{y1} V{middle} H{x2} V{y2}" fill="none"{head}/>"#
                );
            }
        }
    }

    /// Loop edges: from the source's right side out to the margin, up (or
    /// down) to the target's row, and into its right side.
    fn svg_arcs(
        &self,
        out: &mut String,
        places: &HashMap<(usize, Item), Place>,
        picture_width: usize,
    ) {
        let nodes: HashMap<_, Place> = places
            .iter()
            .filter_map(|(&(_, item), &place)| match item {
                Item::Node(idx) => Some((idx, place)),
                Item::Pass(_) => None,
            })
            .collect();
        for (i, (from, to, label)) in self.back_edges.iter().enumerate() {
            let (Some(&from_place), Some(&to_place)) = (nodes.get(from), nodes.get(to)) else {
                continue;
            };
            let x = picture_width + ARC_STEP * (i + 1);
            let (y1, y2) = (from_place.top + BOX / 2, to_place.top + BOX / 2);
            let title = match label {
                Some(label) => format!("loop when {label}"),
                None => "loop".to_owned(),
            };
            let _ = write!(
                out,
                r#"<path class="edge loop" d="M{},{y1} H{x} V{y2} H{}" fill="none" marker-end="url(#arrow)"><title>{}</title></path>"#,
                from_place.right,
                to_place.right,
                escape(&title)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Format, load_str};

    fn draw(yaml: &str) -> String {
        let (graph, _) = load_str(yaml, Format::Yaml, "t").unwrap_or_else(|e| panic!("{e}"));
        svg(&graph)
    }

    /// The `y` of each node's box, by node id.
    fn tops(svg: &str) -> HashMap<String, usize> {
        svg.split(r#"<g class="node"#)
            .skip(1)
            .map(|group| {
                let id = group.split(r#"data-node=""#).nth(1).unwrap();
                let id = id[..id.find('"').unwrap()].to_owned();
                let y = group.split(r#"<rect x=""#).nth(1).unwrap();
                let y = y.split(r#"y=""#).nth(1).unwrap();
                (id, y[..y.find('"').unwrap()].parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn each_node_is_one_group_and_a_wave_shares_a_row() {
        let svg = draw(
            "nodes:\n  a: {kind: task, handler: a, start: true, next: [b, c]}\n  b: {kind: task, handler: b}\n  c: {kind: script, run: [\"true\"]}\n  d: {kind: task, handler: d, depends_on: [b, c], end: true}\n",
        );
        let tops = tops(&svg);
        assert_eq!(tops.len(), 4, "{svg}");
        assert_eq!(tops["b"], tops["c"], "b and c run in one wave: {svg}");
        assert!(tops["a"] < tops["b"] && tops["c"] < tops["d"], "{svg}");
        assert!(svg.contains(r#"data-node="c" data-kind="script""#), "{svg}");
        assert!(
            svg.contains(r#"<g class="node terminal" data-node="a""#),
            "{svg}"
        );
        assert_eq!(
            svg.matches(r#"marker-end="url(#arrow)""#).count(),
            4,
            "{svg}"
        );
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn a_map_names_the_steps_of_its_chain() {
        let svg = draw(
            r#"
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: draft
    output_key: out
    collect_into: results
    next: done
  draft: { kind: script, run: [draft], next: check }
  check: { kind: script, run: [check] }
  done: { kind: script, run: [done], end: true }
"#,
        );
        assert!(
            svg.contains(r#"data-node="fan" data-kind="map" data-steps="draft check">"#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"data-node="done" data-kind="script">"#),
            "{svg}"
        );
    }

    #[test]
    fn conditional_edges_are_dashed_and_loops_arc_in_the_margin() {
        let svg = draw(
            r#"
nodes:
  draft: { kind: task, handler: draft, start: true, next: review }
  review: { kind: task, handler: review }
  publish: { kind: task, handler: publish, end: true }
edges:
  - { from: review, to: publish, when: "state.score >= 8" }
  - { from: review, to: draft, loop: true, when: "state.score < 8" }
"#,
        );
        assert_eq!(
            svg.matches(r#"class="edge conditional""#).count(),
            1,
            "{svg}"
        );
        assert!(
            svg.contains("<title>loop when state.score &lt; 8</title>"),
            "the loop's condition, escaped: {svg}"
        );
        assert!(
            svg.contains(r#"<text class="note" x="16" y="#) && svg.contains("↺ review → draft"),
            "{svg}"
        );
    }

    #[test]
    fn long_edges_pass_beside_the_boxes_they_skip() {
        let svg = draw(
            "nodes:\n  a: {kind: task, handler: a, start: true, next: [b, d]}\n  b: {kind: task, handler: b, next: c}\n  c: {kind: task, handler: c, next: d}\n  d: {kind: task, handler: d}\n",
        );
        let tops = tops(&svg);
        assert!(tops["a"] < tops["b"] && tops["b"] < tops["c"] && tops["c"] < tops["d"]);
        // a → d passes through b's and c's rows as lines beside them.
        assert_eq!(svg.matches("<line class=\"edge\"").count(), 2, "{svg}");
    }
}
