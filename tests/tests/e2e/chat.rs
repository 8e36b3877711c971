//! `/v1/chat/completions` end to end: the gateway between a client and the
//! scripted model, with HTTP tools served by a local backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use toolgate_tests::{ChatSetup, ConfigDir, Gateway, load_catalog, post_json, post_sse, user};

const CONFIG: &str = r#"
--- toolgate.yaml
defaults:
  tool_set: web
  tool_timeout: 5s
  max_tool_iterations: 5
limits:
  max_tool_iterations: 6
upstreams:
  - name: mock
    base_url: ${MODEL}
    read_timeout: 1s
    retries: { max_attempts: 3, initial_backoff: 10ms, max_backoff: 2s }
models:
  - model: fast
    upstream: mock
    upstream_model: mock-model
  - model: "mock-*"
    upstream: mock
--- tools.d/t.yaml
tools:
  - name: lookup
    description: Look something up.
    parameters:
      type: object
      properties:
        q: { type: string }
      required: [q]
    http:
      url: "${BACKEND}/echo/lookup"
      query: { q: "{{ args.q }}" }
    response:
      select: /params/q
  - name: slow
    description: Slow.
    parameters:
      type: object
      properties:
        ms: { type: integer }
      required: [ms]
    http:
      url: "${BACKEND}/sleep"
      query: { ms: "{{ args.ms }}" }
      timeout: 300ms
--- tool-sets/web.yaml
name: web
tools: [lookup, slow]
--- tool-sets/other.yaml
name: other
tools: [lookup]
"#;

type Setup = ChatSetup;

async fn setup() -> Setup {
    ChatSetup::start(CONFIG).await
}

async fn post(s: &Setup, body: Value) -> (u16, Value) {
    post_json(&s.gateway.url("/v1/chat/completions"), &body).await
}

async fn post_stream(s: &Setup, body: Value) -> (u16, Vec<Value>, bool) {
    post_sse(&s.gateway.url("/v1/chat/completions"), &body).await
}

#[tokio::test]
async fn a_one_tool_loop_answers_with_the_result() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call lookup {\"q\": \"rust\"}")}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [lookup] rust"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let report = &body["toolgate"];
    assert_eq!(report["tool_set"], "web");
    assert_eq!(report["iterations"], 2);
    let call = &report["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup");
    assert_eq!(call["function"]["arguments"], "{\"q\":\"rust\"}");
    assert_eq!(call["result"], "rust");
    assert_eq!(call["success"], true);
    assert_eq!(call["skipped"], false);
    assert!(call["execution_time"].as_f64().unwrap() >= 0.0);
    // Usage is summed over both model calls.
    let reqs = s.model.requests();
    assert_eq!(reqs.len(), 2);
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);
    // The model got the set's tools, and never the extension fields.
    let names: Vec<&str> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lookup", "slow"]);
    assert!(reqs[0].get("tool_set").is_none());
    // The second call carries the assistant's call and the tool's answer.
    let msgs = reqs[1]["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[2]["role"], "tool");
    assert_eq!(msgs[2]["content"], "rust");
    assert_eq!(msgs[2]["tool_call_id"], msgs[1]["tool_calls"][0]["id"]);
}

#[tokio::test]
async fn parallel_calls_run_in_one_turn() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call lookup {\"q\": \"a\"} call lookup {\"q\": \"b\"} call lookup {\"q\": \"a\"}")}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let calls = body["toolgate"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[2]["skipped"], true,
        "an identical call in the batch runs once"
    );
    assert_eq!(s.backend.hits(), 2);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [lookup] a | [lookup] b | [lookup] a"
    );
}

#[tokio::test]
async fn invalid_arguments_are_fed_back_and_corrected() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call lookup {\"query\": \"x\"} fix lookup {\"q\": \"fixed\"}")}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let calls = body["toolgate"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["success"], false);
    assert_eq!(calls[0]["error"]["code"], "invalid_arguments");
    assert_eq!(calls[1]["success"], true);
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Error (invalid_arguments)"), "{content}");
    assert!(content.ends_with("[lookup] fixed"), "{content}");
}

#[tokio::test]
async fn a_tool_timeout_is_an_error_the_model_sees() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call slow {\"ms\": 3000}")}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["toolgate"]["tool_calls"][0]["error"]["code"],
        "timeout"
    );
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Error (timeout)")
    );
}

#[tokio::test]
async fn the_loop_stops_at_max_iterations() {
    let s = setup().await;
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("loop lookup {\"q\": \"again\"}"), "max_tool_iterations": 3}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The spent budget ends with an answer (one last call without the
    // gateway's tools), so clients stop: a standard finish reason, the
    // precise one in the report.
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["toolgate"]["finish_reason"], "max_tool_iterations");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [lookup] again | [lookup] again"
    );
    assert_eq!(body["toolgate"]["iterations"], 4);
    assert_eq!(body["toolgate"]["tool_calls"].as_array().unwrap().len(), 2);
    assert!(body["choices"][0]["message"].get("tool_calls").is_none());
    let requests = s.model.requests();
    assert_eq!(
        requests.len(),
        4,
        "one loop: three calls with tools, one without"
    );
    assert!(requests[3].get("tools").is_none(), "{}", requests[3]);
    assert!(requests[2].get("tools").is_some());
    // Streamed, the same answer arrives as content.
    let (status, events, done) = post_stream(
        &s,
        json!({"model": "mock-model", "messages": user("loop lookup {\"q\": \"again\"}"), "max_tool_iterations": 3, "stream": true}),
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
    assert_eq!(text, "Tool results: [lookup] again | [lookup] again");
    let last = events.iter().rfind(|e| e["toolgate"].is_object()).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["toolgate"]["finish_reason"], "max_tool_iterations");
    // A request cannot go past the hard cap (6), plus the last call.
    let (_, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("loop lookup {\"q\": \"again\"}"), "max_tool_iterations": 100}),
    )
    .await;
    assert_eq!(body["toolgate"]["iterations"], 7);
}

#[tokio::test]
async fn client_tools_go_back_to_the_client() {
    let s = setup().await;
    let client_tool = json!({"type": "function", "function": {"name": "ask_user", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}});
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call ask_user {\"q\": \"ok?\"} call lookup {\"q\": \"x\"}"), "tools": [client_tool]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let calls = body["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(
        calls.len(),
        1,
        "only the client's call goes back: {calls:?}"
    );
    assert_eq!(calls[0]["function"]["name"], "ask_user");
    assert_eq!(
        s.backend.hits(),
        0,
        "the gateway call of that turn is not run"
    );
    // The model was offered both kinds.
    let offered = s.model.requests()[0]["tools"].as_array().unwrap().len();
    assert_eq!(offered, 3);

    // A client tool named like a set tool is refused.
    let clash = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}});
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("hi"), "tools": [clash]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`lookup`")
    );
}

#[tokio::test]
async fn a_forced_tool_choice_applies_to_the_first_call_only() {
    let s = setup().await;
    let (status, _) = post(
        &s,
        json!({"model": "mock-model", "messages": user("call lookup {\"q\": \"x\"}"), "tool_choice": "required", "parallel_tool_calls": false}),
    )
    .await;
    assert_eq!(status, 200);
    let reqs = s.model.requests();
    assert_eq!(reqs[0]["tool_choice"], "required");
    assert_eq!(reqs[0]["parallel_tool_calls"], false);
    assert_eq!(reqs[1]["tool_choice"], "auto");
}

#[tokio::test]
async fn without_tools_the_request_passes_through_unchanged() {
    let s = setup().await;
    let raw = r#"{"model":"mock-model","messages":[{"role":"user","content":"hello"}],"temperature":0.5,"tool_set":"none","metadata":{"b":1,"a":2}}"#;
    let r = reqwest::Client::new()
        .post(s.gateway.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The upstream's length is passed on, not re-chunked.
    let length = r
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap().parse::<usize>().unwrap());
    assert!(r.headers().get("transfer-encoding").is_none());
    let bytes = r.bytes().await.unwrap();
    assert_eq!(length, Some(bytes.len()));
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello! You said: hello"
    );
    assert!(body.get("toolgate").is_none());
    let seen = &s.model.requests()[0];
    assert_eq!(
        seen,
        &json!({"model":"mock-model","messages":[{"role":"user","content":"hello"}],"temperature":0.5,"metadata":{"b":1,"a":2}})
    );

    // Streaming passes through too, chunk format untouched.
    let (status, events, done) = post_stream(
        &s,
        json!({"model": "mock-model", "messages": user("hi"), "stream": true, "tool_set": "none"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(done);
    assert_eq!(events[0]["id"], "chatcmpl-mock");
}

#[tokio::test]
async fn tool_sets_come_from_body_header_or_default() {
    let s = setup().await;
    // Header.
    let r = reqwest::Client::new()
        .post(s.gateway.url("/v1/chat/completions"))
        .header("X-Tool-Set", "other")
        .json(&json!({"model": "mock-model", "messages": user("hi")}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["toolgate"]["tool_set"], "other");
    let reqs = s.model.requests();
    let names: Vec<&str> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lookup"]);
    // Unknown set: 404 listing the sets (the same answer as the tool API's).
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("hi"), "tool_set": "nope"}),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "unknown_tool_set");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("available: other, web"), "{msg}");
    // Aliases route to the upstream model name.
    let (status, body) = post(&s, json!({"model": "fast", "messages": user("hi")})).await;
    assert_eq!(status, 200);
    assert_eq!(body["model"], "fast");
    assert_eq!(s.model.requests().last().unwrap()["model"], "mock-model");
    // Unroutable model: 404.
    let (status, body) = post(&s, json!({"model": "gpt-9", "messages": user("hi")})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn upstream_faults_map_to_truthful_statuses() {
    let s = setup().await;
    for (script, status, code) in [
        ("[[mock:status=500]]", 502, "upstream_error"),
        ("[[mock:status=503]]", 503, "upstream_unavailable"),
        ("[[mock:status=401]]", 502, "upstream_auth_failed"),
        ("[[mock:status=400]]", 400, "upstream_rejected_request"),
        (
            "[[mock:status=429 retry-after=5]]",
            429,
            "upstream_rate_limited",
        ),
        ("[[mock:hang]]", 504, "upstream_timeout"),
        ("[[mock:malformed]]", 502, "upstream_invalid_response"),
    ] {
        let before = s.model.requests().len();
        let (got, body) = post(&s, json!({"model": "mock-model", "messages": user(script)})).await;
        assert_eq!(got, status, "{script}: {body}");
        assert_eq!(body["error"]["code"], code, "{script}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("upstream `mock`"),
            "{script}: {body}"
        );
        let attempts = s.model.requests().len() - before;
        let expected = if script.contains("=50") { 3 } else { 1 };
        assert_eq!(attempts, expected, "{script}: attempts");
    }
    // Retries recover from passing failures, honouring Retry-After. Each
    // attempt's body is written again from the conversation (none is kept
    // while the model answers): the same request each time.
    let before = s.model.requests().len();
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("[[mock:fail-first=2:503]] hi")}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let attempts = s.model.requests()[before..].to_vec();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|a| *a == attempts[0]), "{attempts:?}");
    assert_eq!(attempts[0]["tools"].as_array().map(Vec::len), Some(2));
    let (status, _) = post(
        &s,
        json!({"model": "mock-model", "messages": user("[[mock:fail-first=1:429]] hi")}),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn streaming_runs_the_loop_between_chunks() {
    let s = setup().await;
    let (status, events, done) = post_stream(
        &s,
        json!({"model": "mock-model", "messages": user("call lookup {\"q\": \"streamed\"}"), "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(done);
    let content: String = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(content, "Tool results: [lookup] streamed");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let last_choice = events
        .iter()
        .rev()
        .find(|e| e["choices"].as_array().is_some_and(|c| !c.is_empty()))
        .unwrap();
    assert_eq!(last_choice["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        last_choice["toolgate"]["tool_calls"][0]["result"],
        "streamed"
    );
    let usage = events.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    // No tool-call deltas reach the client for gateway tools.
    assert!(
        events
            .iter()
            .all(|e| e.pointer("/choices/0/delta/tool_calls").is_none())
    );
    // All chunks share one id.
    assert!(events.iter().all(|e| e["id"] == events[0]["id"]));
}

#[tokio::test]
async fn streaming_returns_client_calls_and_reports_broken_streams() {
    let s = setup().await;
    let client_tool = json!({"type": "function", "function": {"name": "ask_user", "parameters": {"type": "object"}}});
    let (_, events, done) = post_stream(
        &s,
        json!({"model": "mock-model", "messages": user("call ask_user {\"q\": 1}"), "tools": [client_tool], "stream": true}),
    )
    .await;
    assert!(done);
    let calls = events
        .iter()
        .find_map(|e| e.pointer("/choices/0/delta/tool_calls"))
        .unwrap();
    assert_eq!(calls[0]["function"]["name"], "ask_user");
    assert_eq!(calls[0]["function"]["arguments"], "{\"q\":1}");
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );

    // First call failing: an HTTP error, not a stream.
    let (status, _, _) = post_stream(
        &s,
        json!({"model": "mock-model", "messages": user("[[mock:status=401]]"), "stream": true}),
    )
    .await;
    assert_eq!(status, 502);
    // A stream that breaks halfway: an error event, no [DONE].
    let (status, events, done) =
        post_stream(&s, json!({"model": "mock-model", "messages": user("[[mock:broken-stream]] a long enough answer to split"), "stream": true})).await;
    assert_eq!(status, 200);
    assert!(!done);
    assert!(
        events.last().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream `mock`")
    );
}

#[tokio::test]
async fn models_lists_routes_and_upstream_models() {
    let s = setup().await;
    let body: Value = reqwest::get(s.gateway.url("/v1/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fast", "mock-model", "mock-text-model"]);
}

#[tokio::test]
async fn bad_requests_are_400_with_what_is_wrong() {
    let s = setup().await;
    let (status, body) = post(&s, json!({"messages": user("hi")})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "model");
    let r = reqwest::Client::new()
        .post(s.gateway.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn requests_the_plan_cannot_serve_are_refused_saying_why() {
    let s = setup().await;
    // A client tool with the name of a set's tool.
    let clash = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}});
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("hi"), "tools": [clash]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "tools");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`lookup`")
    );
    // Several choices with gateway tools.
    let (status, body) = post(
        &s,
        json!({"model": "mock-model", "messages": user("hi"), "n": 2}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "n");
    assert!(s.model.requests().is_empty(), "nothing reached the model");

    // No upstream at all: 503 saying how to declare one.
    let dir = ConfigDir::fixture("--- tool-sets/web.yaml\nname: web\ntools: []\n", &[]);
    let gateway = Gateway::start(load_catalog(dir.path(), &[])).await;
    let (status, body) = post_json(
        &gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "messages": user("hi")}),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "no_upstream");
}
