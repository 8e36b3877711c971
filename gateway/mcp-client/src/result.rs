//! Turning an MCP `tools/call` result into the gateway's uniform result.
//!
//! - `structuredContent`, when present, is the data (it is what the tool
//!   declares as its output), with binary data summarised wherever it
//!   appears in it (an image object's `data`, a resource's `blob`, any
//!   base64 `data`/`blob` string, `data:` URLs);
//! - otherwise the content blocks become one text: text blocks as they are,
//!   images, audio and resources as a one-line summary (a model cannot read
//!   base64, and it would fill its context);
//! - `isError: true` is a failed result whose message is that text.
//!
//! The result is read in its JSON wire form, so content types this code does
//! not know are still summarised by their `type`.

use serde_json::Value;

use toolgate::ToolError;

/// How many characters of an embedded text resource are shown.
const RESOURCE_PREVIEW_CHARS: usize = 200;

/// Maps a `CallToolResult` (wire JSON) to the call's outcome.
pub fn map_result(result: &Value, server: &str) -> Result<Value, ToolError> {
    let text = content_text(result.get("content"));
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if text.trim().is_empty() {
            format!("the tool of MCP server `{server}` reported an error without a message")
        } else {
            text
        };
        return Err(ToolError::Failed(message));
    }
    match result.get("structuredContent") {
        Some(Value::Null) | None => Ok(Value::String(text)),
        Some(structured) => Ok(without_binary(structured)),
    }
}

/// Base64 shorter than this stays as it is: it costs a model little and may
/// be an identifier.
const BINARY_MIN_CHARS: usize = 256;

/// `value` with each binary payload replaced by a one-line summary (with
/// the `mimeType` of the object holding it, when it has one).
fn without_binary(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mime = map.get("mimeType").and_then(Value::as_str);
            Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = match v {
                            Value::String(s)
                                if matches!(k.as_str(), "data" | "blob") && is_base64(s) =>
                            {
                                Value::String(binary_summary(s, mime))
                            }
                            other => without_binary(other),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(without_binary).collect()),
        Value::String(s) if s.len() >= BINARY_MIN_CHARS && s.starts_with("data:") => {
            match s.split_once(";base64,") {
                Some((kind, data)) if is_base64(data) => {
                    Value::String(binary_summary(data, Some(&kind["data:".len()..])))
                }
                _ => value.clone(),
            }
        }
        other => other.clone(),
    }
}

/// Long enough to matter, and nothing but base64 (line breaks allowed).
fn is_base64(s: &str) -> bool {
    s.len() >= BINARY_MIN_CHARS
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_' | b'\r' | b'\n')
        })
}

fn binary_summary(data: &str, mime: Option<&str>) -> String {
    let size = base64_size(Some(&Value::String(data.to_owned())));
    match mime {
        Some(m) => format!("[binary data: {m}, {size}]"),
        None => format!("[binary data, {size}]"),
    }
}

/// The content blocks as one text, blocks separated by a newline.
fn content_text(content: Option<&Value>) -> String {
    let Some(blocks) = content.and_then(Value::as_array) else {
        return String::new();
    };
    blocks
        .iter()
        .map(describe_block)
        .collect::<Vec<_>>()
        .join("\n")
}

fn describe_block(block: &Value) -> String {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match kind {
        "text" => str_of(block, "text").unwrap_or_default(),
        "image" | "audio" => format!(
            "[{kind}: {}, {}]",
            str_of(block, "mimeType").unwrap_or_else(|| "unknown type".into()),
            base64_size(block.get("data"))
        ),
        "resource" => {
            let res = block.get("resource").unwrap_or(&Value::Null);
            let uri = str_of(res, "uri").unwrap_or_default();
            let mime = str_of(res, "mimeType")
                .map(|m| format!(", {m}"))
                .unwrap_or_default();
            match (str_of(res, "text"), res.get("blob")) {
                (Some(text), _) => {
                    let total = text.chars().count();
                    if total <= RESOURCE_PREVIEW_CHARS {
                        format!("[resource {uri}{mime}]\n{text}")
                    } else {
                        let preview: String = text.chars().take(RESOURCE_PREVIEW_CHARS).collect();
                        format!("[resource {uri}{mime}, {total} characters]\n{preview}…")
                    }
                }
                (None, blob) => format!("[resource {uri}{mime}, {}]", base64_size(blob)),
            }
        }
        "resource_link" => {
            let uri = str_of(block, "uri").unwrap_or_default();
            let name = str_of(block, "name").unwrap_or_default();
            let desc = str_of(block, "description")
                .map(|d| format!(" — {d}"))
                .unwrap_or_default();
            format!("[resource link {name}: {uri}{desc}]")
        }
        other => format!("[{other} content]"),
    }
}

/// The decoded size of base64 data, for humans.
fn base64_size(data: Option<&Value>) -> String {
    let Some(s) = data.and_then(Value::as_str) else {
        return "no data".to_owned();
    };
    let padding = s.bytes().rev().take_while(|&b| b == b'=').count();
    let bytes = (s.len() / 4 * 3).saturating_sub(padding);
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn text_blocks_are_joined() {
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(map_result(&r, "s").unwrap(), json!("a\nb"));
        assert_eq!(map_result(&json!({}), "s").unwrap(), json!(""));
    }

    #[test]
    fn structured_content_is_preferred() {
        let r = json!({
            "content": [{"type": "text", "text": "{\"result\": 3}"}],
            "structuredContent": {"result": 3}
        });
        assert_eq!(map_result(&r, "s").unwrap(), json!({"result": 3}));
    }

    #[test]
    fn is_error_fails_with_the_text() {
        let r = json!({"content": [{"type": "text", "text": "bad input"}], "isError": true});
        match map_result(&r, "s") {
            Err(ToolError::Failed(m)) => assert_eq!(m, "bad input"),
            other => panic!("{other:?}"),
        }
        let r = json!({"content": [], "isError": true});
        let e = map_result(&r, "srv").unwrap_err().to_string();
        assert!(e.contains("`srv`"), "{e}");
    }

    #[test]
    fn binary_content_is_summarised() {
        let r = json!({"content": [
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///x.bin", "blob": "AAAAAAAA", "mimeType": "application/octet-stream"}},
            {"type": "resource", "resource": {"uri": "memo://a", "text": "short"}},
            {"type": "resource_link", "uri": "file:///r.txt", "name": "r.txt"},
            {"type": "hologram"}
        ]});
        assert_eq!(
            map_result(&r, "s").unwrap(),
            json!(
                "[image: image/png, 8 bytes]\n[audio: audio/wav, 3 bytes]\n[resource file:///x.bin, application/octet-stream, 6 bytes]\n[resource memo://a]\nshort\n[resource link r.txt: file:///r.txt]\n[hologram content]"
            )
        );
    }

    #[test]
    fn binary_data_in_structured_content_is_summarised_wherever_it_is() {
        let png = "iVBORw0KGgo".repeat(100);
        let r = json!({
            "content": [{"type": "text", "text": "ignored"}],
            "structuredContent": {
                "content": [{"type": "image", "data": png, "mimeType": "image/png"}],
                "files": [{"name": "a.bin", "blob": png}],
                "preview": format!("data:image/png;base64,{png}"),
                "id": "c2hvcnQ=",
                "note": "plain text stays",
            }
        });
        let out = map_result(&r, "s").unwrap();
        assert_eq!(
            out["content"][0]["data"],
            "[binary data: image/png, 825 bytes]"
        );
        assert_eq!(out["content"][0]["mimeType"], "image/png");
        assert_eq!(out["files"][0]["blob"], "[binary data, 825 bytes]");
        assert_eq!(out["preview"], "[binary data: image/png, 825 bytes]");
        assert_eq!(out["id"], "c2hvcnQ=", "short values stay");
        assert_eq!(out["note"], "plain text stays");
    }

    #[test]
    fn long_text_resources_are_previewed() {
        let text = "x".repeat(1000);
        let r = json!({"content": [{"type": "resource", "resource": {"uri": "memo://d", "mimeType": "text/plain", "text": text}}]});
        let out = map_result(&r, "s").unwrap();
        let out = out.as_str().unwrap();
        assert!(out.starts_with("[resource memo://d, text/plain, 1000 characters]\n"));
        assert!(out.len() < 300);
    }
}
