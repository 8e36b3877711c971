//! The tools a loop offers on every model call, each tool's form in each
//! protocol written once for the whole loop (a gateway tool's once for
//! every loop) rather than on every call.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::conversation::{Protocol, ToolDef, raw};

/// The tools a loop offers the model: as specs (read by the structured
/// prompt, the searches and the sub-agents) and as the JSON array a
/// protocol writes into each model call's body. A gateway tool's spec is
/// the tool's own, held by a count, with its JSON once written in each
/// protocol; the client's tools, after them, keep theirs for the loop. The
/// array is put together for each call, so that a loop holds no copy of
/// what its gateway tools keep.
#[derive(Debug)]
pub struct OfferedTools {
    specs: Vec<Arc<ToolDef>>,
    /// Where the client's tools begin.
    client: usize,
}

impl OfferedTools {
    /// The gateway's tools (as their tools hold them), then the client's.
    pub fn new(gateway: Vec<Arc<ToolDef>>, client: &[ToolDef]) -> OfferedTools {
        let mut specs = gateway;
        let start = specs.len();
        specs.extend(client.iter().map(|spec| {
            let mut spec = spec.clone();
            spec.json.share();
            Arc::new(spec)
        }));
        OfferedTools {
            specs,
            client: start,
        }
    }

    pub fn specs(&self) -> &[Arc<ToolDef>] {
        &self.specs
    }

    /// The client's tools among them.
    pub fn client(&self) -> &[Arc<ToolDef>] {
        self.specs.get(self.client..).unwrap_or_default()
    }
}

/// The tools as one JSON array in `protocol` (`write`: one spec as its
/// JSON), each tool's JSON written once per tool where its spec keeps it.
pub fn write_all(
    specs: &[Arc<ToolDef>],
    protocol: Protocol,
    write: fn(&ToolDef) -> Value,
) -> Box<RawValue> {
    let each: Vec<Cow<'_, RawValue>> = specs
        .iter()
        .map(|spec| spec.json.written(protocol, || raw(&write(spec))))
        .collect();
    raw(&each)
}

/// The offered tools' JSON with the client's hosted tools of `protocol`
/// after them (a model of the face's protocol runs them itself); the
/// offered tools alone when there are none.
pub fn with_hosted<'a>(
    tools: Cow<'a, RawValue>,
    hosted: &[crate::conversation::Hosted],
    protocol: Protocol,
) -> Cow<'a, RawValue> {
    let mut extra = hosted
        .iter()
        .filter(|h| h.tool.protocol == protocol)
        .peekable();
    if extra.peek().is_none() {
        return tools;
    }
    let mut all: Vec<Value> = serde_json::from_str(tools.get()).unwrap_or_default();
    all.extend(extra.map(|h| h.tool.value.clone()));
    Cow::Owned(raw(&all))
}
