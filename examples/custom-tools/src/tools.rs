//! The example's own tools.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::context::ToolContext;
use toolgate::tool;

/// A temperature scale.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    Celsius,
    Fahrenheit,
}

/// Convert a temperature to another scale.
#[tool(category = "units", read_only)]
pub fn convert_temperature(
    /// The temperature, in the other scale.
    value: f64,
    /// The scale to convert to.
    to: Scale,
) -> f64 {
    let converted = match to {
        Scale::Fahrenheit => value * 9.0 / 5.0 + 32.0,
        Scale::Celsius => (value - 32.0) * 5.0 / 9.0,
    };
    (converted * 100.0).round() / 100.0
}

/// Say who is asking: the project and tool set of the request, which the
/// gateway injects (the model never sees or sets them).
#[tool(category = "demo")]
pub async fn whoami(ctx: &ToolContext) -> Value {
    json!({
        "project": ctx.project,
        "tool_set": ctx.tool_set,
        "request_id": ctx.request_id,
    })
}

/// Reverse the order of the words of a text.
#[tool(name = "reverse_words", category = "text", timeout = "2s")]
pub fn reverse(
    /// The text.
    text: String,
) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("the text has no words".to_owned());
    }
    Ok(text.split_whitespace().rev().collect::<Vec<_>>().join(" "))
}
