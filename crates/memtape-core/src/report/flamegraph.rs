//! Flame graphs of a per-stack table: folded stacks (`outer;...;inner bytes`, the input
//! of flamegraph.pl, inferno and speedscope) and a self-contained HTML page.
//!
//! The page carries its data in a `<script type="application/json">` block whose strings
//! escape `<`, `>` and `&`; the inline script reads it with `JSON.parse` and builds the
//! frames with `textContent` and `setAttribute`, so no name from the capture is ever
//! parsed as markup or code.

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use super::html::escape;
use super::import_frames::import_mode_note;
use super::json::JsonWriter;
use super::live_by_stack::StackTotal;
use super::symbols::{FrameKey, Symbols};
use super::units::human_size;

/// The frame shown for blocks allocated with no Python frame (stack 0).
pub const NO_PYTHON_FRAME: &str = "[no Python frame]";

/// The script and styles of the flame graph, inlined into every page.
pub(crate) const FLAMEGRAPH_JS: &str = include_str!("assets/flamegraph.js");
pub(crate) const REPORT_CSS: &str = include_str!("assets/report.css");

/// Nodes below this share of the total are left out of the HTML (they are narrower than
/// a pixel unless zoomed in 100,000 times); their bytes still count in their parent.
const MIN_NODE_FRACTION: f64 = 1e-5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Label {
    Root,
    NoPython,
    Frame(FrameKey),
}

#[derive(Debug)]
struct Node {
    label: Label,
    value: u64,
    children: Vec<u32>,
}

/// A per-stack table as a tree of frames, outermost at the root.
#[derive(Debug)]
pub struct FlameGraph<'s> {
    symbols: &'s Symbols,
    nodes: Vec<Node>,
}

fn frame_label(symbols: &Symbols, label: Label) -> String {
    match label {
        Label::Root => "all".to_owned(),
        Label::NoPython => NO_PYTHON_FRAME.to_owned(),
        Label::Frame(k) => {
            let f = symbols.resolve(k);
            let unresolved = symbols.unresolved_name();
            if f.function == unresolved && f.filename == unresolved {
                unresolved.to_owned()
            } else {
                format!("{} ({}:{})", f.function, f.filename, f.line)
            }
        }
    }
}

/// A frame label safe in folded output: `;` separates frames and a line ends a stack.
fn folded_label(symbols: &Symbols, label: Label) -> String {
    frame_label(symbols, label).replace([';', '\n', '\r'], ",")
}

fn outer_first(symbols: &Symbols, stack: u32, keys: &mut Vec<FrameKey>) -> Vec<Label> {
    keys.clear();
    symbols.frame_keys_into(stack, keys);
    if keys.is_empty() {
        vec![Label::NoPython]
    } else {
        keys.iter().rev().map(|&k| Label::Frame(k)).collect()
    }
}

impl<'s> FlameGraph<'s> {
    /// The tree of `table` (stacks with no bytes are left out).
    pub fn new(table: &[StackTotal], symbols: &'s Symbols) -> Self {
        let mut nodes = vec![Node {
            label: Label::Root,
            value: 0,
            children: Vec::new(),
        }];
        let mut index: FxHashMap<(u32, Label), u32> = FxHashMap::default();
        let mut keys = Vec::new();
        for t in table.iter().filter(|t| t.bytes > 0) {
            nodes[0].value += t.bytes;
            let mut at = 0u32;
            for label in outer_first(symbols, t.stack, &mut keys) {
                let next = nodes.len() as u32;
                let child = *index.entry((at, label)).or_insert(next);
                if child == next {
                    nodes.push(Node {
                        label,
                        value: 0,
                        children: Vec::new(),
                    });
                    nodes[at as usize].children.push(child);
                }
                nodes[child as usize].value += t.bytes;
                at = child;
            }
        }
        let mut graph = FlameGraph { symbols, nodes };
        graph.sort_children();
        graph
    }

    /// Biggest child first, then by label, so the layout is stable.
    fn sort_children(&mut self) {
        let labels: Vec<String> = self
            .nodes
            .iter()
            .map(|n| frame_label(self.symbols, n.label))
            .collect();
        let values: Vec<u64> = self.nodes.iter().map(|n| n.value).collect();
        for n in &mut self.nodes {
            n.children.sort_by(|&a, &b| {
                values[b as usize]
                    .cmp(&values[a as usize])
                    .then_with(|| labels[a as usize].cmp(&labels[b as usize]))
            });
        }
    }

    /// Bytes of the whole graph.
    pub fn total(&self) -> u64 {
        self.nodes[0].value
    }

    /// Number of frames in the tree (the root included).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The graph as the JSON the page's script reads: `strings`, `frames` as
    /// `[function, file, line]` string indexes, and `nodes` in preorder as
    /// `[frame (-1: the root), bytes, number of children]`.
    pub(crate) fn to_json(&self) -> String {
        let min = (self.total() as f64 * MIN_NODE_FRACTION) as u64;
        let mut strings: FxHashMap<&str, u64> = FxHashMap::default();
        let mut string_list: Vec<&str> = Vec::new();
        let mut frames: FxHashMap<Label, i64> = FxHashMap::default();
        let mut frame_list: Vec<(u64, u64, u32)> = Vec::new();
        let mut intern = |s: &'s str| -> u64 {
            *strings.entry(s).or_insert_with(|| {
                string_list.push(s);
                string_list.len() as u64 - 1
            })
        };
        let mut preorder: Vec<(i64, u64, usize)> = Vec::new();
        let mut stack = vec![0u32];
        while let Some(i) = stack.pop() {
            let n = &self.nodes[i as usize];
            let frame = match n.label {
                Label::Root => -1,
                label => *frames.entry(label).or_insert_with(|| {
                    let (function, file, line) = match label {
                        Label::Frame(k) => {
                            let f = self.symbols.resolve(k);
                            (f.function, f.filename, f.line)
                        }
                        _ => (NO_PYTHON_FRAME, "", 0),
                    };
                    frame_list.push((intern(function), intern(file), line));
                    frame_list.len() as i64 - 1
                }),
            };
            let kept: Vec<u32> = n
                .children
                .iter()
                .copied()
                .filter(|&c| self.nodes[c as usize].value >= min.max(1))
                .collect();
            preorder.push((frame, n.value, kept.len()));
            stack.extend(kept.iter().rev());
        }
        let mut w = JsonWriter::new();
        w.begin_object();
        write_frame_tables(&mut w, &string_list, &frame_list);
        w.key("nodes").begin_array();
        for &(frame, value, children) in &preorder {
            w.begin_array()
                .int(frame)
                .uint(value)
                .uint(children as u64)
                .end_array();
        }
        w.end_array().end_object();
        w.finish()
    }
}

/// Writes the `strings` and `frames` (`[function, file, line]` string indexes) keys of a
/// page's data object.
pub(crate) fn write_frame_tables(w: &mut JsonWriter, strings: &[&str], frames: &[(u64, u64, u32)]) {
    w.key("strings").begin_array();
    for s in strings {
        w.string(s);
    }
    w.end_array().key("frames").begin_array();
    for &(function, file, line) in frames {
        w.begin_array()
            .uint(function)
            .uint(file)
            .uint(u64::from(line))
            .end_array();
    }
    w.end_array();
}

/// Folded stacks, one line per distinct path: `outer;...;inner bytes`, sorted. A frame
/// reads `function (file:line)`; `;` and line breaks in names become `,`.
pub fn folded(table: &[StackTotal], symbols: &Symbols) -> String {
    let mut paths: FxHashMap<String, u64> = FxHashMap::default();
    let mut keys = Vec::new();
    let mut path = String::new();
    for t in table.iter().filter(|t| t.bytes > 0) {
        path.clear();
        for (i, label) in outer_first(symbols, t.stack, &mut keys)
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                path.push(';');
            }
            path.push_str(&folded_label(symbols, label));
        }
        match paths.get_mut(path.as_str()) {
            Some(v) => *v += t.bytes,
            None => {
                paths.insert(path.clone(), t.bytes);
            }
        }
    }
    let mut lines: Vec<(String, u64)> = paths.into_iter().collect();
    lines.sort_unstable();
    let mut out = String::new();
    for (path, bytes) in lines {
        let _ = writeln!(out, "{path} {bytes}");
    }
    out
}

/// The flame graph block for a page: toolbar, frames and data. `id` must be unique in
/// the page; the page must also include [`FLAMEGRAPH_JS`] once, after every block, and a
/// `<div id="fg-tip">`.
pub(crate) fn flame_section(id: &str, graph: &FlameGraph<'_>) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        concat!(
            "<div class=\"fg\" id=\"{id}\" data-total-bytes=\"{total}\">\n",
            "<div class=\"fg-bar\"><input type=\"search\" class=\"fg-search\" ",
            "placeholder=\"Search functions and files\" aria-label=\"Search\">",
            "<button type=\"button\" class=\"fg-reset\">Reset zoom</button>",
            "<span class=\"fg-matched\"></span></div>\n",
            "<div class=\"fg-frames\"></div>\n",
            "<script type=\"application/json\" class=\"fg-data\">{json}</script>\n",
            "</div>\n"
        ),
        id = escape(id),
        total = graph.total(),
        json = graph.to_json(),
    );
    out
}

/// A self-contained page (no network) with the flame graph of `table`: click to zoom,
/// search, tooltips; widths proportional to bytes.
pub fn flamegraph_html(
    table: &[StackTotal],
    symbols: &Symbols,
    title: &str,
    subtitle: &str,
) -> String {
    let graph = FlameGraph::new(table, symbols);
    let mut out = String::new();
    let _ = write!(
        out,
        concat!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
            "<title>{title}</title>\n<style>\n{css}</style>\n</head>\n<body>\n",
            "<h1 id=\"title\">{title}</h1>\n",
            "<p class=\"subtitle\" id=\"subtitle\">{subtitle}</p>\n",
            "<p class=\"note\">Total: <span id=\"total-bytes\" data-bytes=\"{total}\">{human}</span>. ",
            "Width is proportional to bytes; click a frame to zoom in.</p>\n",
            "{imports}{section}",
            "<div id=\"fg-tip\"></div>\n<script>\n{js}</script>\n</body>\n</html>\n"
        ),
        title = escape(title),
        subtitle = escape(subtitle),
        css = REPORT_CSS,
        total = graph.total(),
        human = human_size(graph.total()),
        imports = {
            let mut note = String::new();
            import_mode_note(&mut note, symbols.import_frames());
            note
        },
        section = flame_section("flamegraph", &graph),
        js = FLAMEGRAPH_JS,
    );
    out
}

#[cfg(test)]
mod tests;
