//! Models without function calling: the structured-prompt formatter end to
//! end (the scripted model answers in text), and `auto` falling back to it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use toolgate_tests::{ChatSetup, post_json, post_sse, user};

const CONFIG: &str = r#"
--- toolgate.yaml
defaults:
  tool_set: web
upstreams:
  - name: mock
    base_url: ${MODEL}
    retries: { max_attempts: 1 }
models:
  - model: text-model
    upstream: mock
    formatter: structured_prompt
  - model: fc-model
    upstream: mock
    formatter: function_calling
  - model: "*"
    upstream: mock
--- tools.d/t.yaml
tools:
  - name: lookup
    description: Look something up.
    parameters:
      type: object
      properties:
        q: { type: string }
        n: { type: integer }
      required: [q]
    http:
      url: "${BACKEND}/echo/lookup"
      query: { q: "{{ args.q }}", n: "{{ args.n }}" }
    response:
      select: /params
--- tool-sets/web.yaml
name: web
tools: [lookup]
"#;

type Setup = ChatSetup;

async fn setup() -> Setup {
    ChatSetup::start(CONFIG).await
}

async fn post(s: &Setup, body: Value) -> (u16, Value) {
    post_json(&s.gateway.url("/v1/chat/completions"), &body).await
}

async fn post_stream(s: &Setup, body: Value) -> Vec<Value> {
    let (status, events, _) = post_sse(&s.gateway.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 200);
    events
}

#[tokio::test]
async fn a_text_only_model_runs_the_loop_in_every_format() {
    let s = setup().await;
    for format in ["hermes", "json", "pythonic", "mistral"] {
        let (status, body) = post(
            &s,
            json!({"model": "text-model", "messages": user(&format!("[[mock:text={format}]] call lookup {{\"q\": \"{format}\", \"n\": 2}}"))}),
        )
        .await;
        assert_eq!(status, 200, "{format}: {body}");
        assert_eq!(body["toolgate"]["formatter"], "structured_prompt");
        let call = &body["toolgate"]["tool_calls"][0];
        assert_eq!(call["success"], true, "{format}: {call}");
        assert_eq!(call["result"], json!({"q": format, "n": "2"}), "{format}");
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(
            content.starts_with("Tool results: [lookup]"),
            "{format}: {content}"
        );
    }
    // What the model saw: no `tools`, the tools in the system prompt, and
    // the earlier call and its result as plain messages.
    let reqs = s.model.requests();
    let first = &reqs[0];
    assert!(first.get("tools").is_none());
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("<tools>") && system.contains("\"name\":\"lookup\""),
        "{system}"
    );
    let second = reqs[1]["messages"].as_array().unwrap();
    assert_eq!(second[2]["role"], "assistant");
    assert!(
        second[2]["content"]
            .as_str()
            .unwrap()
            .contains("<tool_call>")
    );
    assert_eq!(second[3]["role"], "user");
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap()
            .contains("<tool_response>")
    );
    assert!(second.iter().all(|m| m["role"] != "tool"));
}

#[tokio::test]
async fn streaming_never_leaks_call_text() {
    let s = setup().await;
    let events = post_stream(
        &s,
        json!({"model": "text-model", "stream": true, "messages": user("call lookup {\"q\": \"s\"}")}),
    )
    .await;
    let content: String = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert!(content.starts_with("Tool results: [lookup]"), "{content}");
    assert!(!content.contains("tool_call"), "{content}");
    let last = events
        .iter()
        .rev()
        .find(|e| e.get("toolgate").is_some())
        .unwrap();
    assert_eq!(last["toolgate"]["formatter"], "structured_prompt");
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn client_tools_come_back_as_tool_calls() {
    let s = setup().await;
    let ask = json!({"type": "function", "function": {"name": "ask_user", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}});
    let (status, body) = post(
        &s,
        json!({"model": "text-model", "messages": user("[[mock:text=pythonic]] call ask_user {\"n\": 3}"), "tools": [ask]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "ask_user");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"n": 3})
    );
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
}

#[tokio::test]
async fn auto_falls_back_when_tools_are_rejected_and_remembers() {
    let s = setup().await;
    let (status, body) = post(&s, json!({"model": "picky", "messages": user("[[mock:reject-tools]] call lookup {\"q\": \"fb\"}")})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["toolgate"]["formatter"], "structured_prompt");
    assert_eq!(body["toolgate"]["tool_calls"][0]["success"], true);
    let reqs = s.model.requests();
    assert!(reqs[0].get("tools").is_some(), "the first try offers tools");
    assert!(
        reqs[1].get("tools").is_none(),
        "the retry is in structured mode"
    );
    // Remembered for the model: the next request goes structured at once.
    let before = s.model.requests().len();
    let (_, body) = post(
        &s,
        json!({"model": "picky", "messages": user("[[mock:reject-tools]] hello")}),
    )
    .await;
    assert_eq!(body["toolgate"]["formatter"], "structured_prompt");
    assert!(s.model.requests()[before].get("tools").is_none());
    // Another model still starts with function calling.
    let (_, body) = post(
        &s,
        json!({"model": "other", "messages": user("call lookup {\"q\": \"x\"}")}),
    )
    .await;
    assert_eq!(body["toolgate"]["formatter"], "function_calling");
    // An explicit function_calling route does not fall back: the 400 is the answer.
    let (status, body) = post(
        &s,
        json!({"model": "fc-model", "messages": user("[[mock:reject-tools]] hi")}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn plain_answers_pass_through_structured_mode() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "text-model", "messages": user("just chat")}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello! You said: just chat"
    );
    assert_eq!(body["toolgate"]["tool_calls"], json!([]));
}
