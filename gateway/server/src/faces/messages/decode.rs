//! A Messages request decoded into the engine's request: system, text,
//! images and documents, `tool_use` and `tool_result` blocks, thinking,
//! client tools, `tool_choice` and the sampling fields. Each message keeps
//! its JSON, for a model that speaks Messages; what the typed view does
//! not hold (`cache_control`, citations, thinking signatures) goes to such
//! a model alone, and a model of another protocol gets a notice instead.
//! Blocks and tools the gateway cannot serve are left out with a notice.

use std::collections::HashSet;

use serde_json::{Value, json};
use toolgate_engine::conversation::{
    Call, CallResult, DeferredTools, Hosted, Item, Media, MediaKind, Native, Notices, Opaque,
    Protocol, Reasoning, RequestError, Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};

use super::super::common::{self, Translated};
use super::super::top::{Top, array_len, parsed};
use super::SERVER_NAME;
use crate::http::ApiError;

const PROTOCOL: Protocol = Protocol::Anthropic;

/// The fields the typed view reads; a model of another protocol does not
/// get the others (each said in a notice).
const TYPED: [&str; 14] = [
    "model",
    "messages",
    "system",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "stream",
    "tools",
    "tool_choice",
    "mcp_servers",
    "tool_set",
    "max_tool_iterations",
    "tool_mode",
];

/// Decodes a Messages request body. One without tools (which a model of
/// Anthropic's protocol may get as it came) is read in one pass over its
/// top-level fields, borrowed, and its conversation is decoded only when a
/// tool loop needs it (a request passed through is never parsed further);
/// any other is decoded whole.
pub fn decode_body(body: &bytes::Bytes) -> Result<Translated, ApiError> {
    if let Some(translated) = without_tools(body) {
        return Ok(translated);
    }
    let original: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    decode(&original)
}

/// A request without tools, decoded from its top-level fields as
/// [`decode`] would (its conversation deferred to [`rest`]); `None` when
/// it has tools, or anything [`decode`] would refuse (which then says
/// why).
fn without_tools(body: &bytes::Bytes) -> Option<Translated> {
    let top: Top = serde_json::from_slice(body).ok()?;
    if let Some(tools) = top.get("tools")
        && tools.get().trim() != "null"
        && array_len(tools) != Some(0)
    {
        return None;
    }
    let model: String = top.field("model").ok()??;
    let message_count = top.get("messages").and_then(array_len).filter(|n| *n > 0)?;
    let value = |name: &str| top.field::<Value>(name).ok();
    let mut request = toolgate_engine::conversation::Request::new(PROTOCOL, model);
    // As `common::shared_fields` reads them.
    request.modified = top
        .0
        .iter()
        .any(|(k, _)| common::EXTENSIONS.contains(&&**k));
    request.params.temperature = value("temperature")?.as_ref().and_then(Value::as_f64);
    request.params.top_p = value("top_p")?.as_ref().and_then(Value::as_f64);
    request.stream = value("stream")? == Some(Value::Bool(true));
    request.include_usage = request.stream;
    request.tool_set = common::tool_set_field(value("tool_set")?.as_ref()).ok()?;
    request.max_tool_iterations =
        common::max_tool_iterations_field(value("max_tool_iterations")?.as_ref()).ok()?;
    let mut notices = Notices::default();
    if value("mcp_servers")?.is_some_and(|s| s.as_array().is_some_and(|a| !a.is_empty())) {
        notices.add(MCP_CONNECTOR);
    }
    if let Some(choice) = value("tool_choice")?.filter(|c| !c.is_null()) {
        let (choice, parallel) = tool_choice(&choice).ok()?;
        request.tool_choice = Some(choice);
        request.params.parallel_tool_calls = parallel;
    }
    let sampling = value("max_tokens")?;
    request.params.max_tokens = sampling.as_ref().and_then(Value::as_u64);
    request.params.stop = stop_sequences(value("stop_sequences")?.as_ref());
    let mut untyped: Vec<String> = top
        .0
        .iter()
        .filter(|(k, _)| !TYPED.contains(&&**k))
        .map(|(k, _)| k.to_string())
        .collect();
    untyped.sort();
    untyped.dedup();
    request.untyped = untyped;
    if request.modified {
        request.fields = top
            .0
            .iter()
            .filter(|(k, _)| !common::EXTENSIONS.contains(&&**k))
            .map(|(k, v)| (k.to_string(), (*v).to_owned()))
            .collect();
    } else {
        request.defer_fields(body.clone());
    }
    // As the whole decoding counts turns: the system prompt is one.
    let system = top.get("system").is_some_and(|s| s.get().trim() != "null");
    request.message_count = message_count + usize::from(system);
    request.defer_rest(rest);
    Some(Translated { request, notices })
}

/// The conversation of a request decoded by [`without_tools`], once a
/// tool loop needs it.
fn rest(request: &mut toolgate_engine::conversation::Request) -> Result<(), RequestError> {
    let system: Option<Value> = parsed("system", request.fields.get("system").map(|v| &**v))?;
    let messages: Option<Value> = parsed("messages", request.fields.get("messages").map(|v| &**v))?;
    let mut notices = Notices::default();
    let turns = conversation(
        system.as_ref(),
        messages.as_ref(),
        &mut HashSet::new(),
        &mut notices,
    )?;
    request.set_turns(turns);
    request.notices.extend(notices);
    Ok(())
}

/// The system prompt and the messages as turns; `referenced` gets the
/// tools a `tool_reference` names.
fn conversation(
    system: Option<&Value>,
    messages: Option<&Value>,
    referenced: &mut HashSet<String>,
    notices: &mut Notices,
) -> Result<Vec<Turn>, RequestError> {
    let mut turns = Vec::new();
    match system {
        None | Some(Value::Null) => {}
        Some(system) => {
            let text =
                text_of(system, "system").map_err(|e| RequestError::new(e).param("system"))?;
            turns.push(Turn::decoded(
                Role::System,
                vec![Item::text(text)],
                PROTOCOL,
                Slot::System,
                raw(system),
            ));
        }
    }
    let input = messages
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            RequestError::new("`messages` is required and must be a non-empty array")
                .param("messages")
        })?;
    for (i, m) in input.iter().enumerate() {
        // A system message that clears at the next user message is gone
        // once one follows it.
        if m["role"] == "system"
            && m["clear_at"] == "next_user_message"
            && input[i + 1..].iter().any(|later| later["role"] == "user")
        {
            continue;
        }
        let turn = message(m, referenced, notices)
            .map_err(|e| RequestError::new(format!("messages[{i}]: {e}")).param("messages"))?;
        turns.extend(turn);
    }
    Ok(turns)
}

/// Decodes a Messages request, read whole.
pub fn decode(req: &Value) -> Result<Translated, ApiError> {
    let (obj, mut request) = common::request_of(req, PROTOCOL)?;
    let mut notices = Notices::default();
    let mut referenced = HashSet::new();
    let turns = conversation(
        obj.get("system"),
        obj.get("messages"),
        &mut referenced,
        &mut notices,
    )?;
    request.set_turns(turns);
    let mut deferred = Vec::new();
    let mut search = None;
    let mut programs = common::asks_for_programs(
        obj.get("tools"),
        |c| c.starts_with("code_execution_"),
        &mut notices,
    );
    for t in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match t["type"].as_str() {
            None | Some("custom") => {}
            // Anthropic's tool search, run by the gateway over the
            // deferred tools (any model can use it).
            Some(kind) if kind.starts_with("tool_search_tool_") => {
                search = Some(t["name"].as_str().unwrap_or(kind).to_owned());
                continue;
            }
            // Anthropic's code execution: the gateway's code mode over
            // the request's tool set (`run_code`), for any model.
            Some(kind) if kind.starts_with("code_execution_") => {
                programs = true;
                notices.add(format!(
                    "`{kind}` is served by the gateway's code mode: the model writes Python that calls the tool set's tools (`run_code`) on the gateway's interpreter; there is no shell, file system or container"
                ));
                continue;
            }
            // A tool Anthropic runs is served by the tool set's tool of
            // its name (`web_search`, `web_fetch`), else left out.
            Some(kind) => {
                let name = t["name"].as_str().unwrap_or(kind);
                notices.unless_served(name, format!(
                    "tool `{name}` of type `{kind}` (a tool Anthropic runs or defines) was left out: only a model of Anthropic's Messages runs it (a tool set with a gateway tool named `{name}` serves it for any model)"
                ));
                request
                    .hosted
                    .push(Hosted::new(name, PROTOCOL, kind, t.clone()));
                continue;
            }
        }
        let tool = ToolDef {
            json: Default::default(),
            name: t["name"].as_str().unwrap_or_default().to_owned(),
            description: Some(t["description"].as_str().unwrap_or_default().into()),
            parameters: t
                .get("input_schema")
                .cloned()
                .unwrap_or(json!({"type": "object"}))
                .into(),
            strict: None,
            native: Some(Box::new(Native {
                protocol: PROTOCOL,
                what: "tools".into(),
                value: t.clone(),
            })),
        };
        // A deferred tool is offered once a `tool_reference` (or a call of
        // it) loaded it; until then a search finds it.
        if t["defer_loading"] == json!(true) && !referenced.contains(&tool.name) {
            deferred.push(tool);
            continue;
        }
        request.tools.push(tool);
    }
    // Without a search, deferred tools wait for a `tool_reference` (the
    // client's own search, as Claude Code's).
    request.deferred = match search {
        Some(search) if !deferred.is_empty() => Some(Box::new(DeferredTools {
            search,
            tools: deferred,
        })),
        _ => None,
    };
    if programs {
        request.tool_mode = Some(toolgate_config::format::SetMode::Code);
    }
    if obj
        .get("mcp_servers")
        .is_some_and(|s| s.as_array().is_some_and(|a| !a.is_empty()))
    {
        notices.add(MCP_CONNECTOR);
    }
    if let Some(choice) = obj.get("tool_choice").filter(|c| !c.is_null()) {
        let (choice, parallel) = tool_choice(choice)?;
        request.tool_choice = Some(choice);
        if parallel.is_some() {
            request.params.parallel_tool_calls = parallel;
        }
    }
    request.params.max_tokens = obj.get("max_tokens").and_then(Value::as_u64);
    request.params.stop = stop_sequences(obj.get("stop_sequences"));
    request.untyped = obj
        .keys()
        .filter(|k| !TYPED.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(Translated { request, notices })
}

const MCP_CONNECTOR: &str = "`mcp_servers` (the MCP connector) is not served here; declare the servers in the gateway and they are its tools";

/// `tool_choice` (not null), with `Some(false)` when it disables parallel
/// tool use.
fn tool_choice(choice: &Value) -> Result<(ToolChoice, Option<bool>), RequestError> {
    let typed = match choice["type"].as_str() {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => ToolChoice::Tool {
            name: choice["name"].as_str().unwrap_or_default().to_owned(),
        },
        _ => {
            return Err(
                RequestError::new("`tool_choice.type` must be auto, any, tool or none")
                    .param("tool_choice"),
            );
        }
    };
    let parallel = (choice["disable_parallel_tool_use"] == json!(true)).then_some(false);
    Ok((typed, parallel))
}

/// `stop_sequences`: its strings.
fn stop_sequences(stop: Option<&Value>) -> Vec<String> {
    stop.and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// An image or document block as media (`None` when its source cannot be
/// carried); a document given as text is its text.
fn media_item(b: &Value) -> Option<Item> {
    let source = &b["source"];
    let media = |kind, source, name: Option<&str>| Item::Media {
        media: Media {
            kind,
            source,
            name: name.map(str::to_owned),
            detail: None,
        },
    };
    match (b["type"].as_str(), source["type"].as_str()) {
        (Some("image"), Some("base64")) => Some(media(
            MediaKind::Image,
            Source::Base64 {
                mime: source["media_type"].as_str()?.to_owned(),
                data: source["data"].as_str()?.to_owned(),
            },
            None,
        )),
        (Some("image"), Some("url")) => Some(media(
            MediaKind::Image,
            Source::Url {
                url: source["url"].as_str()?.to_owned(),
            },
            None,
        )),
        (Some("document"), Some("base64")) => Some(media(
            MediaKind::Document,
            Source::Base64 {
                mime: source["media_type"].as_str()?.to_owned(),
                data: source["data"].as_str()?.to_owned(),
            },
            Some(b["title"].as_str().unwrap_or("document.pdf")),
        )),
        (Some("document"), Some("text")) => {
            let title = b["title"]
                .as_str()
                .map(|t| format!("{t}\n\n"))
                .unwrap_or_default();
            Some(Item::text(format!("{title}{}", source["data"].as_str()?)))
        }
        (Some("document"), Some("content")) => {
            Some(Item::text(text_of(&source["content"], "document").ok()?))
        }
        _ => None,
    }
}

/// A `search_result` block as text.
fn search_result_text(b: &Value) -> String {
    let body = text_of(&b["content"], "search_result").unwrap_or_default();
    format!(
        "{} ({})\n{body}",
        b["title"].as_str().unwrap_or_default(),
        b["source"].as_str().unwrap_or_default()
    )
}

/// A tool result's content: its text, and its images and documents.
fn tool_result_content(
    content: &Value,
    referenced: &mut HashSet<String>,
    notices: &mut Notices,
) -> Result<(String, Vec<Media>), String> {
    let blocks = match content {
        Value::Null => return Ok((String::new(), Vec::new())),
        Value::String(s) => return Ok((s.clone(), Vec::new())),
        Value::Array(b) => b,
        _ => return Err("`tool_result.content` must be a string or an array of blocks".into()),
    };
    let mut text = Vec::new();
    let mut media = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.push(b["text"].as_str().unwrap_or_default().to_owned()),
            Some("image") | Some("document") => match media_item(b) {
                Some(Item::Media { media: m }) => {
                    text.push(format!(
                        "[{} attached below]",
                        b["type"].as_str().unwrap_or("file")
                    ));
                    media.push(m);
                }
                Some(Item::Text { text: t }) => text.push(t),
                _ => notices.add(format!(
                    "a {} in a tool result whose source is not base64, text or a URL was left out",
                    b["type"].as_str().unwrap_or("block")
                )),
            },
            Some("search_result") => text.push(search_result_text(b)),
            Some("tool_reference") => {
                if let Some(name) = b["tool_name"].as_str() {
                    referenced.insert(name.to_owned());
                    text.push(format!("Tool `{name}` is now available."));
                }
            }
            Some(other) => notices.add(format!(
                "`{other}` blocks in tool results are not carried and were left out"
            )),
            None => {}
        }
    }
    Ok((text.join("\n"), media))
}

/// A `tool_use`-shaped block (`id`, `name`, `input`) as a call.
fn call_of(b: &Value) -> Call {
    Call::new(
        b["id"].as_str().unwrap_or_default(),
        b["name"].as_str().unwrap_or_default(),
        b["input"].to_string(),
    )
}

/// One Messages message as a turn, its blocks in order (`None` for a
/// message that says nothing):
/// - text, images and documents as items, search results as text;
/// - an assistant's `tool_use` blocks as calls, and the gateway's own
///   `mcp_tool_use` / `mcp_tool_result` pairs (as it streamed them) as a
///   call and its result;
/// - a user's `tool_result` blocks as results;
/// - a system message (Claude Code ends its requests with one) as a system
///   turn where it stands, its text only;
/// - thinking as reasoning with its signature; blocks of tools Anthropic
///   runs as Messages' own (for an Anthropic model only).
fn message(
    m: &Value,
    referenced: &mut HashSet<String>,
    notices: &mut Notices,
) -> Result<Option<Turn>, String> {
    let role = m["role"].as_str().ok_or("`role` is required")?;
    let role = match role {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        other => {
            return Err(format!(
                "role {other:?} is neither user, assistant nor system"
            ));
        }
    };
    let blocks: Vec<Value> = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => return Err("`content` must be a string or an array of blocks".into()),
    };
    let assistant = role == Role::Assistant;
    let mut items = Vec::new();
    // A message holding the gateway's own calls as it showed them is not
    // what the model wrote: it goes to a model as its items (the calls,
    // then their results), never as it came.
    let mut shown_by_gateway = false;
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => items.push(Item::text(b["text"].as_str().unwrap_or_default())),
            Some("image") | Some("document") if !assistant => match media_item(b) {
                Some(item) => items.push(item),
                None => notices.add(format!(
                    "a {} whose source is a file id or unknown was left out (send it as base64, text or a URL)",
                    b["type"].as_str().unwrap_or("block")
                )),
            },
            Some("search_result") => items.push(Item::text(search_result_text(b))),
            // A tool the model called is loaded from then on.
            Some("tool_use") if assistant => {
                if let Some(name) = b["name"].as_str() {
                    referenced.insert(name.to_owned());
                }
                items.push(Item::Call(call_of(b)));
            }
            // The gateway's search of deferred tools, as it showed it.
            Some("server_tool_use")
                if assistant
                    && b["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("tool_search_tool")) =>
            {
                shown_by_gateway = true;
                items.push(Item::Call(call_of(b)));
            }
            Some("tool_search_tool_result") if assistant => {
                shown_by_gateway = true;
                let names: Vec<String> = b["content"]["tool_references"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["tool_name"].as_str().map(str::to_owned))
                    .collect();
                let text = match &b["content"]["error_code"] {
                    Value::String(code) => format!("Error: the search failed ({code})"),
                    _ => json!({"tools": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})
                        .to_string(),
                };
                referenced.extend(names);
                items.push(Item::Result(CallResult::text(
                    b["tool_use_id"].as_str().unwrap_or_default(),
                    text,
                )));
            }
            Some("mcp_tool_use") if assistant && b["server_name"] == SERVER_NAME => {
                shown_by_gateway = true;
                items.push(Item::Call(call_of(b)));
            }
            Some("mcp_tool_result") if assistant => {
                shown_by_gateway = true;
                // The gateway's call's result (its media stays out).
                let (text, _) = tool_result_content(&b["content"], referenced, notices)?;
                items.push(Item::Result(CallResult {
                    is_error: b["is_error"] == json!(true),
                    ..CallResult::text(b["tool_use_id"].as_str().unwrap_or_default(), text)
                }));
            }
            Some("tool_result") if role == Role::User => {
                let (text, media) = tool_result_content(&b["content"], referenced, notices)?;
                items.push(Item::Result(CallResult {
                    media,
                    is_error: b["is_error"] == json!(true),
                    ..CallResult::text(b["tool_use_id"].as_str().unwrap_or_default(), text)
                }));
            }
            // The model's own reasoning, with the signature only the model
            // that made it can read.
            Some("thinking") => items.push(Item::Reasoning(Reasoning {
                text: b["thinking"].as_str().unwrap_or_default().to_owned(),
                opaque: b["signature"].as_str().map(|s| Opaque::new(PROTOCOL, s)),
            })),
            Some("redacted_thinking") => items.push(Item::Reasoning(Reasoning {
                text: String::new(),
                opaque: Some(Opaque {
                    redacted: true,
                    ..Opaque::new(PROTOCOL, b["data"].as_str().unwrap_or_default())
                }),
            })),
            Some(other) => items.push(Item::Native(Native {
                protocol: PROTOCOL,
                what: format!("`{other}` blocks"),
                value: b.clone(),
            })),
            None => {}
        }
    }
    if role == Role::System {
        // Text only; an empty one (an effort statement) says nothing.
        if !items.iter().all(|i| matches!(i, Item::Text { .. })) {
            notices.add("media in a system message is not carried and was left out");
        }
        let text: String = items
            .iter()
            .filter_map(|i| match i {
                Item::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if text.is_empty() {
            return Ok(None);
        }
        items = vec![Item::text(text)];
    }
    if items.is_empty() {
        return Ok(None);
    }
    if shown_by_gateway {
        return Ok(Some(Turn::new(role, items)));
    }
    Ok(Some(Turn::decoded(
        role,
        items,
        PROTOCOL,
        Slot::Message,
        raw(m),
    )))
}

/// The text of a string or of an array of text blocks.
pub fn text_of(v: &Value, what: &str) -> Result<String, String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => Ok(blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")),
        _ => Err(format!(
            "`{what}` must be a string or an array of text blocks"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_decode_into_turns() {
        let req = json!({
            "model": "m", "max_tokens": 100, "system": "be brief",
            "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "tu1", "name": "t", "input": {"a": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "42"}]},
                    {"type": "text", "text": "thanks"}]},
            ],
            "thinking": {"type": "enabled", "budget_tokens": 50},
        });
        let Translated { request, .. } = decode(&req).unwrap();
        assert_eq!(request.tool_choice, Some(ToolChoice::Required));
        assert_eq!(request.tools[0].parameters, json!({"type": "object"}));
        assert_eq!(request.params.max_tokens, Some(100));
        assert_eq!(request.untyped, ["thinking"]);
        let turns = request.turns();
        assert_eq!(turns[0].role, Role::System);
        assert_eq!(turns[0].raw_for(PROTOCOL).unwrap().slot, Slot::System);
        assert_eq!(
            turns[2].items[2],
            Item::Call(Call::new("tu1", "t", "{\"a\":1}"))
        );
        assert!(
            matches!(&turns[2].items[0], Item::Reasoning(r) if r.opaque.as_ref().unwrap().data == "sig")
        );
        assert_eq!(
            turns[3].items,
            vec![
                Item::Result(CallResult::text("tu1", "42")),
                Item::text("thanks")
            ]
        );
        let bad = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
        let e = decode(&bad).unwrap_err();
        assert!(e.message.contains("messages[0]"), "{}", e.message);
    }
}
