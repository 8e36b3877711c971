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

#[test]
fn deepseek_v32_v4_and_v41_dsml() {
    let t = vec![
        typed("get_weather", json!({"location": {"type": "string"}})),
        typed("get_time", json!({"city": {"type": "string"}})),
        typed(
            "magic_int",
            json!({"ref": {"type": "integer"}, "name": {"type": "string"}}),
        ),
        typed(
            "lookup",
            json!({"query": {"type": "string"}, "limit": {"type": "integer"}}),
        ),
        tools(&["flags"]).remove(0),
    ];
    // vLLM tests/tool_parsers/test_deepseekv32_tool_parser.py
    // (00816550e740a13736f7ef9921097d51a3f01ede), test_multiple_tools.
    let p = check(
        "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">SF</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">NYC</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"location": "SF"})),
            call("get_weather", json!({"location": "NYC"}))
        ]
    );
    assert_eq!(p.content, "");
    // The same file, test_type_conversion_in_non_streaming: `string="false"`
    // is a JSON literal where the schema does not say.
    let p = check(
        "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"flags\">\n<｜DSML｜parameter name=\"enabled\" string=\"false\">true</｜DSML｜parameter>\n<｜DSML｜parameter name=\"count\" string=\"false\">42</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("flags", json!({"enabled": true, "count": 42}))]
    );
    // llama.cpp tests/test-chat.cpp (0042e2079d3428ba7af410df553202aa7fdf8d7a),
    // DeepSeek-V3.2 template: the prompt opened <think>.
    let p = check(
        "Calling both</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("Calling both"));
    assert_eq!(p.calls, vec![call("get_time", json!({"city": "Paris"}))]);
    // The same file, DeepSeek-V4 template (`tool_calls`).
    let p = check(
        "Multi-arg call</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"magic_int\">\n<｜DSML｜parameter name=\"ref\" string=\"false\">42</｜DSML｜parameter>\n<｜DSML｜parameter name=\"name\" string=\"true\">foo bar</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("magic_int", json!({"ref": 42, "name": "foo bar"}))]
    );
    // vLLM rust/src/parser/src/tool/deepseek_dsml/deepseek_v41/tests.rs
    // (0a9cc71c4778b8790d1ae0857b92e1596e62dac8): spaced DSML, no `string=`.
    let p = check(
        "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"lookup\">\n<｜DSML｜ parameter name=\"query\">value</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"limit\">2</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("lookup", json!({"query": "value", "limit": 2}))]
    );
}

#[test]
fn dots_step3_and_hunyuan() {
    let t = vec![
        typed(
            "set_location",
            json!({"location": {"type": "object"}, "days": {"type": "integer"},
                   "include_weather": {"type": "boolean"}}),
        ),
        typed(
            "search",
            json!({"query": {"type": "string"}, "limit": {"type": "integer"}}),
        ),
        typed("open", json!({"id": {"type": "integer"}})),
        typed(
            "edit_file",
            json!({"old_string": {"type": "string"}, "indent": {"type": "integer"},
                   "enabled": {"type": "boolean"}}),
        ),
        typed(
            "get_weather",
            json!({"city": {"type": "string"}, "date": {"type": "string"}}),
        ),
        tools(&["get_current_date"]).remove(0),
    ];
    // vLLM tests/tool_parsers/test_dots_tool_parser.py
    // (42955d4cf0fe76f6f8fde6eda78283eae3b03c05).
    let p = check(
        "ok<dots_function_call><invoke name=\"set_location\"><parameter name=\"location\">{\"city\": \"Shanghai\"}</parameter><parameter name=\"days\">3</parameter><parameter name=\"include_weather\">true</parameter></invoke></dots_function_call>",
        &t,
    );
    assert_eq!(p.content, "ok");
    assert_eq!(
        p.calls,
        vec![call(
            "set_location",
            json!({"location": {"city": "Shanghai"}, "days": 3, "include_weather": true})
        )]
    );
    let p = check(
        "<dots_function_call><invoke name=\"search\"><parameter name=\"query\">chairs</parameter></invoke><invoke name=\"open\"><parameter name=\"id\">7</parameter></invoke></dots_function_call><dots_function_call>{\"name\":\"search\",\"arguments\":{\"query\":\"tables\"}}</dots_function_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("search", json!({"query": "chairs"})),
            call("open", json!({"id": 7})),
            call("search", json!({"query": "tables"}))
        ]
    );
    // vLLM tests/tool_parsers/test_step3_tool_parser.py
    // (04b590e613452c30240e574e66102b4838570054): string whitespace kept.
    let p = check(
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">    if x:</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "edit_file",
            json!({"old_string": "    if x:", "indent": 4, "enabled": true})
        )]
    );
    // SGLang's Step3 detector fixture (sgl-model-gateway).
    let p = check(
        "Let me help you.\n<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"search\">\n<steptml:parameter name=\"query\">rust programming</steptml:parameter>\n<steptml:parameter name=\"limit\">10</steptml:parameter>\n</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>\nHere are the results...",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "search",
            json!({"query": "rust programming", "limit": 10})
        )]
    );
    assert_eq!(p.content, "Let me help you.\nHere are the results...");
    // vLLM tests/tool_parsers/test_hy_v3_tool_parser.py
    // (41c5903d049b80b83a6e570f52f0f55e31316e49).
    let p = check(
        "<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2026-03-30</arg_value>\n</tool_call>\n</tool_calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "get_weather",
            json!({"city": "Beijing", "date": "2026-03-30"})
        )]
    );
    let p = check(
        "<tool_calls><tool_call>get_current_date<tool_sep></tool_call></tool_calls>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_current_date", json!({}))]);
    // Hunyuan A13B (vLLM test_hunyuan_a13b_tool_parser.py, 10a67515…).
    let p = check(
        "I will call the tool now. <tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Boston\"}}]</tool_calls>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"city": "Boston"}))]
    );
    assert_eq!(p.content, "I will call the tool now.");
}
