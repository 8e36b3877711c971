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
        parameters: (json!({"type": "object", "properties": properties})).into(),
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

#[test]
fn gpt_oss_harmony() {
    let t = vec![
        typed("get_weather", json!({"location": {"type": "string"}})),
        tools(&["edit"]).remove(0),
        tools(&["generate_file"]).remove(0),
    ];
    // openai/harmony docs/format.md (ec7606df9e87e3d0a1fec9f50928c1e407f0c438),
    // "Receiving tool calls".
    let p = check(
        "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
        &t,
    );
    assert_eq!(
        p.reasoning.as_deref(),
        Some("Need to use function get_weather.")
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"location": "San Francisco"}))]
    );
    assert_eq!(p.content, "");
    // openai/harmony tests/test_harmony.py: the recipient in the role
    // header, and `<|constrain|>` right after the recipient.
    let p = check(
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"location": "Tokyo"}))]
    );
    let p = check(
        "<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{\"location\":\"Paris\"}<|call|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"location": "Paris"}))]
    );
    // llama.cpp tests/test-chat.cpp (0042e2079d3428ba7af410df553202aa7fdf8d7a),
    // gpt-oss template: the stop token left out.
    let p = check(
        "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", \"replaceAll\": false}",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("Thinking about edit..."));
    assert_eq!(
        p.calls,
        vec![call(
            "edit",
            json!({"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false})
        )]
    );
    // The final channel is the answer; commentary without a recipient too.
    let p = check(
        "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("I'm\nthinking"));
    assert_eq!(p.content, "Hello, world!\nWhat's up?");
    assert!(p.calls.is_empty());
    // docs/format.md, "Preambles": a preamble, then the call.
    let p = check(
        "<|channel|>analysis<|message|>{long chain of thought}<|end|><|start|>assistant<|channel|>commentary<|message|>**Action plan**:\n1. Generate an HTML file\n---\nWill start executing the plan step by step<|end|><|start|>assistant<|channel|>commentary to=functions.generate_file<|constrain|>json<|message|>{\"template\": \"basic_html\", \"path\": \"index.html\"}<|call|>",
        &t,
    );
    assert_eq!(
        p.content,
        "**Action plan**:\n1. Generate an HTML file\n---\nWill start executing the plan step by step"
    );
    assert_eq!(
        p.calls,
        vec![call(
            "generate_file",
            json!({"template": "basic_html", "path": "index.html"})
        )]
    );
    // A built-in tool that was not offered: the message stays as written.
    let text =
        "<|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(1)'";
    let p = check(text, &t);
    assert!(p.calls.is_empty());
    assert_eq!(p.content, text);
    // Arguments that are not JSON: the model is told, nothing runs.
    let p = check(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>location=Paris<|call|>",
        &t,
    );
    assert!(p.calls[0].unreadable.is_some());
}

#[test]
fn kimi_k3_xtml() {
    let t = vec![
        typed("special_function", json!({"arg1": {"type": "number"}})),
        tools(&["python"]).remove(0),
    ];
    // llama.cpp tests/test-chat.cpp (0042e2079d3428ba7af410df553202aa7fdf8d7a),
    // Kimi-K3 template: the prompt opened the reasoning.
    let p = check(
        "I should call it<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"special_function\" index=\"1\"<|sep|><|open|>argument key=\"arg1\" type=\"number\"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("I should call it"));
    assert_eq!(p.content, "On it.");
    assert_eq!(p.calls, vec![call("special_function", json!({"arg1": 1}))]);
    let p = check(
        "<|open|>tools<|sep|><|open|>call tool=\"python\" index=\"1\"<|sep|><|open|>argument key=\"code\" type=\"string\"<|sep|>print('hey')<|close|>argument<|sep|><|open|>argument key=\"n\" type=\"integer\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("python", json!({"code": "print('hey')", "n": 3}))]
    );
    // vLLM tests/tool_parsers/test_kimi_k3_tool_parser.py: the turn's end.
    let p = check("Hello<|close|>message<|sep|>", &t);
    assert_eq!(p.content, "Hello");
}

#[test]
#[allow(clippy::approx_constant)] // vLLM's case, as written
fn gemma_4_and_functiongemma() {
    let t = vec![
        tools(&["complex_function"]).remove(0),
        tools(&["set_status"]).remove(0),
        tools(&["bash"]).remove(0),
        tools(&["set_config"]).remove(0),
        typed(
            "get_weather",
            json!({"city": {"type": "string"}, "location": {"type": "string"},
                                     "unit": {"type": "string"}}),
        ),
        tools(&["get_time"]).remove(0),
    ];
    // vLLM tests/tool_parsers/test_gemma4_tool_parser.py
    // (027004de3715411197be51ced325705abcf740a7).
    let p = check(
        "<|tool_call>call:complex_function{nested:{inner:<|\"|>value<|\"|>},list:[<|\"|>a<|\"|>,<|\"|>b<|\"|>]}<tool_call|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "complex_function",
            json!({"nested": {"inner": "value"}, "list": ["a", "b"]})
        )]
    );
    let p = check(
        "<|tool_call>call:set_status{is_active:true,count:42,score:3.14}<tool_call|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "set_status",
            json!({"is_active": true, "count": 42, "score": 3.14})
        )]
    );
    // test_gemma4_regex_and_bare_calls.py: the call closed by the turn's end.
    let p = check(
        "<|tool_call>call:bash{command:<|\"|>cat /work/src/entry.c<|\"|>}<turn|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("bash", json!({"command": "cat /work/src/entry.c"}))]
    );
    // llama.cpp tests/test-chat.cpp (0042e207…), Gemma 4 template, with its
    // reasoning channel.
    let p = check(
        "<|channel>thought\nI'm\nthinking<channel|><|tool_call>call:set_config{config:{theme:<|\"|>dark<|\"|>,count:3}}<tool_call|>",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("I'm\nthinking"));
    assert_eq!(
        p.calls,
        vec![call(
            "set_config",
            json!({"config": {"theme": "dark", "count": 3}})
        )]
    );
    // Quoted keys (vLLM's streaming tests).
    let p = check(
        "<|tool_call>call:set_config{record_map:{<|\"|>3<|\"|>:<|\"|>new text<|\"|>}}<tool_call|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("set_config", json!({"record_map": {"3": "new text"}}))]
    );
    // vLLM tests/tool_parsers/test_functiongemma_tool_parser.py
    // (26c3628ca8265f4f5007ed8e3e28ac66dd23c8ae): two calls back to back,
    // and members without commas between them.
    let p = check(
        "<start_function_call>call:get_weather{location:<escape>London<escape>}<end_function_call><start_function_call>call:get_time{timezone:<escape>UTC<escape>}<end_function_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"location": "London"})),
            call("get_time", json!({"timezone": "UTC"}))
        ]
    );
    let p = check(
        "<start_function_call>call:get_weather{city:<escape>NYC<escape>unit:<escape>celsius<escape>}<end_function_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "get_weather",
            json!({"city": "NYC", "unit": "celsius"})
        )]
    );
    // A string the schema types as a string stays one (`42` is not made a number).
    let p = check(
        "<start_function_call>call:get_weather{city:<escape>42<escape>}<end_function_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "42"}))]);
}

#[test]
fn apertus() {
    let t = tools(&["get_weather", "get_time", "special_function"]);
    // vLLM tests/tool_parsers/test_apertus_tool_parser.py
    // (266c3ccc1d53a28e59a1ea6fc49ab9918d4fb693), test_multiple_tool_calls.
    let p = check(
        "<|tools_prefix|>[{\"get_weather\": {\"location\": \"London\"}}, {\"get_time\": {\"location\": \"London\"}}]<|tools_suffix|>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"location": "London"})),
            call("get_time", json!({"location": "London"}))
        ]
    );
    // llama.cpp tests/test-chat.cpp, Apertus template, with its reasoning.
    let p = check(
        "<|inner_prefix|>I'm\nthinking<|inner_suffix|><|tools_prefix|>[{\"special_function\": {\"arg1\": 1}}]<|tools_suffix|>",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("I'm\nthinking"));
    assert_eq!(p.calls, vec![call("special_function", json!({"arg1": 1}))]);
}

#[test]
fn a_call_before_the_closer_of_pre_opened_reasoning_ends_it() {
    let t = vec![typed("Finish", json!({"answer": {"type": "integer"}}))];
    // vLLM#39056 (Qwen3.5, whose template opens <think>): the call was
    // written before </think> and was lost with the reasoning.
    let p = check(
        "The product is 204.\n<tool_call>\n<function=Finish>\n<parameter=answer>\n204\n</parameter>\n</function>\n</tool_call>\n</think>",
        &t,
    );
    assert_eq!(p.reasoning.as_deref(), Some("The product is 204."));
    assert_eq!(p.calls, vec![call("Finish", json!({"answer": 204}))]);
    assert_eq!(p.content, "");
    // Inside a block the text opened and closed itself, a call stays
    // reasoning.
    let p = check(
        "<think>maybe <tool_call>{\"name\": \"Finish\", \"arguments\": {}}</tool_call></think>No.",
        &t,
    );
    assert!(p.calls.is_empty());
    assert_eq!(p.content, "No.");
}

#[test]
fn functionary_v3_2_recipients() {
    let t = tools(&["special_function"]);
    // llama.cpp tests/test-chat.cpp (0042e2079d3428ba7af410df553202aa7fdf8d7a),
    // Functionary v3.2 template: the prompt ends with `>>>`.
    let p = check("special_function\n{\"arg1\": 1}", &t);
    assert_eq!(p.calls, vec![call("special_function", json!({"arg1": 1}))]);
    // An older llama.cpp test of the same format: content, then a call.
    let p = check(
        ">>>all\nHello, world!\nnono\nWhat's up?>>>special_function\n{\"arg1\": 1}",
        &t,
    );
    assert_eq!(p.content, "Hello, world!\nnono\nWhat's up?");
    assert_eq!(p.calls, vec![call("special_function", json!({"arg1": 1}))]);
    // A first line that is not an offered tool's name is text.
    let p = check("special\n{\"arg1\": 1}", &t);
    assert!(p.calls.is_empty());
    let p = check("> quoted\n>> twice", &t);
    assert_eq!(p.content, "> quoted\n>> twice");
}

#[test]
fn minicpm5_tag_artefacts() {
    let t = vec![typed(
        "get_weather",
        json!({"city": {"type": "string"}, "date": {"type": "string"}}),
    )];
    // vLLM tests/tool_parsers/test_minicpm5_tool_parser.py
    // (08eaf4cf001acb35879237aa5bf4d504a4a1925d).
    let p = check(
        "Intro before.\n<function name=\"get_weather\"><param name=\"city\">上海</param><param name=\"date\">2024-06-27</param></function>\nOutro after.\n",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "get_weather",
            json!({"city": "上海", "date": "2024-06-27"})
        )]
    );
    // Byte-level spaces and collapsed tags, as the same tests write them.
    let p = check(
        "<function\u{120}name=\"get_weather\"><param\u{120}name=\"city\">Paris</param></function>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Paris"}))]);
    let p = check(
        "<functionname=\"get_weather\"><paramname=\"city\">Oslo</param></function>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Oslo"}))]);
}

#[test]
fn minimax_m3_namespaced_elements() {
    let t = vec![typed(
        "create_order",
        json!({
            "user_id": {"type": "integer"}, "urgent": {"type": "boolean"}, "note": {"type": "string"},
            "shipping": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            "duplicate_demo": {"type": "object"}
        }),
    )];
    // vLLM tests/tool_parsers/test_minimax_m3_tool_parser.py
    // (06726266c0e0000947fca394f70a1148fda0ac46), build_order_call.
    let ns = "]<]minimax[>[";
    let text = format!(
        "I will create it.\n{ns}<tool_call>\n{ns}<invoke name=\"create_order\">{ns}<user_id>42{ns}</user_id>{ns}<urgent>true{ns}</urgent>{ns}<note>Please leave at front desk.{ns}</note>{ns}<shipping>{ns}<city>Singapore{ns}</city>{ns}<zip>018956{ns}</zip>{ns}</shipping>{ns}<items>{ns}<item>{ns}<sku>book-001{ns}</sku>{ns}<qty>2{ns}</qty>{ns}</item>{ns}<item>{ns}<sku>pen-007{ns}</sku>{ns}<qty>5{ns}</qty>{ns}</item>{ns}</items>{ns}<metadata>{ns}<source>mobile{ns}</source>{ns}<campaign>may-launch{ns}</campaign>{ns}</metadata>{ns}<duplicate_demo>{ns}<tag>a{ns}</tag>{ns}<tag>b{ns}</tag>{ns}</duplicate_demo>{ns}</invoke>\n{ns}</tool_call>"
    );
    let p = check(&text, &t);
    assert_eq!(p.content, "I will create it.");
    assert_eq!(
        p.calls,
        vec![call(
            "create_order",
            json!({
                "user_id": 42, "urgent": true, "note": "Please leave at front desk.",
                "shipping": {"city": "Singapore", "zip": 18956},
                "items": [{"sku": "book-001", "qty": 2}, {"sku": "pen-007", "qty": 5}],
                "metadata": {"source": "mobile", "campaign": "may-launch"},
                "duplicate_demo": {"tag": ["a", "b"]}
            })
        )]
    );
    // build_multiple_order_call: two invokes in one block.
    let text = format!(
        "{ns}<tool_call>\n{ns}<invoke name=\"create_order\">{ns}<user_id>1{ns}</user_id>{ns}</invoke>\n{ns}<invoke name=\"create_order\">{ns}<user_id>2{ns}</user_id>{ns}</invoke>\n{ns}</tool_call>"
    );
    let p = check(&text, &t);
    assert_eq!(
        p.calls,
        vec![
            call("create_order", json!({"user_id": 1})),
            call("create_order", json!({"user_id": 2}))
        ]
    );
    // test_streaming_flushes_partial_tool_start_as_text: a cut marker is text.
    let text = format!("plain {ns}<tool_ca");
    let p = check(&text, &t);
    assert!(p.calls.is_empty());
    assert_eq!(p.content, text);
    // A misnested element: the invoke is content, nothing runs.
    let text = format!(
        "{ns}<tool_call>{ns}<invoke name=\"create_order\">{ns}<user_id>1{ns}</note>{ns}</invoke>{ns}</tool_call>"
    );
    assert!(check(&text, &t).calls.is_empty());
}

#[test]
fn cases_from_serving_engines_issue_trackers() {
    let t = vec![
        typed(
            "GrepTool",
            json!({"pattern": {"type": "string"}, "path": {"type": "string"}}),
        ),
        typed("ThinQ_Connect", json!({"body": {"type": "object"}})),
        typed("Glob", json!({"pattern": {"type": "string"}})),
        typed(
            "f",
            json!({"a": {"type": "integer"}, "b": {"type": "string"}}),
        ),
    ];
    // vLLM#22975: a Qwen3-Coder call left in the content.
    let p = check(
        "Let me check if there might be a base.py file that's not showing up. Since we know it's being imported, let me try to grep for the implementation of BaseService.\n\n<tool_call>\n<function=GrepTool>\n<parameter=pattern>\nclass BaseService\\(\n</parameter>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "GrepTool",
            json!({"pattern": "class BaseService\\(", "path": "."})
        )]
    );
    // vLLM#57699: the last parameter not closed before </function> (BFCL
    // live_simple_40-17-0 at temperature 0).
    let p = check(
        "<tool_call>\n<function=ThinQ_Connect>\n<parameter=body>\n{\"airConJobMode\": \"AIR_CLEAN\", \"windStrength\": \"HIGH\", \"monitoringEnabled\": true}\n</function>\n</tool_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "ThinQ_Connect",
            json!({"body": {"airConJobMode": "AIR_CLEAN", "windStrength": "HIGH", "monitoringEnabled": true}})
        )]
    );
    // vLLM#39771: a malformed <parameter= (no `>`) loses only itself.
    let p = check(
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b</function>\n</tool_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("f", json!({"a": 1}))]);
    // Ollama#16686 and #18530: the opener left out, the closer written.
    let p = check(
        "I'll use the Glob tool to list all markdown files in the current directory.\n\n<function=Glob>\n<parameter=pattern>\n*.md\n</parameter>\n</function>\n</tool_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("Glob", json!({"pattern": "*.md"}))]);
    assert_eq!(
        p.content,
        "I'll use the Glob tool to list all markdown files in the current directory."
    );
}

/// A tool from its name and its JSON Schema as written.
fn tool_json(name: &str, schema: &str) -> OfferedTool {
    OfferedTool {
        name: name.to_string(),
        parameters: (serde_json::from_str(schema).unwrap_or(Value::Null)).into(),
    }
}

/// Tools offered with no schema of their own.
fn untyped(names: &[&str]) -> Vec<OfferedTool> {
    names
        .iter()
        .map(|n| tool_json(n, r#"{"type": "object"}"#))
        .collect()
}

/// The five typed tools of vLLM's shared Rust parser test fixtures
/// (`get_weather`, `add`, `convert`, `calculate_area`, `update_record`),
/// then `extra` tools with no schema.
fn vllm_tools(extra: &[&str]) -> Vec<OfferedTool> {
    let mut t = vec![
        tool_json(
            "get_weather",
            r#"{"type": "object", "properties": {"location": {"type": "string"}, "city": {"type": "string"}, "state": {"type": "string"}, "unit": {"type": "string"}, "date": {"type": "string"}, "days": {"type": "integer"}}}"#,
        ),
        tool_json(
            "add",
            r#"{"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}"#,
        ),
        tool_json(
            "convert",
            r#"{"type": "object", "properties": {"whole": {"type": "number"}, "flag": {"type": "boolean"}, "payload": {"type": "object"}, "items": {"type": "array"}, "empty": {"type": "string"}}}"#,
        ),
        tool_json(
            "calculate_area",
            r#"{"type": "object", "properties": {"shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}"#,
        ),
        tool_json(
            "update_record",
            r#"{"type": "object", "properties": {"data": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}"#,
        ),
    ];
    t.extend(untyped(extra));
    t
}

/// One output of a serving engine's tests: the calls it must give (name
/// and JSON arguments), whole and streamed ([`check`]), and the content
/// where the engine's test says what it is and that agrees with this
/// crate's content policy.
fn case(tools: &[OfferedTool], text: &str, want: &[(&str, &str)], content: Option<&str>) {
    let p = check(text, tools);
    let want: Vec<ParsedCall> = want
        .iter()
        .map(|(n, a)| call(n, serde_json::from_str(a).unwrap_or(Value::Null)))
        .collect();
    assert_eq!(p.calls, want, "{text:?}");
    assert!(p.calls.iter().all(|c| c.unreadable.is_none()), "{text:?}");
    if let Some(c) = content {
        assert_eq!(p.content, c, "{text:?}");
    }
}

#[test]
fn vllm_step3() {
    // vLLM rust/src/parser/src/tool/step3.rs (2cc2e8e42774cf63a2504fea9ccc5aa70a528619):
    // the `function<｜tool_sep｜>` prefix is optional, `<｜tool_sep｜>` may
    // stand between calls, an unfinished block is no call.
    let t = vllm_tools(&["refresh"]);
    case(&t, "Hello, world!", &[], None);
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter><steptml:parameter name=\"days\">2</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[("get_weather", r#"{"city": "Tokyo", "days": 2}"#)],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[("get_weather", r#"{"city": "Tokyo"}"#)],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜><steptml:invoke name=\"add\"><steptml:parameter name=\"x\">2</steptml:parameter><steptml:parameter name=\"y\">3</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[
            ("get_weather", r#"{"city": "Tokyo"}"#),
            ("add", r#"{"x": 2, "y": 3}"#),
        ],
        None,
    );
    case(
        &t,
        "Let me check. <｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜> Done.",
        &[("get_weather", r#"{"city": "Tokyo"}"#)],
        Some("Let me check. Done."),
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"refresh\"></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[("refresh", r#"{}"#)],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\">",
        &[],
        None,
    );
    // vLLM tests/tool_parsers/test_step3_tool_parser.py
    // (04b590e613452c30240e574e66102b4838570054), the common tests.
    let t = vec![
        tool_json(
            "get_weather",
            r#"{"type": "object", "properties": {"city": {"type": "string"}}}"#,
        ),
        tool_json(
            "get_time",
            r#"{"type": "object", "properties": {"timezone": {"type": "string"}}}"#,
        ),
        tool_json("test_function", r#"{"type": "object"}"#),
        tool_json("refresh", r#"{"type": "object"}"#),
        tool_json("func", r#"{"type": "object"}"#),
    ];
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[("get_weather", r#"{"city": "Tokyo"}"#)],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜><steptml:invoke name=\"get_time\"><steptml:parameter name=\"timezone\">Asia/Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[
            ("get_weather", r#"{"city": "Tokyo"}"#),
            ("get_time", r#"{"timezone": "Asia/Tokyo"}"#),
        ],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"refresh\"></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[("refresh", r#"{}"#)],
        None,
    );
    case(
        &t,
        "Let me check the weather for you.\n\n<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>\n\nI'll get that information.",
        &[("get_weather", r#"{"city": "Tokyo"}"#)],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"test_function\"><steptml:parameter name=\"quoted\">He said \"hello\"</steptml:parameter><steptml:parameter name=\"path\">C:\\Users\\file.txt</steptml:parameter><steptml:parameter name=\"newline\">line1\nline2</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "test_function",
            r#"{"quoted": "He said \"hello\"", "path": "C:\\Users\\file.txt", "newline": "line1\nline2"}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_call_begin｜><steptml:invoke name=\"func\"></steptml:invoke><｜tool_call_end｜>",
        &[],
        None,
    );
    // The same file, TestStep3ParameterWhitespace: a string value is kept as
    // written, whitespace and line breaks included.
    let t = vec![tool_json(
        "edit_file",
        r#"{"type": "object", "properties": {"old_string": {"type": "string"}, "indent": {"type": "integer"}, "enabled": {"type": "boolean"}}}"#,
    )];
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">    if x:</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "    if x:", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">return 1\n</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "return 1\n", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">    if x:\n        return 1\n</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "    if x:\n        return 1\n", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">hello </steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "hello ", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">hello\u{a0}</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "hello ", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
    case(
        &t,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">hello</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        &[(
            "edit_file",
            r#"{"old_string": "hello", "indent": 4, "enabled": true}"#,
        )],
        None,
    );
}

/// The tools vLLM's Gemma 4 parser tests offer.
const GEMMA_4_TOOLS: &[&str] = &[
    "get_weather",
    "get_time",
    "write_file",
    "Edit",
    "search",
    "set",
    "get_status",
    "todowrite",
    "complex_function",
    "set_status",
    "get-weather",
    "weather.get",
    "bash",
    "gdb",
    "read_file",
    "web-search",
    "fs.read_file",
    "set_config",
];

#[test]
fn vllm_gemma_4() {
    // vLLM rust/src/parser/src/tool/gemma4.rs (0580befebad85436a7421ba03efc503c8349347a)
    // and tests/tool_parsers/test_gemma4_tool_parser.py
    // (027004de3715411197be51ced325705abcf740a7), joined chunks.
    let t = untyped(GEMMA_4_TOOLS);
    case(
        &t,
        "<|tool_call>call:get_weather{location:<|\"|>London<|\"|>}<tool_call|>",
        &[("get_weather", r#"{"location": "London"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:get_weather{location:<|\"|>London",
        &[],
        None,
    );
    case(
        &t,
        "<|tool_call>call:get_weather{location:<|\"|>Paris, France<|\"|>}<tool_call|>",
        &[("get_weather", r#"{"location": "Paris, France"}"#)],
        None,
    );
    case(
        &t,
        "Let me check the weather. <|tool_call>call:get_weather{location:<|\"|>London<|\"|>}<tool_call|><div>",
        &[("get_weather", r#"{"location": "London"}"#)],
        Some("Let me check the weather. <div>"),
    );
    case(
        &t,
        "<|tool_call>call:search{input:{all:true}}<tool_call|>",
        &[("search", r#"{"input": {"all": true}}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:set{flag:false}<tool_call|>",
        &[("set", r#"{"flag": false}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:set{count:42}<tool_call|>",
        &[("set", r#"{"count": 42}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:todowrite{content:<|\"|>Buy milk<|\"|>}<tool_call|>",
        &[("todowrite", r#"{"content": "Buy milk"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:todowrite{content:<|\"|>literal }<tool_call|> inside<|\"|>}<tool_call|>",
        &[(
            "todowrite",
            r#"{"content": "literal }<tool_call|> inside"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call>call:write_file{path:<|\"|>index.html<|\"|>,content:<|\"|><!DOCTYPE html>\n<html lang=\"zh-CN\">\n<head>\n    <meta charset=\"UTF-8\">\n    <meta name=\"viewport\" content=\"width=device-width\">\n<|\"|>}<tool_call|>",
        &[(
            "write_file",
            r#"{"path": "index.html", "content": "<!DOCTYPE html>\n<html lang=\"zh-CN\">\n<head>\n    <meta charset=\"UTF-8\">\n    <meta name=\"viewport\" content=\"width=device-width\">\n"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call>call:Edit{file_path:<|\"|>src/env.py<|\"|>,old_string:<|\"|>old_val<|\"|>,new_string:<|\"|>new_val<|\"|>,replace_all:false}<tool_call|>",
        &[(
            "Edit",
            r#"{"file_path": "src/env.py", "old_string": "old_val", "new_string": "new_val", "replace_all": false}"#,
        )],
        None,
    );
    case(&t, "<", &[], None);
    case(&t, "<|tool_call>call:set{broken}<tool_call|>", &[], None);
    case(
        &t,
        "<|tool_call>call:get_weather{location:<|\"|>San Francisco<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
        &[(
            "get_weather",
            r#"{"location": "San Francisco", "unit": "celsius"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call>call:get_weather{location:<|\"|>London<|\"|>}<tool_call|><|tool_call>call:get_time{location:<|\"|>London<|\"|>}<tool_call|>",
        &[
            ("get_weather", r#"{"location": "London"}"#),
            ("get_time", r#"{"location": "London"}"#),
        ],
        None,
    );
    case(
        &t,
        "<|tool_call>call:get-weather{location:<|\"|>London<|\"|>}<tool_call|>",
        &[("get-weather", r#"{"location": "London"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:weather.get{location:<|\"|>London<|\"|>}<tool_call|>",
        &[("weather.get", r#"{"location": "London"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:get_status{}<tool_call|>",
        &[("get_status", r#"{}"#)],
        None,
    );
    case(&t, "Hello, how can I help you today?", &[], None);
    // vLLM tests/tool_parsers/test_gemma4_regex_and_bare_calls.py
    // (33a7f0986ab85b31a5af305eb7e7b0b6ec03f406): `<turn|>` as the closer, a
    // stray colon, the opener split into `<call>`, and bare `call:` calls.
    let t = untyped(GEMMA_4_TOOLS);
    case(
        &t,
        "<|tool_call>call:bash{command:<|\"|>ls -la /work<|\"|>}<tool_call|>",
        &[("bash", r#"{"command": "ls -la /work"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:gdb{args:<|\"|>-batch -ex run /tmp/poc<|\"|>}<turn|>",
        &[("gdb", r#"{"args": "-batch -ex run /tmp/poc"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>call:read_file{path:<|\"|>/work/Makefile<|\"|>}<tool_call|>\n<|tool_call>call:bash{command:<|\"|>make -j8<|\"|>}<tool_call|>",
        &[
            ("read_file", r#"{"path": "/work/Makefile"}"#),
            ("bash", r#"{"command": "make -j8"}"#),
        ],
        None,
    );
    case(
        &t,
        "<|channel>thought\nI need to read the entry source file to inspect the crash point.\n<channel|>call:bash{command:<|\"|>cat /work/src/entry.c<|\"|>}",
        &[("bash", r#"{"command": "cat /work/src/entry.c"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call>:call:bash{command:<|\"|>pytest<|\"|>}",
        &[("bash", r#"{"command": "pytest"}"#)],
        None,
    );
    case(
        &t,
        "some prose\ncall:bash{command:<|\"|>make -j8<|\"|>}",
        &[("bash", r#"{"command": "make -j8"}"#)],
        None,
    );
    case(
        &t,
        "<call>get_weather{city:<|\"|>Paris<|\"|>}",
        &[("get_weather", r#"{"city": "Paris"}"#)],
        None,
    );
    case(
        &t,
        "call:web-search{query:<|\"|>gemma 4 release<|\"|>}",
        &[("web-search", r#"{"query": "gemma 4 release"}"#)],
        None,
    );
    case(
        &t,
        "call:fs.read_file{path:<|\"|>/work/Makefile<|\"|>}",
        &[("fs.read_file", r#"{"path": "/work/Makefile"}"#)],
        None,
    );
    case(
        &t,
        "Just some reasoning text with no call in it.",
        &[],
        None,
    );
    case(
        &t,
        "<|channel>thought\nListing directory files.\n<channel|>call:bash{command:<|\"|>ls -la /work<|\"|>}",
        &[("bash", r#"{"command": "ls -la /work"}"#)],
        None,
    );
}

#[test]
fn vllm_kimi_k2_horizon() {
    // vLLM tests/tool_parsers/test_k2_horizon_tool_parser.py
    // (0d2bafa9f1680325f0734530342c1385a55626c6): `<ifm|…>` tags, GLM-style
    // pairs (with `<ifm|arg_type>` or without) or JSON.
    let t = vec![
        tool_json(
            "lookup",
            r#"{"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}, "enabled": {"type": "boolean"}}}"#,
        ),
        tool_json("ping", r#"{"type": "object", "properties": {}}"#),
    ];
    case(
        &t,
        "Before <ifm|tool_calls><ifm|tool_call>lookup<ifm|arg_key>query</ifm|arg_key><ifm|arg_value>123</ifm|arg_value><ifm|arg_key>limit</ifm|arg_key><ifm|arg_value>3</ifm|arg_value></ifm|tool_call>\n<ifm|tool_call>ping</ifm|tool_call></ifm|tool_calls> after.",
        &[
            ("lookup", r#"{"query": "123", "limit": 3}"#),
            ("ping", r#"{}"#),
        ],
        None,
    );
    case(
        &t,
        "<ifm|tool_calls><ifm|tool_call>{\"name\": \"lookup\", \"arguments\": {\"limit\": \"2\"}}</ifm|tool_call></ifm|tool_calls>",
        &[("lookup", r#"{"limit": 2}"#)],
        None,
    );
    case(
        &t,
        "<ifm|tool_calls><ifm|tool_call>lookup<ifm|arg_key>query</ifm|arg_key><ifm|arg_type>string</ifm|arg_type><ifm|arg_value>weather</ifm|arg_value><ifm|arg_key>limit</ifm|arg_key><ifm|arg_type>integer</ifm|arg_type><ifm|arg_value>2</ifm|arg_value></ifm|tool_call></ifm|tool_calls>",
        &[("lookup", r#"{"query": "weather", "limit": 2}"#)],
        None,
    );
    case(
        &t,
        "Before<ifm|tool_calls><ifm|tool_call>lookup<ifm|arg_key>limit</ifm|arg_key><ifm|arg_value>2</ifm|arg_value></ifm|tool_call></ifm|tool_calls>after",
        &[("lookup", r#"{"limit": 2}"#)],
        None,
    );
    case(&t, "<ifm|tool_calls><ifm|tool_call>ping", &[], None);
    case(&t, "<ifm|tool_calls>junk</ifm|tool_calls>", &[], None);
    case(
        &t,
        " \n<ifm|tool_calls><ifm|tool_call>ping</ifm|tool_call></ifm|tool_calls>\t ",
        &[("ping", r#"{}"#)],
        None,
    );
}

#[test]
fn vllm_deepseek_v4_dsml() {
    // vLLM rust/src/parser/src/tool/deepseek_dsml/deepseek_v4.rs
    // (203cec4836df205dfa9e907750c4546c6dfe4f56), a closer misspelled short
    // (`</｜DSML｜>`) included, and tests/tool_parsers/test_deepseekv4_tool_parser.py
    // (023f36c62e71a247a9bacb7eb4cea5d55505cb63).
    let mut t = vllm_tools(&[]);
    t.extend([tool_json(
        "search",
        r#"{"type": "object", "properties": {"query": {"type": "string"}}}"#,
    )]);
    case(
        &t,
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">SF</｜DSML｜parameter>\n<｜DSML｜parameter name=\"date\" string=\"true\">2024-01-16</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &[("get_weather", r#"{"location": "SF", "date": "2024-01-16"}"#)],
        None,
    );
    case(
        &t,
        "Thinking... <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &[("get_weather", r#"{"location": "Beijing"}"#)],
        Some("Thinking..."),
    );
    case(
        &t,
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">first</｜DSML｜>\n<｜DSML｜parameter name=\"date\" string=\"true\">second</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &[("get_weather", r#"{"location": "first", "date": "second"}"#)],
        None,
    );
    case(
        &t,
        "\n\n<｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\"></｜DSML｜invoke></｜DSML｜tool_calls>",
        &[("get_weather", r#"{}"#)],
        None,
    );
    case(
        &t,
        "Let me check. <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter><｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &[(
            "get_weather",
            r#"{"location": "Beijing", "unit": "celsius"}"#,
        )],
        Some("Let me check."),
    );
    case(
        &t,
        "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"query\" string=\"true\">deepseek v4</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        &[("search", r#"{"query": "deepseek v4"}"#)],
        None,
    );
}

#[test]
fn vllm_minimax_m2() {
    // vLLM rust/src/parser/src/tool/minimax_m2.rs (0957a36bcb0cfa21b42446d36f9b6c6a4e69bd25):
    // values as the template writes them, raw (entities and line breaks kept),
    // and tests/tool_parsers/test_minimax_m2_tool_parser.py
    // (0c927c3451653f28e60cd552cff13ddc3c9ff49e), joined chunks: `null` for a
    // nullable property is null.
    let mut t = vllm_tools(&[]);
    t.extend([
        tool_json("search_web", r#"{"type": "object"}"#),
        tool_json("fn_a", r#"{"type": "object"}"#),
        tool_json("fn_b", r#"{"type": "object"}"#),
        tool_json("get_stock", r#"{"type": "object"}"#),
        tool_json("fn", r#"{"type": "object"}"#),
        tool_json("search", r#"{"type": "object"}"#),
        tool_json("a", r#"{"type": "object"}"#),
        tool_json("b", r#"{"type": "object"}"#),
        tool_json(
            "update_profile",
            r#"{"type": "object", "properties": {"nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}"#,
        ),
        tool_json(
            "update_settings",
            r#"{"type": "object", "properties": {"config": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}"#,
        ),
    ]);
    case(&t, "Hello, world!", &[], None);
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter><parameter name=\"days\">5</parameter></invoke></minimax:tool_call>",
        &[("get_weather", r#"{"city": "Seattle", "days": 5}"#)],
        None,
    );
    case(
        &t,
        "Let me check. <minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter></invoke></minimax:tool_call> This trailing text is ignored.",
        &[("get_weather", r#"{"city": "Seattle"}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter></invoke><invoke name=\"get_weather\"><parameter name=\"city\">NYC</parameter></invoke></minimax:tool_call>",
        &[
            ("get_weather", r#"{"city": "Seattle"}"#),
            ("get_weather", r#"{"city": "NYC"}"#),
        ],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"convert\"><parameter name=\"whole\">5.0</parameter><parameter name=\"flag\">true</parameter><parameter name=\"payload\">{\"nested\":true}</parameter><parameter name=\"items\">[1,2]</parameter><parameter name=\"empty\">42</parameter></invoke></minimax:tool_call>",
        &[(
            "convert",
            r#"{"whole": 5.0, "flag": true, "payload": {"nested": true}, "items": [1, 2], "empty": "42"}"#,
        )],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Tom &amp; Jerry &lt;3</parameter></invoke></minimax:tool_call>",
        &[("get_weather", r#"{"city": "Tom &amp; Jerry &lt;3"}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle &lt;/parameter&gt;&lt;/invoke&gt;&lt;/minimax:tool_call&gt;</parameter><parameter name=\"days\">5</parameter></invoke></minimax:tool_call>",
        &[(
            "get_weather",
            r#"{"city": "Seattle &lt;/parameter&gt;&lt;/invoke&gt;&lt;/minimax:tool_call&gt;", "days": 5}"#,
        )],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"calculate_area\"><parameter name=\"shape\">\nrectangle\n</parameter><parameter name=\"dimensions\">{\"width\":10,\n\"height\":20}</parameter><parameter name=\"precision\">2</parameter></invoke></minimax:tool_call>",
        &[(
            "calculate_area",
            r#"{"shape": "\nrectangle\n", "dimensions": {"width": 10, "height": 20}, "precision": 2}"#,
        )],
        None,
    );
    case(&t, "Hello, München 🌦️. No tools here.", &[], None);
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">München 🌦️</parameter></invoke></minimax:tool_call>",
        &[("get_weather", r#"{"city": "München 🌦️"}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\"></invoke></minimax:tool_call>",
        &[("get_weather", r#"{}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"get_weather\">",
        &[],
        None,
    );
    case(
        &t,
        "I will call the tools.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Seattle</parameter>\n</invoke>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">NYC</parameter>\n</invoke>\n</minimax:tool_call>",
        &[
            ("get_weather", r#"{"city": "Seattle"}"#),
            ("get_weather", r#"{"city": "NYC"}"#),
        ],
        Some("I will call the tools."),
    );
    case(
        &t,
        "<minimax:tool_call><bad></minimax:tool_call>",
        &[],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"fn_a\"><parameter name=\"x\">1</parameter></invoke><invoke name=\"fn_b\"><parameter name=\"y\">2</parameter></invoke></minimax:tool_call>",
        &[("fn_a", r#"{"x": "1"}"#), ("fn_b", r#"{"y": "2"}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"update_profile\"><parameter name=\"nickname\">Alice</parameter></invoke></minimax:tool_call>",
        &[("update_profile", r#"{"nickname": "Alice"}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"update_profile\"><parameter name=\"nickname\">null</parameter></invoke></minimax:tool_call>",
        &[("update_profile", r#"{"nickname": null}"#)],
        None,
    );
    case(
        &t,
        "<minimax:tool_call><invoke name=\"update_settings\"><parameter name=\"config\">{\"theme\": \"dark\", \"fontSize\": 14}</parameter></invoke></minimax:tool_call>",
        &[(
            "update_settings",
            r#"{"config": {"theme": "dark", "fontSize": 14}}"#,
        )],
        None,
    );
}

#[test]
fn vllm_lfm2() {
    // vLLM tests/tool_parsers/test_lfm2_tool_parser.py
    // (011cde7c177a29bbcb0052d80e5ab7671a70f634) and
    // rust/src/parser/src/tool/lfm2.rs (e64f451a11e563ba64de6fbecf596fb62606fa5d):
    // the string's own quote unescaped inside it, a call of a tool not
    // offered beside one that is, leading zeros, raw line breaks and NULs.
    let t = untyped(&[
        "get_candidate_status",
        "register_user",
        "get_weather",
        "do_something_cool",
        "label",
        "set_date",
        "bash",
        "grocery.orderIngredients",
        "exec",
        "ping",
        "weather.client.get",
        "first",
        "second",
    ]);
    case(&t, "How can I help you today?", &[], None);
    case(
        &t,
        "<|tool_call_start|>[get_candidate_status(candidate_id='12345')]<|tool_call_end|>",
        &[("get_candidate_status", r#"{"candidate_id": "12345"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'])]<|tool_call_end|>",
        &[(
            "register_user",
            r#"{"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[get_weather()]<|tool_call_end|>",
        &[("get_weather", r#"{}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[do_something_cool(additional_data={})]<|tool_call_end|>",
        &[("do_something_cool", r#"{"additional_data": {}}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[do_something_cool(steps=[])]<|tool_call_end|>",
        &[("do_something_cool", r#"{"steps": []}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[label(tags={'urgent', 'bug'})]<|tool_call_end|>",
        &[("label", r#"{"tags": ["urgent", "bug"]}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[set_date(month=07, day=05)]<|tool_call_end|>",
        &[("set_date", r#"{"month": 7, "day": 5}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[bash(command='sed -n '360,450p' /testbed/sympy/matrices/common.py')]<|tool_call_end|>",
        &[(
            "bash",
            r#"{"command": "sed -n '360,450p' /testbed/sympy/matrices/common.py"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[bash(command='cd /testbed && python3 -c \"from sympy import latex\nprint(latex(3*x, mul_symbol='\\,'))\"')]<|tool_call_end|>",
        &[(
            "bash",
            r#"{"command": "cd /testbed && python3 -c \"from sympy import latex\nprint(latex(3*x, mul_symbol='\\,'))\""}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[get_weather(city='Martha\\'s Vineyard', metric='\\\"cool units\\\"')]<|tool_call_end|>",
        &[(
            "get_weather",
            r#"{"city": "Martha's Vineyard", "metric": "\"cool units\""}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[grocery.orderIngredients(ingredientList=[{'name': 'Lasagna noodles', 'amount': 250, 'unit': 'g'}], deliveryAddress='845 Willow Lane, Springfield, IL 62704')]<|tool_call_end|>",
        &[(
            "grocery.orderIngredients",
            r#"{"ingredientList": [{"name": "Lasagna noodles", "amount": 250, "unit": "g"}], "deliveryAddress": "845 Willow Lane, Springfield, IL 62704"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[exec(command='grep -F \"]\" log.txt')]<|tool_call_end|>",
        &[("exec", r#"{"command": "grep -F \"]\" log.txt"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[exec(command='cat > f.py << EOF\nimport csv\nprint(1)\nEOF')]<|tool_call_end|>",
        &[(
            "exec",
            r#"{"command": "cat > f.py << EOF\nimport csv\nprint(1)\nEOF"}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[exec(command='printf a\0b')]<|tool_call_end|>",
        &[("exec", r#"{"command": "printf a\u0000b"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[get_candidate_status(candidate_id='12345'), register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'])]<|tool_call_end|>",
        &[
            ("get_candidate_status", r#"{"candidate_id": "12345"}"#),
            (
                "register_user",
                r#"{"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]}"#,
            ),
        ],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[get_candidate_status(candidate_id='12345')]<|tool_call_end|>\nChecking the current status of candidate ID 12345.",
        &[("get_candidate_status", r#"{"candidate_id": "12345"}"#)],
        Some("Checking the current status of candidate ID 12345."),
    );
    case(
        &t,
        "<|tool_call_start|> [get_candidate_status(candidate_id='12345')]<|tool_call_end|>",
        &[("get_candidate_status", r#"{"candidate_id": "12345"}"#)],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[get_candidate_status(candidate_id='12345'), get_weather(), do_something_cool(steps=[])]<|tool_call_end|>",
        &[
            ("get_candidate_status", r#"{"candidate_id": "12345"}"#),
            ("get_weather", r#"{}"#),
            ("do_something_cool", r#"{"steps": []}"#),
        ],
        None,
    );
    case(&t, "<|tool_call_start|>[]<|tool_call_end|>", &[], None);
    case(
        &t,
        "<|tool_call_start|>[get_candidate_status(candidate_id='12345'), bad(x=b'z')]<|tool_call_end|>",
        &[("get_candidate_status", r#"{"candidate_id": "12345"}"#)],
        None,
    );
    case(
        &t,
        "before <|tool_call_start|>[weather.client.get(city='Paris', units=['c'], flags={'fast'}, active=true, note=null), ping()]<|tool_call_end|> after",
        &[
            (
                "weather.client.get",
                r#"{"city": "Paris", "units": ["c"], "flags": ["fast"], "active": true, "note": null}"#,
            ),
            ("ping", r#"{}"#),
        ],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[exec(command='cat\nx\0y', month=07, from=1)]<|tool_call_end|>",
        &[(
            "exec",
            r#"{"command": "cat\nx\u0000y", "month": 7, "from": 1}"#,
        )],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[ping(), not_a_call]<|tool_call_end|>",
        &[],
        None,
    );
    case(
        &t,
        "<|tool_call_start|>[not a call]<|tool_call_end|>",
        &[],
        None,
    );
}

#[test]
fn vllm_dots() {
    // vLLM tests/tool_parsers/test_dots_tool_parser.py
    // (42955d4cf0fe76f6f8fde6eda78283eae3b03c05): a `$ref` in the schema
    // types the value.
    let t = vec![
        tool_json(
            "set_location",
            r##"{"type": "object", "properties": {"location": {"$ref": "#/$defs/Location"}, "days": {"type": "integer"}, "include_weather": {"type": "boolean"}}, "$defs": {"Location": {"type": "object", "properties": {"city": {"type": "string"}}}}}"##,
        ),
        tool_json(
            "search",
            r#"{"type": "object", "properties": {"query": {"type": "string"}}}"#,
        ),
        tool_json(
            "open",
            r#"{"type": "object", "properties": {"id": {"type": "integer"}}}"#,
        ),
    ];
    case(
        &t,
        "ok<dots_function_call><invoke name=\"set_location\"><parameter name=\"location\">{\"city\": \"Shanghai\"}</parameter><parameter name=\"days\">3</parameter><parameter name=\"include_weather\">true</parameter></invoke></dots_function_call>",
        &[(
            "set_location",
            r#"{"location": {"city": "Shanghai"}, "days": 3, "include_weather": true}"#,
        )],
        Some("ok"),
    );
    case(
        &t,
        "<dots_function_call><invoke name=\"search\"><parameter name=\"query\">chairs</parameter></invoke><invoke name=\"open\"><parameter name=\"id\">7</parameter></invoke></dots_function_call><dots_function_call>{\"name\":\"search\",\"arguments\":{\"query\":\"tables\"}}</dots_function_call>",
        &[
            ("search", r#"{"query": "chairs"}"#),
            ("open", r#"{"id": 7}"#),
            ("search", r#"{"query": "tables"}"#),
        ],
        None,
    );
    case(
        &t,
        "<dots_function_call><invoke name=\"ghost\"><parameter name=\"query\">chairs</parameter></invoke></dots_function_call>",
        &[],
        None,
    );
    case(
        &t,
        "visible<dots_function_call><invoke name=\"search\"><parameter name=\"query\">chairs</parameter></invoke></dots_function_call><dots_function_call><invoke name=\"search\"><parameter name=\"query\">tables</parameter></invoke></dots_function_call>",
        &[
            ("search", r#"{"query": "chairs"}"#),
            ("search", r#"{"query": "tables"}"#),
        ],
        Some("visible"),
    );
    case(
        &t,
        "<dots_function_call>garbage</dots_function_call><dots_function_call><invoke name=\"search\"><parameter name=\"query\">chairs</parameter></invoke></dots_function_call>",
        &[("search", r#"{"query": "chairs"}"#)],
        None,
    );
}
