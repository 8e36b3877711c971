//! Tool search (`discovery: search`) in the chat loop: the model is offered
//! `find_tools`, the tools it finds become callable on the next turn, and
//! at most `max_tools_in_prompt` of them stay in the prompt; with native
//! function calling and with the structured prompt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use toolgate_tests::{ChatSetup, offered, post_json, post_sse, search_model, user};

/// Tools with distinct purposes, and fillers that search must rank below.
const TOOLS: &[(&str, &str, &str)] = &[
    (
        "currency_convert",
        "Convert an amount of money from one currency to another at today's rate.",
        "amount",
    ),
    (
        "weather_current",
        "The current weather (temperature, wind) in a city.",
        "city",
    ),
    (
        "calendar_create_event",
        "Create an event in the user's calendar.",
        "title",
    ),
    (
        "email_send",
        "Send an email message to a recipient.",
        "recipient",
    ),
    (
        "stock_quote",
        "The latest trading price of a stock by its ticker symbol.",
        "ticker",
    ),
    (
        "translate_text",
        "Translate a text into another language.",
        "text",
    ),
];

fn config() -> String {
    let mut tools = String::from("tools:\n");
    let mut all: Vec<(String, String, String)> = TOOLS
        .iter()
        .map(|(n, d, p)| (n.to_string(), d.to_string(), p.to_string()))
        .collect();
    for i in 0..40 {
        all.push((
            format!("inventory_item_{i}"),
            format!("Read record {i} of the warehouse inventory."),
            "sku".into(),
        ));
    }
    for (name, description, param) in &all {
        tools.push_str(&format!(
            r#"  - name: {name}
    description: {description}
    parameters:
      type: object
      properties:
        {param}: {{ type: [string, number] }}
      required: [{param}]
    http:
      url: "${{BACKEND}}/echo/{name}"
      query: {{ {param}: "{{{{ args.{param} }}}}" }}
    response:
      select: /params/{param}
"#
        ));
    }
    format!(
        r#"
--- toolgate.yaml
defaults:
  tool_set: everything
upstreams:
  - name: mock
    base_url: ${{MODEL}}
    retries: {{ max_attempts: 1 }}
models:
  - model: text-model
    upstream: mock
    formatter: structured_prompt
  - model: "*"
    upstream: mock
    formatter: function_calling
--- tools.d/t.yaml
{tools}
--- tool-sets/everything.yaml
name: everything
description: Office and finance helpers.
tools: ["*"]
discovery: search
max_tools_in_prompt: 2
--- tool-sets/listed.yaml
name: listed
tools: ["*"]
--- tool-sets/preloaded.yaml
name: preloaded
tools: ["*"]
discovery: search
max_tools_in_prompt: 4
preload: 2
"#
    )
}

/// The names of the tools the loop called, in order.
fn called(body: &Value) -> Vec<&str> {
    body["toolgate"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["name"].as_str().unwrap())
        .collect()
}

async fn setup() -> ChatSetup {
    ChatSetup::start(&config()).await
}

const SCRIPT: &str = r#"call find_tools {"query": "convert money into another currency"} then currency_convert {"amount": 12}"#;

#[tokio::test]
async fn the_model_finds_a_tool_then_calls_it() {
    let s = setup().await;
    let url = s.gateway.url("/v1/chat/completions");
    let (status, body) = post_json(&url, &json!({"model": "m", "messages": user(SCRIPT)})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .rsplit("[currency_convert] ")
            .next(),
        Some("12")
    );
    let calls = called(&body);
    assert_eq!(calls, ["find_tools", "currency_convert"]);
    let found = &body["toolgate"]["tool_calls"][0]["result"];
    assert_eq!(found["tools"][0]["name"], "currency_convert", "{found}");

    let requests = s.model.requests();
    assert_eq!(requests.len(), 3);
    // First only the search; then the search and the two best matches
    // (max_tools_in_prompt: 2), the best last; the tool called stays.
    assert_eq!(offered(&requests[0]), ["find_tools"]);
    let second = offered(&requests[1]);
    assert_eq!(second.len(), 3, "{second:?}");
    assert_eq!(second[0], "find_tools");
    assert_eq!(second[2], "currency_convert");
    assert!(offered(&requests[2]).contains(&"currency_convert".to_owned()));
    // The offered definition is the tool's own (strict schema and all).
    let def = requests[1]["tools"][2]["function"].clone();
    assert_eq!(def["parameters"]["required"], json!(["amount"]), "{def}");

    // The same when streamed.
    let (status, events, done) = post_sse(
        &url,
        &json!({"model": "m", "messages": user(SCRIPT), "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(done);
    let text: String = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert!(text.ends_with("[currency_convert] 12"), "{text}");
}

/// A request that needs two unrelated things: one `find_tools` call with a
/// query for each finds both, each query's best first.
#[tokio::test]
async fn one_search_with_a_query_per_thing_finds_each() {
    let s = setup().await;
    let script = r#"call find_tools {"query": ["convert money into another currency", "send an email message"]} then email_send {"recipient": "ana@example.com"}"#;
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "messages": user(script)}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let found = &body["toolgate"]["tool_calls"][0]["result"]["tools"];
    let names: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[..2], ["currency_convert", "email_send"], "{found}");
    assert_eq!(called(&body), ["find_tools", "email_send"]);
    // Both are offered on the next model call (max_tools_in_prompt: 2).
    let second = offered(&s.model.requests()[1]);
    assert!(
        second.contains(&"currency_convert".to_owned())
            && second.contains(&"email_send".to_owned()),
        "{second:?}"
    );
    // A list longer than the schema allows is refused as bad arguments.
    let nine: Vec<String> = (0..9).map(|i| format!("thing {i}")).collect();
    let script = format!("call find_tools {}", json!({"query": nine}));
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "messages": user(&script)}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let call = &body["toolgate"]["tool_calls"][0];
    assert_eq!(call["success"], false, "{call}");
    assert_eq!(call["error"]["code"], "invalid_arguments", "{call}");
}

#[tokio::test]
async fn a_text_model_is_offered_what_it_found_in_its_prompt() {
    let s = setup().await;
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "text-model", "messages": user(SCRIPT)}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["toolgate"]["formatter"], "structured_prompt");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("[currency_convert] 12"), "{content}");
    let requests = s.model.requests();
    let system = |r: &Value| r["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(requests[0].get("tools").is_none());
    assert!(system(&requests[0]).contains("find_tools"));
    assert!(!system(&requests[0]).contains("currency_convert"));
    assert!(system(&requests[1]).contains("\"currency_convert\""));
}

#[tokio::test]
async fn a_set_that_preloads_offers_the_best_matches_for_the_message_at_once() {
    let s = setup().await;
    // No search round trip: the model calls the tool it was offered first.
    let script = r#"call currency_convert {"amount": 12}"#;
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "tool_set": "preloaded", "messages": [
            {"role": "user", "content": "How much is 12 dollars when I convert the money into euros?"},
            {"role": "assistant", "content": "Let me see."},
            {"role": "user", "content": [{"type": "text", "text": format!("Convert money to another currency. {script}")}]}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let requests = s.model.requests();
    assert_eq!(requests.len(), 2, "one tool call, one answer");
    let first = offered(&requests[0]);
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first[0], "find_tools");
    assert_eq!(
        first[2], "currency_convert",
        "the best match last: {first:?}"
    );
    let calls = called(&body);
    assert_eq!(calls, ["currency_convert"]);

    // A set without `preload` still offers only the search first.
    let (status, _) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "messages": user(SCRIPT)}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(offered(&s.model.requests()[2]), ["find_tools"]);
}

#[tokio::test]
async fn only_sets_that_search_offer_find_tools() {
    let s = setup().await;
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "tool_set": "listed", "messages": user(SCRIPT)}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let first = offered(&s.model.requests()[0]);
    assert_eq!(first.len(), TOOLS.len() + 40);
    assert!(!first.contains(&"find_tools".to_owned()));
    // The scripted model calls only offered tools: no search happened.
    assert!(
        body["toolgate"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["function"]["name"] != "find_tools")
    );
}

#[tokio::test]
async fn a_client_tool_may_not_take_the_search_tools_name() {
    let s = setup().await;
    let tool = json!({"type": "function", "function": {"name": "find_tools", "parameters": {"type": "object"}}});
    let (status, body) = post_json(
        &s.gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "messages": user("hi"), "tools": [tool]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("find_tools")
    );
}

/// With `search.model`, a request that shares no word with a tool finds it
/// by meaning; by words alone it finds nothing.
#[tokio::test]
async fn with_a_model_a_request_finds_a_tool_it_shares_no_word_with() {
    let Some(model) = search_model() else { return };
    let script = r#"call find_tools {"query": "will it rain in Oslo tomorrow"}"#;
    for (ranking, expect) in [("words", None), ("model", Some("weather_current"))] {
        let config = if ranking == "model" {
            config().replacen(
                "defaults:",
                &format!("search:\n  model: {:?}\ndefaults:", model.path),
                1,
            )
        } else {
            config()
        };
        let s = ChatSetup::start(&config).await;
        let (status, body) = post_json(
            &s.url("/v1/chat/completions"),
            &json!({"model": "m", "messages": user(script)}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(called(&body), ["find_tools"]);
        let found = &body["toolgate"]["tool_calls"][0]["result"];
        assert_eq!(
            found["tools"][0]["name"].as_str(),
            expect,
            "{ranking}: {found}"
        );
    }
}
