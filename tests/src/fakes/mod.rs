//! Deterministic fake models, one per model protocol, for the tests that
//! pin what the gateway sends and answers (the golden corpus, passthrough,
//! opaque state). Unlike the scripted model (`mock_llm`), a fake follows no
//! script in the prompt: what it answers depends only on the shape of the
//! request — which tools it offers and whether its last turn holds tool
//! results — so any client's request gets the same kind of answer:
//!
//! - tools offered and no tool result yet: one call of the first offered
//!   tool (the gateway's `calculator` when it is offered), its arguments
//!   built from the tool's schema (`arguments_for`);
//! - otherwise: a short reasoning and a text answer.
//!
//! Every fake records the requests it was sent, in order, with their
//! headers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod anthropic;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// One request a fake received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub query: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// The requests a fake received, shared with its server task.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Received>>>);

impl Log {
    pub fn push(&self, r: Received) {
        self.0.lock().unwrap().push(r);
    }

    /// Every request so far.
    pub fn all(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }

    /// The requests received from index `from` on.
    pub fn since(&self, from: usize) -> Vec<Received> {
        self.0
            .lock()
            .unwrap()
            .get(from..)
            .unwrap_or_default()
            .to_vec()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The headers of a request, names lower-cased.
pub fn headers_of(headers: &axum::http::HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// What a request shows a fake, whatever its protocol.
#[derive(Debug, Default)]
pub struct Seen {
    /// The offered tools: name and JSON Schema of the arguments.
    pub tools: Vec<(String, Value)>,
    /// The last turn holds tool results.
    pub answered: bool,
}

/// How a fake decides what to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Brain {
    /// By the request's shape (`decide`): the golden corpus.
    Shape,
    /// By the scripted model's script in the last user message
    /// (`mock_llm::scripted`): the end-to-end tests with real clients.
    Script,
}

/// What a fake answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text {
        reasoning: String,
        text: String,
    },
    Call {
        name: String,
        arguments: Value,
    },
    /// Several calls in one turn (the scripted model's).
    Calls(Vec<(String, Value)>),
}

/// The reasoning of every text answer.
pub const REASONING: &str = "The request is clear.";

/// The text of an answer after tool results, and of one without tools.
pub const AFTER_RESULTS: &str = "The tools answered; that is all.";
pub const NO_TOOLS: &str = "Hello from the fake model.";

/// The answer to a request that shows `seen`.
pub fn decide(seen: &Seen) -> Reply {
    if seen.answered || seen.tools.is_empty() {
        let text = if seen.answered {
            AFTER_RESULTS
        } else {
            NO_TOOLS
        };
        return Reply::Text {
            reasoning: REASONING.into(),
            text: text.into(),
        };
    }
    let (name, schema) = seen
        .tools
        .iter()
        .find(|(n, _)| n == "calculator")
        .unwrap_or(&seen.tools[0]);
    Reply::Call {
        name: name.clone(),
        arguments: arguments_for(name, schema),
    }
}

/// Arguments for a tool: `calculator` gets `6*7`; any other tool its
/// required properties, each a value of its type.
pub fn arguments_for(name: &str, schema: &Value) -> Value {
    if name == "calculator" {
        return json!({"expression": "6*7"});
    }
    let mut args = serde_json::Map::new();
    for key in schema["required"].as_array().into_iter().flatten() {
        let Some(key) = key.as_str() else { continue };
        let prop = &schema["properties"][key];
        let ty = match &prop["type"] {
            Value::Array(types) => types.first().and_then(Value::as_str).unwrap_or("string"),
            t => t.as_str().unwrap_or("string"),
        };
        let value = match ty {
            "integer" | "number" => json!(1),
            "boolean" => json!(true),
            "array" => json!([]),
            "object" => json!({}),
            _ => match prop["enum"].as_array().and_then(|e| e.first()) {
                Some(first) => first.clone(),
                None => json!("x"),
            },
        };
        args.insert(key.to_owned(), value);
    }
    Value::Object(args)
}

/// Token counts every fake reports per answer: input, output, cached input,
/// reasoning.
pub const USAGE: (u64, u64, u64, u64) = (120, 30, 100, 10);
