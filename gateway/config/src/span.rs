//! Where each value of a YAML document stands.
//!
//! serde_yaml reports positions only for the errors it finds itself; the
//! validation that follows parsing needs them too. This walks the document's
//! events once and records the line and column of every node under its path
//! (`tools[0].http.url`), so a validation error can point at the exact value.

/// Paths are trusted text (the configuration's own): a fast hash.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// Positions of the nodes of one YAML document, by path.
#[derive(Debug, Default)]
pub struct SpanIndex {
    positions: HashMap<String, Pos>,
}

impl SpanIndex {
    /// Indexes `text`. A document that does not parse yields an empty index
    /// (serde_yaml reports the syntax error with its own position).
    pub fn new(text: &str) -> SpanIndex {
        let mut builder = Builder::default();
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut builder, false).is_err() {
            return SpanIndex::default();
        }
        SpanIndex {
            positions: builder.positions,
        }
    }

    /// Makes `path` (and what is under it) point where `to` stands: for
    /// values the loader adds, such as the tools of an OpenAPI import.
    pub fn alias(&mut self, path: &str, to: &str) {
        let pos = self.find(to);
        self.positions.insert(path.to_owned(), pos);
    }

    /// The position of the node at `path`, or of its closest indexed
    /// ancestor, or line 1 column 1.
    pub fn find(&self, path: &str) -> Pos {
        let mut path = path;
        loop {
            if let Some(pos) = self.positions.get(path) {
                return *pos;
            }
            match path.rfind(['.', '[']) {
                Some(cut) => path = &path[..cut],
                None => {
                    return self
                        .positions
                        .get("")
                        .copied()
                        .unwrap_or(Pos { line: 1, column: 1 });
                }
            }
        }
    }
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, next: usize },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    positions: HashMap<String, Pos>,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

impl Builder {
    /// Where the next node goes, or `None` when the next node is a mapping key.
    fn next_node_path(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { key: None, .. }) => None,
            Some(Frame::Map { path, key }) => {
                let k = key.take().unwrap_or_default();
                Some(join(path, &k))
            }
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(p)
            }
        }
    }

    /// Records a node's position.
    fn record(&mut self, path: String, mark: Marker) {
        self.positions.insert(
            path,
            Pos {
                line: mark.line(),
                column: mark.col() + 1,
            },
        );
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(value, ..) => match self.next_node_path() {
                // A key: its value, which always follows, is what errors
                // point at.
                None => {
                    if let Some(Frame::Map { key, .. }) = self.stack.last_mut() {
                        *key = Some(value);
                    }
                }
                Some(path) => self.record(path, mark),
            },
            Event::Alias(_) => {
                if let Some(path) = self.next_node_path() {
                    self.record(path, mark);
                }
            }
            Event::MappingStart(..) => {
                // A complex (mapping) key is not something these formats use;
                // index it under an empty key so the walk stays in step.
                let path = self.next_node_path().unwrap_or_default();
                self.record(path.clone(), mark);
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.next_node_path().unwrap_or_default();
                self.record(path.clone(), mark);
                self.stack.push(Frame::Seq { path, next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_values_and_falls_back_to_ancestors() {
        let text = "tools:\n  - name: a\n    http:\n      url: \"x\"\n  - name: b\n    parameters: {type: object}\n";
        let idx = SpanIndex::new(text);
        assert_eq!(
            idx.find("tools[0].name"),
            Pos {
                line: 2,
                column: 11
            }
        );
        assert_eq!(
            idx.find("tools[0].http.url"),
            Pos {
                line: 4,
                column: 12
            }
        );
        assert_eq!(
            idx.find("tools[1].name"),
            Pos {
                line: 5,
                column: 11
            }
        );
        assert_eq!(
            idx.find("tools[1].parameters.type"),
            Pos {
                line: 6,
                column: 24
            }
        );
        // Missing leaf: the closest ancestor.
        assert_eq!(
            idx.find("tools[1].parameters.required"),
            Pos {
                line: 6,
                column: 17
            }
        );
    }

    #[test]
    fn broken_yaml_gives_an_empty_index() {
        let idx = SpanIndex::new("a: [\n");
        assert_eq!(idx.find("a"), Pos { line: 1, column: 1 });
    }
}
