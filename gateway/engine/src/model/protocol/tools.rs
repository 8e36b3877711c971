//! The tools a loop offers on every model call, each tool's form in each
//! protocol written once for the whole loop (a gateway tool's once for
//! every loop) rather than on every call.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::conversation::{Protocol, ToolDef, raw};

/// The tools a loop offers the model: as specs (read by the structured
/// prompt, the searches and the sub-agents) and as the JSON array a
/// protocol writes into each model call's body. Each spec keeps its JSON
/// once written; the array is put together for each call, so that a loop
/// does not hold a copy of what its gateway tools already keep.
#[derive(Debug)]
pub struct OfferedTools {
    specs: Vec<ToolDef>,
}

impl OfferedTools {
    pub fn new(mut specs: Vec<ToolDef>) -> OfferedTools {
        for spec in &mut specs {
            spec.json.share();
        }
        OfferedTools { specs }
    }

    pub fn specs(&self) -> &[ToolDef] {
        &self.specs
    }
}

/// The tools as one JSON array in `protocol` (`write`: one spec as its
/// JSON), each tool's JSON written once per tool where its spec keeps it.
pub fn write_all(
    specs: &[ToolDef],
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
