//! The gateway's tools and results in MCP's terms.
//!
//! - A tool is listed with its declared input schema (the canonical one,
//!   not OpenAI's strict rendering: MCP clients validate against JSON
//!   Schema as written), its output schema where one is known and its
//!   annotations.
//! - A result keeps its shape: an MCP server's result passes through as it
//!   sent it (content blocks with images, audio and resources, and its
//!   `structuredContent`, binary data included); other structured data goes
//!   out as `structuredContent` with its JSON text as the content a client
//!   without structured support reads; text stays text.
//! - A failed call is a result with `isError: true` and the error in
//!   words (for invalid arguments, every violation), as the spec asks:
//!   the client (or its model) reads it and can correct the call.

use rmcp::model::{CallToolResult, Tool as McpTool};
use serde_json::{Value, json};

use toolgate_engine::executor::{CallError, ToolResult};
use toolgate_engine::tools::tool::{Tool, ToolKind};

/// `tool` as an entry of `tools/list`.
pub fn tool(tool: &Tool) -> Result<McpTool, serde_json::Error> {
    let mut wire = json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.parameters,
    });
    if let Some(obj) = wire.as_object_mut() {
        if let Some(title) = &tool.annotations.title {
            obj.insert("title".into(), json!(title));
        }
        if let Some(schema) = &tool.output_schema {
            obj.insert("outputSchema".into(), schema.clone());
        }
        let annotations = serde_json::to_value(&tool.annotations)?;
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            obj.insert("annotations".into(), annotations);
        }
        // An upstream tool's `_meta` (an MCP App's `ui` resource, among
        // others) reaches the client as the server listed it.
        if let ToolKind::Mcp(mcp) = &tool.kind
            && let Some(meta) = &mcp.meta
        {
            obj.insert("_meta".into(), Value::Object((**meta).clone()));
        }
    }
    serde_json::from_value(wire)
}

/// The search surface's way to call a tool `find_tools` found, for
/// clients whose model may call only listed tools.
pub const CALL_TOOL: &str = "call_tool";

/// The search surface's `call_tool` as an entry of `tools/list`.
pub fn call_tool(set: &str) -> Result<McpTool, serde_json::Error> {
    serde_json::from_value(json!({
        "name": CALL_TOOL,
        "title": "Call a found tool",
        "description": format!(
            "Call a tool of the `{set}` tool set that find_tools returned, by its name, with \
             arguments that match the inputSchema find_tools gave for it."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as find_tools returned it."},
                "arguments": {"type": "object", "description": "The tool's arguments."}
            },
            "required": ["name"],
            "additionalProperties": false
        }
    }))
}

/// A `find_tools` result with each found tool's `inputSchema` (what
/// `schema` gives for its name) added, for MCP clients.
pub fn add_input_schemas(result: &mut ToolResult, schema: impl Fn(&str) -> Option<Value>) {
    let Some(tools) = result
        .data
        .as_mut()
        .and_then(|d| d.get_mut("tools"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for t in tools {
        if let Some(s) = t["name"].as_str().and_then(&schema)
            && let Some(obj) = t.as_object_mut()
        {
            obj.insert("inputSchema".into(), s);
        }
    }
}

/// A finished call as a `tools/call` result.
pub fn result(result: &ToolResult) -> Result<CallToolResult, serde_json::Error> {
    serde_json::from_value(result_json(result))
}

fn result_json(result: &ToolResult) -> Value {
    let mut wire = content_json(result);
    // The guards' notes, read before the content (`guards.*: mark`).
    if !result.notes.is_empty()
        && let Some(content) = wire.get_mut("content").and_then(Value::as_array_mut)
    {
        for (i, note) in result.notes.iter().enumerate() {
            content.insert(i, json!({"type": "text", "text": format!("[{note}]")}));
        }
    }
    wire
}

fn content_json(result: &ToolResult) -> Value {
    if let Some(error) = &result.error {
        return json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": error_text(error)}],
            "isError": true,
        });
    }
    // An MCP server's result, as it sent it.
    if let Some(upstream) = &result.mcp_result
        && upstream.get("content").is_some_and(Value::is_array)
    {
        let mut wire = json!({
            "resultType": "complete",
            "content": upstream["content"],
            "isError": false,
        });
        if let (Some(structured), Some(obj)) = (
            upstream.get("structuredContent").filter(|v| v.is_object()),
            wire.as_object_mut(),
        ) {
            obj.insert("structuredContent".into(), structured.clone());
        }
        return wire;
    }
    let data = result.data.as_ref().unwrap_or(&Value::Null);
    let content = match data {
        Value::String(text) => json!([{"type": "text", "text": text}]),
        Value::Null => json!([]),
        other => json!([{"type": "text", "text": other.to_string()}]),
    };
    // rmcp leaves `resultType` out for clients older than 2026-07-28.
    let mut wire = json!({"resultType": "complete", "content": content, "isError": false});
    if let (true, Some(obj)) = (data.is_object(), wire.as_object_mut()) {
        obj.insert("structuredContent".into(), data.clone());
    }
    wire
}

/// The error as a client reads it: its code and message, and for invalid
/// arguments each violation on a line of its own.
fn error_text(error: &CallError) -> String {
    match error.arg_errors() {
        Some(violations) => {
            let mut text = String::from(
                "Error (invalid_arguments): the arguments do not match the tool's input schema:",
            );
            for v in violations {
                text.push_str(&format!("\n- {}: {} ({})", v.path, v.message, v.rule));
            }
            text
        }
        None => format!("Error ({}): {error}", error.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use toolgate_engine::tools::tool::{ArgError, ToolError};

    fn ok(data: Value, mcp_result: Option<Value>) -> ToolResult {
        let mut r =
            ToolResult::failure(ToolError::Failed(String::new()), std::time::Instant::now());
        r.success = true;
        r.error = None;
        r.data = Some(data);
        r.mcp_result = mcp_result.map(Arc::new);
        r
    }

    #[test]
    fn results_keep_their_shape() {
        let text = serde_json::to_value(result(&ok(json!("hi"), None)).unwrap()).unwrap();
        assert_eq!(text["content"], json!([{"type": "text", "text": "hi"}]));
        assert!(text.get("structuredContent").is_none());

        let structured =
            serde_json::to_value(result(&ok(json!({"t": 21}), None)).unwrap()).unwrap();
        assert_eq!(structured["structuredContent"], json!({"t": 21}));
        assert_eq!(structured["content"][0]["text"], "{\"t\":21}");

        let image = json!([{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]);
        let upstream = json!({"content": image, "structuredContent": {"raw": "iVBORw0KGgo="}});
        let passed = serde_json::to_value(
            result(&ok(json!({"raw": "[binary data]"}), Some(upstream))).unwrap(),
        )
        .unwrap();
        assert_eq!(passed["content"], image);
        assert_eq!(
            passed["structuredContent"],
            json!({"raw": "iVBORw0KGgo="}),
            "as sent, not as summarised for models"
        );
    }

    #[test]
    fn invalid_arguments_are_a_tool_error_listing_each_violation() {
        let r = ToolResult::failure(
            ToolError::InvalidArguments(vec![
                ArgError {
                    path: "/city".into(),
                    rule: "type".into(),
                    message: "42 is not of type \"string\"".into(),
                },
                ArgError {
                    path: "/".into(),
                    rule: "required".into(),
                    message: "\"units\" is a required property".into(),
                },
            ]),
            std::time::Instant::now(),
        );
        let wire = serde_json::to_value(result(&r).unwrap()).unwrap();
        assert_eq!(wire["isError"], true);
        let text = wire["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("/city: 42 is not of type"), "{text}");
        assert!(text.contains("\"units\" is a required property"), "{text}");
    }
}
