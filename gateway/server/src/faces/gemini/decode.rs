//! A Gemini `generateContent` request decoded into the engine's request:
//! `contents` (text, inline and file data, function calls and responses,
//! thoughts and their signatures), `systemInstruction`, function
//! declarations, `toolConfig` and `generationConfig`. Each content keeps
//! its JSON for a model that speaks Gemini; what the typed view does not
//! hold (`executableCode`, `videoMetadata`, a signature's place) goes to
//! such a model alone, and a model of another protocol gets a notice.
//!
//! Google's Python SDK writes nested fields in snake_case
//! (`inline_data.mime_type`), its JS SDK and Gemini CLI in lowerCamelCase:
//! both are read, as the API reads both.

use serde_json::{Map, Value, json};
use toolgate_engine::conversation::{
    Call, CallResult, Hosted, Item, Media, MediaKind, Native, Notices, Opaque, Protocol, Reasoning,
    Request, ResponseFormat, Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};
use toolgate_engine::model::protocol::gemini::MADE_ID;

use super::super::common::Translated;
use crate::http::ApiError;

const PROTOCOL: Protocol = Protocol::Gemini;

/// The fields of a part the typed view reads.
const PART_READ: [&str; 11] = [
    "text",
    "thought",
    "thoughtSignature",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
];

/// The most contents a request may have (the engine's message cap applies
/// too; this bounds the work before it).
const MAX_CONTENTS: usize = 100_000;

/// The request's top-level fields the typed view reads or that only a
/// model of Gemini takes as they are (every other protocol is told).
const TYPED: [&str; 9] = [
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "tool_set",
    "max_tool_iterations",
    "tool_mode",
];

/// A field by its lowerCamelCase name or its snake_case one.
pub fn field<'a>(v: &'a Value, camel: &str) -> Option<&'a Value> {
    v.get(camel)
        .or_else(|| v.get(snake(camel).as_str()))
        .filter(|v| !v.is_null())
}

fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The name of a top-level field in lowerCamelCase.
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes a request for `model`; `stream` from the method.
pub fn decode(req: &Value, model: &str, stream: bool) -> Result<Translated, ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    let mut request = Request::new(PROTOCOL, model);
    request.stream = stream;
    request.include_usage = stream;
    super::super::common::shared_fields(obj, &mut request)?;
    // `temperature` and `topP` live in `generationConfig` here.
    request.params.temperature = None;
    request.params.top_p = None;
    request.stream = stream;
    request.include_usage = stream;
    let mut notices = Notices::default();
    let mut turns = Vec::new();
    if let Some(system) = field(req, "systemInstruction") {
        let text = parts_of(system)
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        turns.push(Turn::decoded(
            Role::System,
            vec![Item::text(text)],
            PROTOCOL,
            Slot::System,
            raw(system),
        ));
    }
    let contents = field(req, "contents")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("`contents` is required and must be a non-empty array")
                .param("contents")
        })?;
    if contents.len() > MAX_CONTENTS {
        return Err(ApiError::bad_request(format!(
            "`contents` has {} entries; at most {MAX_CONTENTS} are read",
            contents.len()
        ))
        .param("contents"));
    }
    request.message_count = contents.len();
    // The calls of the model content before, by position: a function
    // response names its call by id, else by name in order.
    let mut before: Vec<Call> = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        let role = match c["role"].as_str() {
            None | Some("user" | "function" | "tool") => Role::User,
            Some("model") => Role::Assistant,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "contents[{i}].role is `{other}`; Gemini's roles are `user` and `model`"
                ))
                .param("contents"));
            }
        };
        let items = content_items(c, i, role, &mut before, &mut request.untyped)
            .map_err(|e| ApiError::bad_request(format!("contents[{i}]: {e}")).param("contents"))?;
        turns.push(Turn::decoded(role, items, PROTOCOL, Slot::Message, raw(c)));
    }
    request.set_turns(turns);
    tools(req, &mut request, &mut notices)?;
    if let Some(config) = field(req, "toolConfig") {
        tool_config(config, &mut request)?;
    }
    if let Some(config) = field(req, "generationConfig") {
        generation_config(config, &mut request)?;
    }
    let mut untyped: Vec<String> = obj
        .keys()
        .filter(|k| !TYPED.contains(&k.as_str()) && !TYPED.contains(&camel(k).as_str()))
        .cloned()
        .collect();
    // What the typed view does not read inside the fields it does: a
    // model of another protocol is told it was left out.
    untyped.append(&mut request.untyped);
    request.untyped = untyped;
    Ok(Translated { request, notices })
}

fn parts_of(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

/// Standard base64 (the Python SDK writes the URL-safe alphabet).
fn standard_base64(data: &str) -> String {
    data.replace('-', "+").replace('_', "/")
}

fn kind_of(mime: &str) -> MediaKind {
    match mime.split('/').next().unwrap_or_default() {
        "image" => MediaKind::Image,
        "audio" => MediaKind::Audio,
        "video" => MediaKind::Video,
        _ if mime == "application/pdf" || mime.starts_with("text/") => MediaKind::Document,
        _ => MediaKind::File,
    }
}

/// Inline or file data as media.
fn media(p: &Value) -> Option<Media> {
    if let Some(d) = field(p, "inlineData") {
        let mime = field(d, "mimeType")
            .and_then(Value::as_str)
            .unwrap_or("application/octet-stream");
        return Some(Media {
            kind: kind_of(mime),
            source: Source::Base64 {
                mime: mime.to_owned(),
                data: standard_base64(field(d, "data").and_then(Value::as_str).unwrap_or_default()),
            },
            name: field(d, "displayName")
                .and_then(Value::as_str)
                .map(str::to_owned),
            detail: None,
        });
    }
    let d = field(p, "fileData")?;
    let mime = field(d, "mimeType")
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream");
    Some(Media {
        kind: kind_of(mime),
        source: Source::Url {
            url: field(d, "fileUri")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        },
        name: field(d, "displayName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        detail: None,
    })
}

/// The text a function response gives the model: its `output` (or
/// `error`) when that is text, else the whole response object as JSON.
fn response_text(response: &Value) -> (String, bool) {
    let error = response.get("error").filter(|e| !e.is_null());
    match (response.get("output"), error) {
        (_, Some(Value::String(e))) => (e.clone(), true),
        (_, Some(e)) => (e.to_string(), true),
        (Some(Value::String(s)), None) => (s.clone(), false),
        (Some(v), None) => (v.to_string(), false),
        (None, None) => (response.to_string(), false),
    }
}

/// The items of content `i`. `before` holds the calls of the latest model
/// content (a user content's function responses answer them).
fn content_items(
    c: &Value,
    i: usize,
    role: Role,
    before: &mut Vec<Call>,
    extras: &mut Vec<String>,
) -> Result<Vec<Item>, String> {
    let parts = c
        .get("parts")
        .and_then(Value::as_array)
        .ok_or("`parts` must be an array")?;
    let mut items = Vec::with_capacity(parts.len());
    let mut calls = Vec::new();
    let mut answered = vec![false; before.len()];
    for (j, p) in parts.iter().enumerate() {
        if !p.is_object() {
            return Err(format!("parts[{j}] is not an object"));
        }
        // A part's metadata (`videoMetadata`, `mediaResolution`…) only a
        // model of Gemini reads.
        for (k, _) in p.as_object().into_iter().flatten() {
            let k = camel(k);
            if !PART_READ.contains(&k.as_str()) {
                let name = format!("contents[].parts[].{k}");
                if !extras.contains(&name) {
                    extras.push(name);
                }
            }
        }
        let signature = field(p, "thoughtSignature")
            .and_then(Value::as_str)
            .map(|s| Opaque::new(PROTOCOL, s));
        if let Some(f) = field(p, "functionCall") {
            let name = f["name"]
                .as_str()
                .ok_or(format!("parts[{j}].functionCall has no `name`"))?;
            let id = match f["id"].as_str() {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => format!("{MADE_ID}{i}_{j}"),
            };
            let args = f.get("args").cloned().unwrap_or_else(|| json!({}));
            let mut call = Call::new(id, name, args.to_string());
            call.opaque = signature;
            calls.push(call.clone());
            items.push(Item::Call(call));
            continue;
        }
        if let Some(f) = field(p, "functionResponse") {
            let name = f["name"].as_str().unwrap_or_default();
            // Its call: by id, else the first unanswered call of its name.
            let found = match f["id"].as_str().filter(|id| !id.is_empty()) {
                Some(id) => before.iter().position(|c| c.id == id),
                None => before
                    .iter()
                    .enumerate()
                    .position(|(k, c)| !answered[k] && c.name == name),
            };
            let call_id = match (found, f["id"].as_str()) {
                (Some(k), _) => {
                    answered[k] = true;
                    before[k].id.clone()
                }
                (None, Some(id)) if !id.is_empty() => id.to_owned(),
                (None, _) => format!("{MADE_ID}{i}_{j}"),
            };
            let response = f.get("response").cloned().unwrap_or_else(|| json!({}));
            let (text, is_error) = response_text(&response);
            let media = f
                .get("parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(media)
                .collect();
            items.push(Item::Result(CallResult {
                call_id,
                name: Some(name.to_owned()),
                text,
                media,
                is_error,
            }));
            continue;
        }
        if let Some(text) = p.get("text").and_then(Value::as_str) {
            if p["thought"] == json!(true) {
                items.push(Item::Reasoning(Reasoning {
                    text: text.to_owned(),
                    opaque: signature,
                }));
                continue;
            }
            if !text.is_empty() {
                items.push(Item::text(text));
            }
            if let Some(s) = signature {
                items.push(Item::Reasoning(Reasoning {
                    text: String::new(),
                    opaque: Some(s),
                }));
            }
            continue;
        }
        if let Some(m) = media(p) {
            items.push(Item::Media { media: m });
            continue;
        }
        let what = ["executableCode", "codeExecutionResult"]
            .into_iter()
            .find(|k| field(p, k).is_some())
            .map_or(
                "parts of a kind the gateway does not read".to_owned(),
                |k| format!("`{k}` parts"),
            );
        items.push(Item::Native(Native {
            protocol: PROTOCOL,
            what,
            value: p.clone(),
        }));
    }
    if role == Role::Assistant {
        *before = calls;
    } else if items.iter().any(|i| matches!(i, Item::Text { .. })) {
        before.clear();
    }
    Ok(items)
}

/// `tools`: function declarations become the client's tools; code
/// execution the gateway's code mode; another hosted tool is served by the
/// set's tool of its name, else left out with a notice.
fn tools(req: &Value, request: &mut Request, notices: &mut Notices) -> Result<(), ApiError> {
    let Some(tools) = field(req, "tools") else {
        return Ok(());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| ApiError::bad_request("`tools` must be an array").param("tools"))?;
    for t in tools {
        for d in field(t, "functionDeclarations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = d["name"].as_str().ok_or_else(|| {
                ApiError::bad_request("a function declaration has no `name`").param("tools")
            })?;
            let parameters = match (field(d, "parametersJsonSchema"), field(d, "parameters")) {
                (Some(s), _) => s.clone(),
                (None, Some(s)) => json_schema(s, 0),
                (None, None) => json!({"type": "object", "properties": {}}),
            };
            for key in ["response", "responseJsonSchema", "behavior"] {
                if field(d, key).is_some() {
                    request
                        .untyped
                        .push(format!("functionDeclarations[].{key}"));
                }
            }
            request.tools.push(ToolDef {
                json: Default::default(),
                name: name.to_owned(),
                description: d["description"].as_str().map(Into::into),
                parameters: parameters.into(),
                strict: None,
                native: Some(Box::new(Native {
                    protocol: PROTOCOL,
                    what: "function declarations".into(),
                    value: d.clone(),
                })),
            });
        }
        if field(t, "codeExecution").is_some() {
            request.tool_mode = Some(toolgate_config::format::SetMode::Code);
            notices.add("`codeExecution` is served by the gateway's code mode: the model writes Python that calls the tool set's tools (`run_code`) on the gateway's interpreter");
        }
        // Every other kind of tool is one Google runs (`googleSearch`,
        // `urlContext`, `mcpServers`…), served by the set's tool of its
        // snake_case name.
        let hosted = t.as_object().into_iter().flatten().filter(|(k, v)| {
            !v.is_null() && !matches!(camel(k).as_str(), "functionDeclarations" | "codeExecution")
        });
        for (key, _) in hosted {
            let key = camel(key);
            let key = key.as_str();
            let name = snake(key);
            let name = name.as_str();
            {
                notices.unless_served(
                    name,
                    format!(
                        "the tool `{key}` (a tool Google runs) was left out: only a Gemini model runs it (a tool set with a gateway tool named `{name}` serves it for any model)"
                    ),
                );
                let tool = json!({ key: field(t, key).cloned().unwrap_or(json!({})) });
                request.hosted.push(Hosted::new(name, PROTOCOL, key, tool));
            }
        }
    }
    Ok(())
}

/// The deepest schema read (Google's own limit is lower).
const MAX_SCHEMA_DEPTH: usize = 64;

/// Gemini's OpenAPI-subset `Schema` as JSON Schema: types in lower case,
/// `nullable` as a `null` type, snake_case names in camelCase, Google's
/// own `propertyOrdering` left out.
pub fn json_schema(s: &Value, depth: usize) -> Value {
    if depth > MAX_SCHEMA_DEPTH {
        return json!({});
    }
    let Some(obj) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    let nullable = field(s, "nullable") == Some(&json!(true));
    for (k, v) in obj {
        let key = camel(k);
        match key.as_str() {
            "nullable" | "propertyOrdering" => {}
            "type" => {
                let t = v.as_str().unwrap_or("string").to_ascii_lowercase();
                let t = if t == "type_unspecified" {
                    "string".to_owned()
                } else {
                    t
                };
                out.insert(
                    "type".into(),
                    if nullable {
                        json!([t, "null"])
                    } else {
                        json!(t)
                    },
                );
            }
            "properties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, p)| (name.clone(), json_schema(p, depth + 1)))
                    .collect();
                out.insert(key, Value::Object(props));
            }
            "items" => {
                out.insert(key, json_schema(v, depth + 1));
            }
            "anyOf" => {
                let list: Vec<Value> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| json_schema(p, depth + 1))
                    .collect();
                out.insert(key, Value::Array(list));
            }
            _ => {
                out.insert(key, v.clone());
            }
        }
    }
    Value::Object(out)
}

/// `toolConfig.functionCallingConfig`: the mode and the names allowed.
fn tool_config(config: &Value, request: &mut Request) -> Result<(), ApiError> {
    for (k, _) in config.as_object().into_iter().flatten() {
        if camel(k) != "functionCallingConfig" {
            request.untyped.push(format!("toolConfig.{}", camel(k)));
        }
    }
    let Some(f) = field(config, "functionCallingConfig") else {
        return Ok(());
    };
    for (k, _) in f.as_object().into_iter().flatten() {
        if !matches!(camel(k).as_str(), "mode" | "allowedFunctionNames") {
            request
                .untyped
                .push(format!("toolConfig.functionCallingConfig.{}", camel(k)));
        }
    }
    let allowed: Vec<&str> = field(f, "allowedFunctionNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    request.tool_choice = match f["mode"].as_str().map(str::to_ascii_uppercase).as_deref() {
        None | Some("AUTO" | "MODE_UNSPECIFIED" | "VALIDATED") => Some(ToolChoice::Auto),
        Some("NONE") => Some(ToolChoice::None),
        Some("ANY") if allowed.len() == 1 => Some(ToolChoice::Tool {
            name: allowed[0].to_owned(),
        }),
        Some("ANY") => Some(ToolChoice::Required),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`toolConfig.functionCallingConfig.mode` is `{other}`; it is AUTO, ANY, NONE or VALIDATED"
            ))
            .param("toolConfig"));
        }
    };
    Ok(())
}

/// `generationConfig`, read into the sampling every protocol has.
fn generation_config(config: &Value, request: &mut Request) -> Result<(), ApiError> {
    let p = &mut request.params;
    p.max_tokens = field(config, "maxOutputTokens").and_then(Value::as_u64);
    p.temperature = field(config, "temperature").and_then(Value::as_f64);
    p.top_p = field(config, "topP").and_then(Value::as_f64);
    p.stop = field(config, "stopSequences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect();
    let json_out =
        field(config, "responseMimeType").and_then(Value::as_str) == Some("application/json");
    let schema = field(config, "responseJsonSchema")
        .cloned()
        .or_else(|| field(config, "responseSchema").map(|s| json_schema(s, 0)));
    if json_out || schema.is_some() {
        p.response_format = Some(Box::new(ResponseFormat {
            name: None,
            schema,
            strict: None,
        }));
    }
    if let Some(t) = field(config, "thinkingConfig") {
        p.reasoning_effort = match field(t, "thinkingLevel").and_then(Value::as_str) {
            Some(level) => Some(level.to_ascii_lowercase()),
            None => match field(t, "thinkingBudget").and_then(Value::as_i64) {
                Some(0) => Some("none".into()),
                Some(b) if (1..=4096).contains(&b) => Some("low".into()),
                Some(b) if b > 4096 && b <= 16384 => Some("medium".into()),
                Some(b) if b > 16384 => Some("high".into()),
                _ => None,
            },
        };
    }
    if let Some(n) = field(config, "candidateCount").and_then(Value::as_u64)
        && n > 1
    {
        request.choices = Some(n);
    }
    const READ: [&str; 9] = [
        "maxOutputTokens",
        "temperature",
        "topP",
        "stopSequences",
        "responseMimeType",
        "responseJsonSchema",
        "responseSchema",
        "thinkingConfig",
        "candidateCount",
    ];
    for k in config
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| camel(k))
    {
        if !READ.contains(&k.as_str()) {
            request.untyped.push(format!("generationConfig.{k}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(body: Value) -> Translated {
        decode(&body, "gemini-x", false).unwrap()
    }

    #[test]
    fn calls_and_responses_pair_by_id_or_by_name_in_order() {
        let t = decoded(json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "a", "args": {"x": 1}}, "thoughtSignature": "c2ln"},
                {"functionCall": {"name": "a", "args": {"x": 2}}},
                {"functionCall": {"id": "b1", "name": "b", "args": {}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "b1", "name": "b", "response": {"output": "B"}}},
                {"functionResponse": {"name": "a", "response": {"output": "A1"}}},
                {"function_response": {"name": "a", "response": {"error": "bad"}}}]}]}));
        let turns = t.request.turns();
        let Item::Call(first) = &turns[1].items[0] else {
            panic!()
        };
        assert_eq!(first.id, format!("{MADE_ID}1_0"));
        assert_eq!(first.opaque.as_ref().unwrap().data, "c2ln");
        let results: Vec<(&str, &str, bool)> = turns[2]
            .items
            .iter()
            .map(|i| match i {
                Item::Result(r) => (r.call_id.as_str(), r.text.as_str(), r.is_error),
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            results,
            [
                ("b1", "B", false),
                (format!("{MADE_ID}1_0").as_str(), "A1", false),
                (format!("{MADE_ID}1_1").as_str(), "bad", true)
            ]
        );
    }

    #[test]
    fn both_spellings_and_the_openapi_schema_are_read() {
        let t = decoded(json!({"contents": [{"parts": [{"text": "hi"},
                {"inline_data": {"mime_type": "image/png", "data": "AAH-_w=="}}]}],
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "tools": [{"function_declarations": [{"name": "f", "parameters": {"type": "OBJECT",
                "properties": {"q": {"type": "STRING", "nullable": true}}, "required": ["q"],
                "property_ordering": ["q"]}}]}],
            "generation_config": {"max_output_tokens": 50, "response_mime_type": "application/json"}}));
        let r = &t.request;
        assert_eq!(r.turns()[0].text(), "be brief");
        let Item::Media { media } = &r.turns()[1].items[1] else {
            panic!()
        };
        assert_eq!(
            media.source,
            Source::Base64 {
                mime: "image/png".into(),
                data: "AAH+/w==".into()
            }
        );
        assert_eq!(
            r.tools[0].parameters,
            json!({"type": "object", "properties": {"q": {"type": ["string", "null"]}}, "required": ["q"]})
        );
        assert_eq!(r.params.max_tokens, Some(50));
        assert!(r.params.response_format.is_some());
    }

    #[test]
    fn hosted_tools_and_modes() {
        let t = decoded(json!({"contents": [{"parts": [{"text": "hi"}]}],
            "tools": [{"googleSearch": {}}, {"codeExecution": {}}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}}));
        assert_eq!(
            t.request.tool_choice,
            Some(ToolChoice::Tool { name: "f".into() })
        );
        assert_eq!(
            t.request.tool_mode,
            Some(toolgate_config::format::SetMode::Code)
        );
        let mut notices = t.notices;
        notices.settle(|_| false);
        assert!(
            notices.iter().any(|n| n.contains("googleSearch")),
            "{:?}",
            notices.iter().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_bad_request_is_refused_with_its_reason() {
        for (body, says) in [
            (json!({}), "contents"),
            (json!({"contents": []}), "contents"),
            (
                json!({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}),
                "roles",
            ),
            (json!({"contents": [{"parts": "x"}]}), "parts"),
            (
                json!({"contents": [{"parts": [{"functionCall": {}}]}]}),
                "name",
            ),
        ] {
            let e = decode(&body, "m", false).err().unwrap();
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
    }
}
