//! The tools a loop offers on every model call, each protocol's form
//! written once for the whole loop rather than on every call.

use std::borrow::Cow;
use std::sync::OnceLock;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::conversation::{Protocol, ToolDef, raw};

/// The tools a loop offers the model: as specs (read by the structured
/// prompt, the searches and the sub-agents) and as the JSON array a
/// protocol writes into each model call's body, made on first use.
#[derive(Debug)]
pub struct OfferedTools {
    specs: Vec<ToolDef>,
    json: OnceLock<(Protocol, Box<RawValue>)>,
}

impl OfferedTools {
    pub fn new(specs: Vec<ToolDef>) -> OfferedTools {
        OfferedTools {
            specs,
            json: OnceLock::new(),
        }
    }

    pub fn specs(&self) -> &[ToolDef] {
        &self.specs
    }

    /// The tools as `protocol` writes them (`write`: one spec as its JSON),
    /// made once per loop.
    pub fn json(&self, protocol: Protocol, write: fn(&ToolDef) -> Value) -> Cow<'_, RawValue> {
        match self.json.get() {
            Some((p, json)) if *p == protocol => Cow::Borrowed(json),
            Some(_) => Cow::Owned(write_all(&self.specs, protocol, write)),
            None => Cow::Borrowed(
                &self
                    .json
                    .get_or_init(|| (protocol, write_all(&self.specs, protocol, write)))
                    .1,
            ),
        }
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
