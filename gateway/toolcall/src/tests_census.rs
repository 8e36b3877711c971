//! The census: each family the serving engines parse, read from outputs of
//! the models themselves (their chat templates, model cards or a serving
//! engine's own tests, cited per case), whole and streamed.

use serde_json::{Value, json};

use super::tests::{check, tools};
use super::*;

fn call(name: &str, args: Value) -> ParsedCall {
    ParsedCall::new(name.to_string(), args)
}

fn typed(name: &str, properties: Value) -> OfferedTool {
    OfferedTool {
        name: name.to_string(),
        parameters: json!({"type": "object", "properties": properties}),
    }
}

#[test]
fn json_strings_are_read_as_the_type_the_schema_declares() {
    // Models often quote numbers in JSON arguments; the schema decides.
    let t = vec![typed(
        "book",
        json!({"rooms": {"type": "integer"}, "price": {"type": "number"},
               "late": {"type": "boolean"}, "code": {"type": "string"}}),
    )];
    let p = check(
        r#"<tool_call>{"name": "book", "arguments": {"rooms": "2", "price": "9.5", "late": "true", "code": 7, "other": "3"}}</tool_call>"#,
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "book",
            json!({"rooms": 2, "price": 9.5, "late": true, "code": "7", "other": "3"})
        )]
    );
    // A string that does not read as the type is left as written (the
    // gateway's validation then tells the model).
    let p = check(r#"{"name": "book", "arguments": {"rooms": "two"}}"#, &t);
    assert_eq!(p.calls, vec![call("book", json!({"rooms": "two"}))]);
}

#[test]
fn python_sets_and_raw_line_breaks_lfm2() {
    // LFM2 writes Python literals as Python prints them, sets included, and
    // strings with line breaks as they are.
    let t = vec![typed(
        "tag",
        json!({"ids": {"type": "array", "items": {"type": "integer"}}, "note": {"type": "string"}}),
    )];
    let p = check(
        "<|tool_call_start|>[tag(ids={3, 1}, note='two\nlines')]<|tool_call_end|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("tag", json!({"ids": [3, 1], "note": "two\nlines"}))]
    );
    let p = check("<|tool_call_start|>[tag(ids={7})]<|tool_call_end|>", &t);
    assert_eq!(p.calls, vec![call("tag", json!({"ids": [7]}))]);
}

#[test]
fn kimi_k2_stray_text_between_markers_is_content_and_the_section_goes_on() {
    let t = tools(&["get_weather", "get_time"]);
    let p = check(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"B\"}<|tool_call_end|> and <|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"UTC\"}<|tool_call_end|><|tool_calls_section_end|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"city": "B"})),
            call("get_time", json!({"tz": "UTC"}))
        ]
    );
    assert_eq!(p.content, "and");
}
