//! A Responses request decoded into the engine's request: the input (a
//! string or items: messages with text, image and file parts,
//! `function_call`, `function_call_output`, reasoning) and `instructions`,
//! client function and `namespace` tools, `tool_choice`, `text.format` and
//! the sampling fields. Each item keeps its JSON for a model that speaks
//! Responses; what cannot be served (hosted tools, items of tools the
//! server ran) is left out with a notice.

use std::collections::HashSet;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use toolgate_engine::conversation::{
    Call, CallResult, DeferredTools, Hosted, Item, Media, MediaKind, Native, Notices, Opaque,
    Protocol, Reasoning, ResponseFormat, Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};

use super::super::common::{self, Translated};
use crate::http::ApiError;

const PROTOCOL: Protocol = Protocol::OpenaiResponses;

/// The fields the typed view reads or the face serves; a model of another
/// protocol does not get the others (each said in a notice).
const TYPED: [&str; 21] = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "text",
    "stream",
    "stream_options",
    "store",
    "previous_response_id",
    "include",
    "metadata",
    "tool_set",
    "max_tool_iterations",
    "tool_mode",
    "background",
];

/// The summary a `compaction` item of this gateway's holds.
pub fn compaction_summary(item: &Value) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(item["encrypted_content"].as_str()?)
        .ok()?;
    let inner: Value = serde_json::from_slice(&bytes).ok()?;
    inner["toolgate_summary"].as_str().map(str::to_owned)
}

/// What the client offered, as the face needs it to give calls back.
///
/// Function tools grouped in `namespace` tools (Codex sends every MCP
/// server it knows as one) are flattened for the model as
/// `namespace__name`; deferred tools (`defer_loading`) are kept as the
/// client defined them, for the `tool_search_output` that loads them.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// Flat name → (namespace, name).
    pub namespaces: std::collections::HashMap<String, (String, String)>,
    /// Flat name of a deferred tool → its definition as the client sent
    /// it (a namespaced one inside its `namespace`).
    pub deferred: std::collections::HashMap<String, Value>,
    /// The client runs `tool_search` itself (`execution: "client"`).
    pub client_search: bool,
}

/// The name of OpenAI's tool search, as the model is offered it.
pub const TOOL_SEARCH: &str = "tool_search";

impl Offered {
    /// The name the model sees for `name` in `namespace`.
    fn flat(namespace: &str, name: &str) -> String {
        format!("{namespace}__{name}")
    }

    /// The name the model knows a call (or `tool_choice`) by: its `name`,
    /// flattened with its `namespace` when it has one.
    pub fn flat_name_of(item: &Value) -> String {
        let name = item["name"].as_str().unwrap_or_default();
        match item["namespace"].as_str() {
            Some(ns) => Offered::flat(ns, name),
            None => name.to_owned(),
        }
    }

    /// A call's `namespace` and `name` as the client offered them.
    pub fn split<'a>(&'a self, flat: &'a str) -> (Option<&'a str>, &'a str) {
        match self.namespaces.get(flat) {
            Some((namespace, name)) => (Some(namespace), name),
            None => (None, flat),
        }
    }

    /// A client call of the client's own `tool_search`.
    pub fn is_client_search(&self, name: &str) -> bool {
        self.client_search && name == TOOL_SEARCH
    }
}

/// The flat names of the tools an input item loads or shows loaded: a
/// call's tool, and a `tool_search_output`'s tools (with their definitions).
fn loaded_by(item: &Value, out: &mut Vec<(String, Option<Value>)>) {
    match item["type"].as_str() {
        Some("function_call") => {
            let flat = Offered::flat_name_of(item);
            out.push((flat, None));
        }
        Some("tool_search_output") => {
            for t in item["tools"].as_array().into_iter().flatten() {
                match t["type"].as_str() {
                    Some("function") => {
                        out.push((
                            t["name"].as_str().unwrap_or_default().to_owned(),
                            Some(t.clone()),
                        ));
                    }
                    Some("namespace") => {
                        let ns = t["name"].as_str().unwrap_or_default();
                        for inner in t["tools"].as_array().into_iter().flatten() {
                            let name = inner["name"].as_str().unwrap_or_default();
                            out.push((Offered::flat(ns, name), Some(inner.clone())));
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// Input items scanned for the tools they load (the rest are translated
/// all the same; this bounds only the scan).
const MAX_SCANNED_ITEMS: usize = 10_000;

/// A function tool of the request, named `name` for the model.
fn function_tool(t: &Value, name: &str) -> ToolDef {
    let own = t["name"].as_str() == Some(name);
    ToolDef {
        json: Default::default(),
        name: name.to_owned(),
        description: t.get("description").and_then(Value::as_str).map(Into::into),
        parameters: t
            .get("parameters")
            .cloned()
            .unwrap_or(json!({"type": "object"}))
            .into(),
        strict: t.get("strict").and_then(Value::as_bool),
        // The tool as it came, for a Responses model (a namespaced one is
        // flattened for every model).
        native: own.then(|| {
            Box::new(Native {
                protocol: PROTOCOL,
                what: "tools".into(),
                value: t.clone(),
            })
        }),
    }
}

/// Decodes a Responses request, continuing `earlier` (a stored
/// conversation, for `previous_response_id`); what it cannot carry (hosted
/// tools, items of tools the server ran) is left out with a notice.
pub fn decode(
    req: &Value,
    offered: &mut Offered,
    earlier: &[Turn],
) -> Result<Translated, ApiError> {
    let (obj, mut request) = common::request_of(req, PROTOCOL)?;
    let mut notices = Notices::default();
    let (functions, deferred) =
        translate_tools(obj, offered, earlier, &mut request.hosted, &mut notices);
    request.tools = functions;
    request.deferred = deferred;
    // Programmatic tool calling: served by code mode over the tool set.
    if common::asks_for_programs(obj.get("tools"), |c| c == "programmatic", &mut notices) {
        request.tool_mode = Some(toolgate_config::format::SetMode::Code);
    }
    let mut turns = Vec::new();
    if let Some(instructions) = obj.get("instructions").and_then(Value::as_str) {
        turns.push(Turn::decoded(
            Role::System,
            vec![Item::text(instructions)],
            PROTOCOL,
            Slot::System,
            raw(&instructions),
        ));
    }
    turns.extend(earlier.iter().cloned());
    match obj.get("input") {
        Some(Value::String(text)) => turns.push(Turn::decoded(
            Role::User,
            vec![Item::text(text.clone())],
            PROTOCOL,
            Slot::Message,
            raw(&json!({"role": "user", "content": text})),
        )),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let turn = translate_item(item, &mut notices).map_err(|e| {
                    ApiError::bad_request(format!("input[{i}]: {e}")).param("input")
                })?;
                turns.extend(turn);
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "`input` is required: a string or an array of items",
            )
            .param("input"));
        }
    }
    if !earlier.is_empty() {
        check_outputs_answer_calls(&turns)?;
    }
    request.set_turns(turns);
    request.tool_choice = tool_choice(obj, offered, &mut request.tools, &mut notices);
    request.params.reasoning_effort = obj
        .get("reasoning")
        .and_then(|r| r["effort"].as_str())
        .map(str::to_owned);
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        request.params.response_format = match format["type"].as_str() {
            Some("json_schema") => Some(Box::new(ResponseFormat {
                name: format["name"].as_str().map(str::to_owned),
                schema: Some(format["schema"].clone()),
                strict: format["strict"].as_bool(),
            })),
            Some("json_object") => Some(Box::new(ResponseFormat {
                name: None,
                schema: None,
                strict: None,
            })),
            _ => None,
        };
    }
    request.params.max_tokens = obj.get("max_output_tokens").and_then(Value::as_u64);
    request.params.parallel_tool_calls = obj.get("parallel_tool_calls").and_then(Value::as_bool);
    request.untyped = obj
        .keys()
        .filter(|k| !TYPED.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(Translated { request, notices })
}

/// The request's tools as functions (namespaced ones flattened, those the
/// input loaded included), and its deferred ones with the gateway's search
/// over them; hosted tools are left out unless the tool set serves them.
fn translate_tools(
    obj: &Map<String, Value>,
    offered: &mut Offered,
    earlier: &[Turn],
    hosted: &mut Vec<Hosted>,
    notices: &mut Notices,
) -> (Vec<ToolDef>, Option<Box<DeferredTools>>) {
    // What the input loads: tools it called or a search loaded.
    let mut loaded = Vec::new();
    if let Some(items) = obj.get("input").and_then(Value::as_array) {
        for item in items.iter().take(MAX_SCANNED_ITEMS) {
            loaded_by(item, &mut loaded);
        }
    }
    for turn in earlier {
        for item in &turn.items {
            if let Item::Call(c) = item {
                loaded.push((c.name.clone(), None));
            }
        }
    }
    let loaded_names: std::collections::HashSet<&str> =
        loaded.iter().map(|(n, _)| n.as_str()).collect();
    let is_loaded = |flat: &str| loaded_names.contains(flat);
    let tools = obj.get("tools").and_then(Value::as_array);
    let search = tools
        .into_iter()
        .flatten()
        .find(|t| t["type"] == TOOL_SEARCH);
    offered.client_search = search.is_some_and(|t| t["execution"] == "client");
    // Tools first: the input's calls are named as the tools are.
    let mut functions = Vec::new();
    let mut deferred = Vec::new();
    // A deferred tool waits for a search when there is one to find it.
    let mut add = |function: ToolDef, flat: &str, defer: bool, definition: &Value| {
        if defer && search.is_some() && !is_loaded(flat) {
            offered.deferred.insert(flat.to_owned(), definition.clone());
            deferred.push(function);
        } else {
            functions.push(function);
        }
    };
    for t in tools.into_iter().flatten() {
        match t["type"].as_str() {
            Some("function") => {
                let name = t["name"].as_str().unwrap_or_default();
                add(
                    function_tool(t, name),
                    name,
                    t["defer_loading"] == json!(true),
                    t,
                );
            }
            Some("namespace") => {
                let namespace = t["name"].as_str().unwrap_or_default();
                for inner in t["tools"].as_array().into_iter().flatten() {
                    if inner["type"] != "function" {
                        notices.add(format!(
                            "tools of type `{}` in namespace `{namespace}` are not served here and were left out",
                            inner["type"].as_str().unwrap_or("?")
                        ));
                        continue;
                    }
                    let name = inner["name"].as_str().unwrap_or_default();
                    let flat = Offered::flat(namespace, name);
                    offered
                        .namespaces
                        .insert(flat.clone(), (namespace.to_owned(), name.to_owned()));
                    let mut definition = t.clone();
                    definition["tools"] = json!([inner]);
                    let defer =
                        inner["defer_loading"] == json!(true) || t["defer_loading"] == json!(true);
                    add(function_tool(inner, &flat), &flat, defer, &definition);
                }
            }
            Some(TOOL_SEARCH) => {}
            // A hosted tool is served by the tool set's tool of its name
            // (`web_search` for every version of it), else left out.
            Some(kind) => {
                let gateway_name = if kind.starts_with("web_search") {
                    "web_search"
                } else {
                    kind
                };
                notices.unless_served(gateway_name, format!(
                    "`{kind}` tools are hosted tools this gateway does not run; left out for a model of another protocol than OpenAI's Responses (a tool set with a gateway tool named `{gateway_name}` serves it)"
                ));
                hosted.push(Hosted::new(gateway_name, PROTOCOL, kind, t.clone()));
            }
            None => notices.add("a tool without `type` was left out"),
        }
    }
    // Tools a client's search loaded that the request no longer lists.
    let mut listed: HashSet<String> = functions.iter().map(|f| f.name.clone()).collect();
    for (flat, definition) in &loaded {
        if let Some(d) = definition
            && listed.insert(flat.clone())
        {
            functions.push(function_tool(d, flat));
        }
    }
    let deferred = match search {
        Some(t) if offered.client_search => {
            // The client's own search: a tool like its others.
            functions.push(ToolDef {
                json: Default::default(),
                name: TOOL_SEARCH.to_owned(),
                description: t.get("description").and_then(Value::as_str).map(Into::into),
                parameters: t
                    .get("parameters")
                    .filter(|p| !p.is_null())
                    .cloned()
                    .unwrap_or(
                        json!({"type": "object", "properties": {"query": {"type": "string"}}}),
                    )
                    .into(),
                strict: None,
                native: None,
            });
            None
        }
        Some(_) if !deferred.is_empty() => Some(Box::new(DeferredTools {
            search: TOOL_SEARCH.to_owned(),
            tools: deferred,
        })),
        _ => None,
    };
    (functions, deferred)
}

/// `tool_choice` typed; `allowed_tools` also keeps `functions` to the
/// listed ones.
fn tool_choice(
    obj: &Map<String, Value>,
    offered: &Offered,
    functions: &mut Vec<ToolDef>,
    notices: &mut Notices,
) -> Option<ToolChoice> {
    let mode = |m: &str| match m {
        "auto" => Some(ToolChoice::Auto),
        "none" => Some(ToolChoice::None),
        "required" => Some(ToolChoice::Required),
        _ => None,
    };
    match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => mode(s),
        Some(c) if c["type"] == "function" => Some(ToolChoice::Tool {
            name: Offered::flat_name_of(c),
        }),
        Some(c) if c["type"] == "allowed_tools" => {
            // Only the listed tools, called as `mode` says.
            let allowed: Vec<String> = c["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            functions.retain(|f| {
                let (_, name) = offered.split(&f.name);
                allowed.iter().any(|a| *a == f.name || a == name)
            });
            mode(c["mode"].as_str().unwrap_or("auto"))
        }
        Some(c) => {
            notices.add(format!(
                "`tool_choice` of type `{}` names a tool this gateway does not run; `auto` instead",
                c["type"].as_str().unwrap_or("?")
            ));
            None
        }
    }
}

/// Continuing a response, a tool output answers one of its calls (or of
/// the input's): one that answers none is a mistake the model must not be
/// shown.
fn check_outputs_answer_calls(turns: &[Turn]) -> Result<(), ApiError> {
    let items = || turns.iter().flat_map(|t| &t.items);
    let calls: HashSet<&str> = items()
        .filter_map(|i| match i {
            Item::Call(c) => Some(c.id.as_str()),
            _ => None,
        })
        .collect();
    let orphan = items().find_map(|i| match i {
        Item::Result(r) if !calls.contains(r.call_id.as_str()) => Some(r.call_id.as_str()),
        _ => None,
    });
    match orphan {
        Some(orphan) => Err(ApiError::bad_request(format!(
            "no tool call found for function call output with call_id `{orphan}`"
        ))
        .param("input")),
        None => Ok(()),
    }
}

/// Content parts (`input_text`, `output_text`, `input_image`,
/// `input_file`) as items: text, images and files.
fn parts(parts: &[Value], notices: &mut Notices) -> Vec<Item> {
    let mut out = Vec::new();
    for p in parts {
        match p["type"].as_str() {
            Some("input_text") | Some("output_text") | Some("text") | Some("refusal") => {
                let text = p["text"].as_str().or_else(|| p["refusal"].as_str());
                out.push(Item::text(text.unwrap_or_default()));
            }
            Some("input_image") => match p["image_url"].as_str() {
                Some(url) => out.push(Item::Media {
                    media: Media {
                        kind: MediaKind::Image,
                        source: Source::from_url(url),
                        name: None,
                        detail: p["detail"].as_str().map(str::to_owned),
                    },
                }),
                None => notices.add("an `input_image` given by `file_id` was left out (send it as `image_url`: a URL or a data URL)"),
            },
            Some("input_file") => {
                let data = p["file_data"].as_str();
                let id = p["file_id"].as_str();
                match p["file_url"].as_str() {
                    Some(url) if data.is_none() => {
                        out.push(Item::text(format!("[file: {url}]")));
                        notices.add("an `input_file` given by `file_url` is passed to the model as its URL only");
                    }
                    _ => out.push(Item::Media {
                        media: Media {
                            kind: MediaKind::File,
                            source: match (data, id) {
                                (Some(d), _) => Source::from_url(d),
                                (None, Some(id)) => Source::FileId { id: id.to_owned() },
                                (None, None) => Source::Text {
                                    text: String::new(),
                                },
                            },
                            name: p["filename"].as_str().map(str::to_owned),
                            detail: None,
                        },
                    }),
                }
            }
            Some(other) => notices.add(format!("content parts of type `{other}` were left out")),
            None => {}
        }
    }
    out
}

/// One input item as a turn (`None` for an item the gateway made itself
/// and the model saw already): a message as a message, a `function_call`
/// as the assistant's call (by its flat name when namespaced), a
/// `function_call_output` as a result, reasoning with its encrypted
/// content (for a Responses model alone).
fn translate_item(item: &Value, notices: &mut Notices) -> Result<Option<Turn>, String> {
    // An item reference may leave out its `type`: it has an `id` and no role.
    let kind = match item["type"].as_str() {
        None if item.get("role").is_none() && item.get("id").is_some() => Some("item_reference"),
        kind => kind,
    };
    let (role, items) = match kind {
        None | Some("message") => {
            let role = match item["role"].as_str() {
                Some("developer") | Some("system") => Role::System,
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                other => {
                    return Err(format!(
                        "role {other:?} is not user, assistant, system or developer"
                    ));
                }
            };
            let mut items = match &item["content"] {
                Value::String(s) => vec![Item::text(s.clone())],
                Value::Array(p) => parts(p, notices),
                _ => return Err("`content` must be a string or an array of parts".into()),
            };
            if items.is_empty() {
                items.push(Item::text(""));
            }
            (role, items)
        }
        Some("function_call") => {
            let arguments = match &item["arguments"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let call = Call::new(
                item["call_id"].as_str().unwrap_or_default(),
                Offered::flat_name_of(item),
                arguments,
            );
            (Role::Assistant, vec![Item::Call(call)])
        }
        Some("function_call_output") => {
            // A string, or content parts (what the Agents SDK sends for an
            // MCP tool's result, or an image a tool made).
            let (text, media) = match &item["output"] {
                Value::String(s) => (s.clone(), Vec::new()),
                Value::Array(p) => {
                    let mut text = String::new();
                    let mut media = Vec::new();
                    for i in parts(p, notices) {
                        match i {
                            Item::Text { text: t } => text.push_str(&t),
                            Item::Media { media: m } => media.push(m),
                            _ => {}
                        }
                    }
                    (text, media)
                }
                other => (other.to_string(), Vec::new()),
            };
            let result = CallResult {
                media,
                ..CallResult::text(item["call_id"].as_str().unwrap_or_default(), text)
            };
            (Role::User, vec![Item::Result(result)])
        }
        // A search of deferred tools (the client's or the gateway's) and
        // what it loaded: a call and its result.
        Some("tool_search_call") => (
            Role::Assistant,
            vec![Item::Call(Call::new(
                call_id_of(item),
                TOOL_SEARCH,
                item["arguments"].to_string(),
            ))],
        ),
        // A conversation compacted here: its summary, where it stood.
        Some("compaction") => match compaction_summary(item) {
            Some(summary) => (
                Role::User,
                vec![Item::text(format!(
                    "Summary of the conversation so far:\n{summary}"
                ))],
            ),
            None => {
                notices.add("a `compaction` item made by another server cannot be read here and was left out");
                return Ok(None);
            }
        },
        Some("tool_search_output") => {
            let mut names = Vec::new();
            loaded_by(item, &mut names);
            let tools: Vec<Value> = names.iter().map(|(n, _)| json!({"name": n})).collect();
            (
                Role::User,
                vec![Item::Result(CallResult::text(
                    call_id_of(item),
                    json!({"tools": tools}).to_string(),
                ))],
            )
        }
        // The model's own reasoning, with the encrypted content only the
        // model that made it can read.
        Some("reasoning") => {
            let summary: Vec<&str> = item["summary"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["text"].as_str())
                .collect();
            let reasoning = Reasoning {
                text: summary.join("\n"),
                opaque: item["encrypted_content"]
                    .as_str()
                    .map(|e| Opaque::new(PROTOCOL, e)),
            };
            (Role::Assistant, vec![Item::Reasoning(reasoning)])
        }
        // The gateway's own calls are in the conversation as the model saw
        // them only while the loop runs.
        Some("mcp_call") | Some("mcp_list_tools") => return Ok(None),
        Some("item_reference") => {
            notices.add("input items of type `item_reference` (a tool this gateway does not run, or a stored item) were left out");
            return Ok(None);
        }
        Some(other) => {
            let role = if other.ends_with("_call") {
                Role::Assistant
            } else {
                Role::User
            };
            let native = Native {
                protocol: PROTOCOL,
                what: format!(
                    "input items of type `{other}` (a tool this gateway does not run, or a stored item)"
                ),
                value: item.clone(),
            };
            (role, vec![Item::Native(native)])
        }
    };
    Ok(Some(Turn::decoded(
        role,
        items,
        PROTOCOL,
        Slot::Message,
        raw(item),
    )))
}

/// A search item's `call_id`, or (a server search's may have none) the
/// id its call and output share.
fn call_id_of(item: &Value) -> String {
    match item["call_id"].as_str() {
        Some(id) => id.to_owned(),
        None => item["id"]
            .as_str()
            .and_then(|id| id.get(4..))
            .unwrap_or("tool_search")
            .to_owned(),
    }
}
