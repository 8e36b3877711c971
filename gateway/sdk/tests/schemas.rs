//! What `#[tool]` generates: the schemas (snapshots), the registration's
//! attributes, and how calls run (sync and async, context injection,
//! errors).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tool_macros::tool;
use toolgate::ToolError;
use toolgate::context::{CallContext, ToolContext};
use toolgate::native::NativeTool;

/// Evaluate an arithmetic expression.
///
/// Second paragraph, kept apart.
#[tool(category = "data", read_only)]
async fn calculator(
    /// The expression, e.g. "2 * (3 + 4)".
    expression: String,
    /// Digits after the decimal point.
    precision: Option<u8>,
) -> Result<f64, ToolError> {
    let _ = precision;
    expression
        .parse::<f64>()
        .map_err(|e| ToolError::Refused(format!("not a number: {e}")))
}

/// A unit of length.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Unit {
    /// Metres.
    Metre,
    /// Feet.
    Foot,
}

/// A point on a map.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
struct Point {
    lat: f64,
    lon: f64,
}

/// Measure the distance between
/// two points.
#[tool(
    name = "measure-distance",
    description = "Distance between two points, in a unit.",
    timeout = "1500ms"
)]
fn measure(
    from: Point,
    to: Point,
    /// The unit of the answer.
    unit: Option<Unit>,
    /// Points to pass through on the way.
    #[schemars(length(max = 5))]
    via: Vec<Point>,
    /// The Rust keyword `type` as a parameter name.
    r#type: Option<String>,
) -> Value {
    let _ = (via, r#type);
    let d = ((to.lat - from.lat).powi(2) + (to.lon - from.lon).powi(2)).sqrt();
    match unit.unwrap_or(Unit::Metre) {
        Unit::Metre => json!({"distance": d, "unit": "metre"}),
        Unit::Foot => json!({"distance": d * 3.28084, "unit": "foot"}),
    }
}

/// Say which project asks (the gateway injects it; the model never sees it).
#[tool]
fn whoami(ctx: &ToolContext, greeting: String) -> String {
    format!(
        "{greeting}, {} (set {})",
        ctx.project.as_deref().unwrap_or("nobody"),
        ctx.tool_set.as_deref().unwrap_or("none")
    )
}

/// Take the whole context by value.
#[tool(read_only, cache = "10m")]
async fn request_id(ctx: ToolContext) -> String {
    ctx.request_id
}

/// No parameters, no return value.
#[tool]
fn ping() {}

/// Fail with a plain error.
#[tool]
fn fail(message: String) -> Result<u8, std::io::Error> {
    Err(std::io::Error::other(message))
}

/// Panic.
#[tool]
fn explode() -> u8 {
    panic!("boom")
}

fn registry() -> Vec<NativeTool> {
    toolgate::tools![calculator, measure, whoami, request_id, ping, fail, explode]
}

#[test]
fn generated_schemas() {
    let schemas: serde_json::Map<String, Value> = registry()
        .iter()
        .map(|t| {
            (
                t.name.to_owned(),
                json!({
                    "description": t.description,
                    "parameters": t.parameters(),
                    "strict": toolgate::strict::to_strict(&t.parameters())
                        .unwrap_or_else(|e| json!(format!("not strict: {e}"))),
                }),
            )
        })
        .collect();
    insta::assert_json_snapshot!(Value::Object(schemas));
}

#[test]
fn attributes_reach_the_registration() {
    let tools = registry();
    let names: Vec<&str> = tools.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "calculator",
            "measure-distance",
            "whoami",
            "request_id",
            "ping",
            "fail",
            "explode"
        ]
    );
    let calc = &tools[0];
    assert_eq!(
        calc.description,
        "Evaluate an arithmetic expression.\n\nSecond paragraph, kept apart."
    );
    assert_eq!(calc.category, Some("data"));
    assert!(calc.read_only);
    assert_eq!(calc.cache_ttl, Some(std::time::Duration::from_secs(300)));
    assert!(!calc.takes_context);
    assert!(!calc.builtin);
    assert!(calc.origin.ends_with("schemas.rs:19"), "{}", calc.origin);

    let measure = &tools[1];
    assert_eq!(
        measure.description,
        "Distance between two points, in a unit."
    );
    assert_eq!(
        measure.timeout,
        Some(std::time::Duration::from_millis(1500))
    );
    assert!(!measure.read_only);
    assert_eq!(measure.cache_ttl, None);

    assert!(tools[2].takes_context);
    assert!(tools[3].takes_context);
    assert_eq!(
        tools[3].cache_ttl,
        Some(std::time::Duration::from_secs(600))
    );
    // The context never appears in the schema.
    assert_eq!(
        tools[2].parameters()["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["greeting"]
    );
    assert_eq!(tools[3].parameters()["properties"], json!({}));
}

fn ctx(project: Option<&str>) -> ToolContext {
    let call = CallContext::new()
        .with_tool_set(Some("ops".into()))
        .with_project(project.map(str::to_owned))
        .unwrap();
    ToolContext::new(&call, "call-1", "test", toolgate::Extensions::default())
}

#[tokio::test]
async fn calls_run_sync_and_async_with_the_context_injected() {
    let tools = registry();
    let out = tools[0]
        .call(json!({"expression": "2.5"}), ctx(None))
        .await
        .unwrap();
    assert_eq!(out, json!(2.5));

    let out = tools[1]
        .call(
            json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 3, "lon": 4}, "unit": "foot", "via": []}),
            ctx(None),
        )
        .await
        .unwrap();
    assert_eq!(out["unit"], json!("foot"));
    assert!((out["distance"].as_f64().unwrap() - 16.4042).abs() < 1e-9);

    let out = tools[2]
        .call(json!({"greeting": "hello"}), ctx(Some("acme")))
        .await
        .unwrap();
    assert_eq!(out, json!("hello, acme (set ops)"));

    let c = ctx(None);
    let expected = c.request_id.clone();
    assert_eq!(tools[3].call(json!({}), c).await.unwrap(), json!(expected));
    assert_eq!(
        tools[4].call(json!({}), ctx(None)).await.unwrap(),
        Value::Null
    );
}

#[tokio::test]
async fn errors_are_results_with_their_kind() {
    let tools = registry();
    // A ToolError keeps its kind.
    let e = tools[0]
        .call(json!({"expression": "two"}), ctx(None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "refused");
    // Any other error is a failure with its message.
    let e = tools[5]
        .call(json!({"message": "disk full"}), ctx(None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "tool_error");
    assert_eq!(e.to_string(), "disk full");
    // A panic in a sync tool goes on in the caller, as in an async one
    // (the gateway's executor catches both: `tool_crashed`).
    let panicking = tools[6].clone();
    let call = tokio::spawn(async move { panicking.call(json!({}), ctx(None)).await });
    let panic = call.await.expect_err("the panic goes on").into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
    // Arguments that do not deserialize (the executor validates first, but
    // the handler checks too); unknown fields are denied.
    let e = tools[2]
        .call(json!({"greeting": "hi", "extra": 1}), ctx(None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    assert!(e.to_string().contains("unknown field `extra`"), "{e}");
}

#[test]
fn the_schema_validates_like_the_deserializer() {
    let measure = &registry()[1];
    let schema = measure.parameters();
    let v = jsonschema::validator_for(&schema).unwrap();
    let ok = json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 1, "lon": 1}, "via": []});
    assert!(v.is_valid(&ok));
    // Option<T> is optional; everything else is required.
    assert!(!v.is_valid(&json!({"from": {"lat": 0, "lon": 0}, "via": []})));
    assert!(v.is_valid(&json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 1, "lon": 1}, "via": [], "type": "x", "unit": "metre"})));
    // Unknown fields and bad enum values are refused.
    assert!(!v.is_valid(
        &json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 1, "lon": 1}, "via": [], "extra": 1})
    ));
    assert!(!v.is_valid(&json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 1, "lon": 1}, "via": [], "unit": "mile"})));
    // `#[schemars(...)]` passes through.
    let six = vec![json!({"lat": 0, "lon": 0}); 6];
    assert!(
        !v.is_valid(&json!({"from": {"lat": 0, "lon": 0}, "to": {"lat": 1, "lon": 1}, "via": six}))
    );
}
