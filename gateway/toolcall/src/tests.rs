//! Unit tests per family and edge case, plus helpers shared by the other
//! test modules.

use serde_json::{Value, json};

use super::*;

pub(super) fn tool(name: &str) -> OfferedTool {
    OfferedTool {
        name: name.to_string(),
        parameters: (json!({"type": "object"})).into(),
    }
}

pub(super) fn tools(names: &[&str]) -> Vec<OfferedTool> {
    names.iter().map(|n| tool(n)).collect()
}

/// Feed `chunks` to a [`StreamParser`] and collect the events as a [`Parsed`].
pub(super) fn stream(chunks: &[&str], tools: &[OfferedTool]) -> Parsed {
    stream_with(chunks, tools, ParseOptions::default())
}

pub(super) fn stream_with(chunks: &[&str], tools: &[OfferedTool], opts: ParseOptions) -> Parsed {
    let mut p = StreamParser::with_options(tools.to_vec(), opts);
    let mut events = Vec::new();
    for c in chunks {
        events.extend(p.push(c));
    }
    events.extend(p.finish());
    collect(events)
}

pub(super) fn collect(events: Vec<StreamEvent>) -> Parsed {
    let mut out = Parsed::default();
    let mut r = String::new();
    for e in events {
        match e {
            StreamEvent::Content(s) => out.content.push_str(&s),
            StreamEvent::Reasoning(s) => r.push_str(&s),
            StreamEvent::Call(c) => {
                out.repaired += usize::from(c.repaired);
                out.calls.push(c);
            }
        }
    }
    if !r.is_empty() {
        out.reasoning = Some(r);
    }
    out
}

/// Char-by-char chunks of `text`.
pub(super) fn chars(text: &str) -> Vec<&str> {
    let mut v = Vec::new();
    let mut last = 0;
    for (i, _) in text.char_indices().skip(1) {
        v.push(&text[last..i]);
        last = i;
    }
    if last < text.len() {
        v.push(&text[last..]);
    }
    v
}

/// Each of `texts` gives no call, and stays the content as written.
pub(super) fn stay_content(t: &[OfferedTool], texts: &[&str]) {
    for text in texts {
        let p = check(text, t);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(p.content, *text);
    }
}

/// Parse whole and streamed (whole chunk, char by char, every two-way
/// split) and check they agree; return the whole-text result.
pub(super) fn check(text: &str, tools: &[OfferedTool]) -> Parsed {
    let whole = parse(text, tools);
    assert_eq!(stream(&[text], tools), whole, "single chunk: {text:?}");
    assert_eq!(stream(&chars(text), tools), whole, "char by char: {text:?}");
    for (i, _) in text.char_indices().skip(1) {
        let (a, b) = text.split_at(i);
        assert_eq!(stream(&[a, b], tools), whole, "split at {i}: {text:?}");
    }
    whole
}

fn call(name: &str, args: Value) -> ParsedCall {
    ParsedCall::new(name.to_string(), args)
}

#[test]
fn hermes_single_and_multiple() {
    let t = tools(&["get_weather", "add"]);
    let p = check(
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Paris"}))]);
    assert_eq!(p.content, "Let me check.");
    let p = check(
        "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2}}</tool_call>",
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[1].arguments, json!({"a": 2}));
    assert_eq!(p.content, "");
}

#[test]
fn hermes_variants() {
    let t = tools(&["f"]);
    let body = r#"{"name": "f", "arguments": {"x": 1}}"#;
    for (open, close) in [
        ("<tool_call>", ""),
        ("<|tool_call|>", ""),
        ("<tools>", "</tools>"),
        ("<tool_calls>", "</tool_calls>"),
        ("<function_call>", "</function_call>"),
        ("<TOOL_CALL>", "</TOOL_CALL>"),
        ("<tool_call>\n```json\n", "\n```\n</tool_call>"),
        ("```json\n", "\n```"),
        ("```\n<function_call>", "</function_call>\n```"),
        ("[TOOL_CALLS]", ""),
        ("functools[", "]"),
        ("<|python_tag|>", "<|eom_id|>"),
        ("<|action_start|><|plugin|>", "<|action_end|>"),
    ] {
        let text = format!("{open}{body}{close}");
        let p = check(&text, &t);
        assert_eq!(p.calls, vec![call("f", json!({"x": 1}))], "{text}");
        assert_eq!(p.content, "", "{text}");
    }
}

#[test]
fn close_tag_inside_string_does_not_end_call() {
    let t = tools(&["write_file"]);
    let text = "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"content\": \"a } b </tool_call> c {\"}}\n</tool_call> done";
    let p = check(text, &t);
    assert_eq!(
        p.calls,
        vec![call(
            "write_file",
            json!({"content": "a } b </tool_call> c {"})
        )]
    );
    assert_eq!(p.content, "done");
}

#[test]
fn bare_json_shapes() {
    let t = tools(&["f", "g"]);
    let p = check(r#"{"name": "f", "parameters": {"a": 1}}"#, &t);
    assert_eq!(p.calls, vec![call("f", json!({"a": 1}))]);
    let p = check(
        r#"[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"b": true}}]"#,
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    let p = check(
        r#"{"tool_calls": [{"function": {"name": "g", "arguments": "{\"x\": [1]}"}}]}"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("g", json!({"x": [1]}))]);
    let p = check(
        r#"{"type": "function", "function": {"name": "f", "arguments": {"q": "s"}}}"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("f", json!({"q": "s"}))]);
    let p = check(
        r#"{"name": "f", "arguments": {"a": 1}}; {"name": "g", "arguments": {}}"#,
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.content, "");
}

#[test]
fn json_after_prose_policy() {
    let t = tools(&["search"]);
    let p = check(
        r#"Here is the result: {"name": "search", "parameters": {"q": "x"}} Anything else?"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("search", json!({"q": "x"}))]);
    assert_eq!(p.content, "Here is the result: Anything else?");
    // Without arguments, or with an unoffered name, it stays content.
    stay_content(
        &t,
        &[
            r#"Example: {"name": "search"}"#,
            r#"Example: {"name": "other", "arguments": {}}"#,
            r#"{"result": {"name": "search", "arguments": {}}}"#,
        ],
    );
}

#[test]
fn unoffered_names_stay_content() {
    let t = tools(&["f"]);
    stay_content(
        &t,
        &[
            "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
            "[rm_rf(path='/')]",
            "<function=rm_rf>{\"a\": 1}</function>",
            "<tool_call>\n<function=rm_rf>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
            "[TOOL_CALLS][{\"name\": \"rm_rf\", \"arguments\": {}}]",
        ],
    );
    // A mix: the offered call is accepted, the other element stays content.
    let p = check(
        r#"[{"name": "f", "arguments": {}}, {"name": "rm_rf", "arguments": {}}]"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("f", json!({}))]);
    assert_eq!(p.content, r#"{"name": "rm_rf", "arguments": {}}"#);
}

#[test]
fn qwen3_coder_xml_with_coercion() {
    let t = vec![OfferedTool {
        name: "area".into(),
        parameters: json!({"type": "object", "properties": {
            "shape": {"type": "string"},
            "dims": {"type": "object"},
            "precision": {"type": "integer"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array"},
            "note": {}
        }})
        .into(),
    }];
    let text = "Sure.<tool_call>\n<function=area>\n<parameter=shape>\n42\n</parameter>\n<parameter=dims>\n{\"w\": 10,\n \"h\": 2}\n</parameter>\n<parameter=precision>\n3\n</parameter>\n<parameter=exact>\ntrue\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n<parameter=note>\n7\n</parameter>\n</function>\n</tool_call>";
    let p = check(text, &t);
    assert_eq!(
        p.calls,
        vec![call(
            "area",
            json!({"shape": "42", "dims": {"w": 10, "h": 2}, "precision": 3, "exact": true, "tags": ["a"], "note": "7"})
        )]
    );
    assert_eq!(p.content, "Sure.");
    // Not readable as the declared type: left as written.
    let p = check(
        "<function=area><parameter=precision>many</parameter></function>",
        &t,
    );
    assert_eq!(p.calls[0].arguments, json!({"precision": "many"}));
}

#[test]
fn xml_function_json_body_llama31() {
    let t = tools(&["f", "python"]);
    let p = check(
        "<function=f>{\"a\": 1}</function>\n<function=python>{\"code\": \"print('}')\"}</function>",
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[1].arguments, json!({"code": "print('}')"}));
    let p = check("<function name=\"f\">\n{\"a\": 1}\n</function>", &t);
    assert_eq!(p.calls, vec![call("f", json!({"a": 1}))]);
}

#[test]
fn pythonic_calls() {
    let t = vec![
        tool("get_weather"),
        OfferedTool {
            name: "add".into(),
            parameters: (json!({"type": "object", "properties": {"a": {"type": "integer"}, "s": {"type": "string"}}})).into(),
        },
    ];
    let p = check(
        r#"[get_weather(city="Paris", opts={'deep': [1, 2.5, None]}), add(a="5", s=12, flag=True)]"#,
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call(
                "get_weather",
                json!({"city": "Paris", "opts": {"deep": [1, 2.5, null]}})
            ),
            call("add", json!({"a": 5, "s": "12", "flag": true})),
        ]
    );
    let p = check(r#"[get_weather(city='Martha\'s "Vineyard"')]"#, &t);
    assert_eq!(
        p.calls[0].arguments,
        json!({"city": "Martha's \"Vineyard\""})
    );
    // In a wrapper, one call per line without brackets.
    let p = check(
        "<function_calls>get_weather(city='A')\nadd(a=1)</function_calls>",
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    // Positional arguments and unknown names are not calls.
    stay_content(
        &t,
        &[
            "[get_weather('Paris')]",
            "[print(x=1)]",
            "see [get_weather] docs",
        ],
    );
}

#[test]
fn python_tag_builtin() {
    let t = tools(&["python"]);
    let p = check("<|python_tag|>python.call(code=\"print('hey')\")", &t);
    assert_eq!(
        p.calls,
        vec![call("python", json!({"code": "print('hey')"}))]
    );
}

#[test]
fn reasoning_is_split_first() {
    let t = tools(&["f"]);
    let call_text = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
    let p = check(&format!("<think>maybe {call_text}</think>\nAnswer."), &t);
    assert!(p.calls.is_empty());
    assert_eq!(
        p.reasoning.as_deref(),
        Some(format!("maybe {call_text}").as_str())
    );
    assert_eq!(p.content, "Answer.");
    // Closing tag with no opener.
    let p = check(&format!("thinking here\n</think>\n\n{call_text}"), &t);
    assert_eq!(p.reasoning.as_deref(), Some("thinking here"));
    assert_eq!(p.calls.len(), 1);
    assert_eq!(p.content, "");
    // Never closed: a call of an offered tool ends it there (the serving
    // engine returned the template's <think>, the model called without
    // closing it).
    let p = check(&format!("<think>I will look it up. {call_text}"), &t);
    assert_eq!(p.calls, vec![call("f", json!({}))]);
    assert_eq!(p.reasoning.as_deref(), Some("I will look it up."));
    assert_eq!(p.content, "");
    // Never closed, no call: all reasoning.
    let p = check("<think>I will look it up.", &t);
    assert!(p.calls.is_empty());
    assert_eq!(p.reasoning.as_deref(), Some("I will look it up."));
    assert_eq!(p.content, "");
    // No reasoning: None.
    assert_eq!(check("hi", &t).reasoning, None);
}

#[test]
fn orphan_close_option_streams_content_early() {
    let opts = ParseOptions {
        orphan_think_close: false,
    };
    let mut p = StreamParser::with_options(tools(&["f"]), opts);
    let ev = p.push("Hello there, ");
    assert_eq!(ev, vec![StreamEvent::Content("Hello there,".into())]);
    let mut p = StreamParser::new(tools(&["f"]));
    assert!(p.push("Hello there, ").is_empty());
    let text = "a</think>b";
    assert_eq!(parse_with_options(text, &[], opts).content, text);
}

#[test]
fn nothing_parses_whole_text_is_content() {
    let t = tools(&["f"]);
    for text in [
        "Just an answer.",
        "<tool_call>{\"name\": \"f\", \"arguments\": {",
        "{\"name\": \"f\", \"arguments\": {invalid}}",
        "a < b and c > d, [1, 2] {x} `code` ```\nfenced\n``` functools",
        "<tool_call>",
        "<function=f>\n<parameter=a>1",
        "[TOOL_CALLS]",
        "{\"name\": \"f\", \"arguments\": \"not json\"}",
    ] {
        let p = check(text, &t);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(p.content, text.trim(), "{text}");
    }
}

#[test]
fn broken_marked_arrays_keep_complete_elements() {
    let t = tools(&["add", "mul"]);
    // Missing brace before `]` is repaired after a marker.
    let p = check(
        r#"[TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}, {"name": "mul", "arguments": {"b": 2}]"#,
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    // Truncated after a complete element.
    let p = check(
        r#"[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, {"name": "mu"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("add", json!({"a": 1}))]);
    assert_eq!(p.content, r#", {"name": "mu"#);
    // Bare: no repair.
    let p = check(r#"[{"name": "add", "arguments": {"a": [1, 2}]"#, &t);
    assert!(p.calls.is_empty());
}

#[test]
fn invalid_line_among_valid_ones() {
    let t = tools(&["a", "b"]);
    let p = check(
        "<tool_calls>\n{\"name\": \"a\", \"arguments\": {}}\n{broken line}\n{\"name\": \"b\", \"arguments\": {}}\n</tool_calls>",
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.content, "{broken line}");
}

#[test]
fn other_families() {
    let t = tools(&["get_weather", "foo"]);
    let p = check(
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"city": "Beijing"}))]
    );
    let p = check(
        "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Tokyo"}))]);
    assert_eq!(p.content, "x");
    let p = check(
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        &t,
    );
    assert_eq!(p.calls, vec![call("foo", json!({"x": 1}))]);
    let p = check(
        "Hi <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"B\"}<|tool_call_end|><|tool_calls_section_end|>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "B"}))]);
    assert_eq!(p.content, "Hi");
    let p = check("[TOOL_CALLS]foo{\"x\": 2}", &t);
    assert_eq!(p.calls, vec![call("foo", json!({"x": 2}))]);
    let p = check(
        "<functions><function name=\"foo\"><param name=\"n\" type=\"integer\">20</param><param name=\"s\" type=\"string\">20</param></function></functions>",
        &t,
    );
    assert_eq!(p.calls, vec![call("foo", json!({"n": 20, "s": "20"}))]);
}

#[test]
fn content_whitespace_policy() {
    let t = tools(&["f"]);
    let c = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
    assert_eq!(check(&format!("  A.\n\n{c}\n\nB.  "), &t).content, "A.\nB.");
    assert_eq!(check(&format!("A. {c} B."), &t).content, "A. B.");
    assert_eq!(check(&format!("A.{c}B."), &t).content, "A.B.");
    assert_eq!(
        check("  keep   inner \n\n spacing  ", &t).content,
        "keep   inner \n\n spacing"
    );
}

#[test]
fn utf8_everywhere() {
    let t = tools(&["f"]);
    let text = "héllo ✓ <tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"日本語 🎉\"}}</tool_call> ünïcödé {é [ü <ö `";
    let p = check(text, &t);
    assert_eq!(p.calls, vec![call("f", json!({"q": "日本語 🎉"}))]);
    assert_eq!(p.content, "héllo ✓ ünïcödé {é [ü <ö `");
}

#[test]
fn adversarial_inputs_complete() {
    let t = tools(&["f"]);
    let inputs: Vec<(&str, String)> = vec![
        ("1 MB of {", "{".repeat(1 << 20)),
        ("1 MB of [", "[".repeat(1 << 20)),
        ("<tool_call> x 100k", "<tool_call>".repeat(100_000)),
        ("[ x 100k", "[".repeat(100_000)),
        ("deep arrays", "[".repeat(100_000) + &"]".repeat(100_000)),
        (
            "deep objects",
            "{\"a\":".repeat(100_000) + "1" + &"}".repeat(100_000),
        ),
        (
            "deep python",
            "[f(a=".to_string() + &"[".repeat(100_000) + &"]".repeat(100_000) + ")]",
        ),
        (
            "unclosed strings",
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"".repeat(20_000),
        ),
        ("function tags", "<function=f><parameter=a>".repeat(50_000)),
        ("tool_call + brace", "<tool_call>{".repeat(100_000)),
        (
            "markers",
            "[TOOL_CALLS]functools<|python_tag|>```".repeat(50_000),
        ),
        ("quotes", "{\"".repeat(200_000)),
        (
            "name objects",
            "{\"name\": \"f\", \"arguments\": {".repeat(30_000),
        ),
        ("pythonic prefix", "[f(a='".repeat(100_000)),
        ("think tags", "<think></think>".repeat(50_000)),
        (
            "namespaced invokes",
            "<ns:function_calls><ns:invoke name=\"f\"><ns:parameter name=\"a\">".repeat(30_000),
        ),
        (
            "gemma strings",
            "<|tool_call>call:f{a:<|\"|>x}".repeat(50_000),
        ),
        ("bare gemma calls", "call:f{a:\"x,".repeat(100_000)),
        ("python inner quotes", "[f(a='x' ".repeat(100_000)),
        (
            "horizon pairs",
            "<ifm|tool_call>f<ifm|arg_key>a</ifm|arg_key>".repeat(50_000),
        ),
        (
            "markers in pre-opened reasoning",
            "<tool_call>{\"name\": \"f\", \"arguments\": {".repeat(30_000) + "</think>",
        ),
        (
            "markers in reasoning never closed",
            "<think>".to_string() + &"<tool_call>{\"name\": \"f\", \"arguments\": {".repeat(30_000),
        ),
        (
            "calls in reasoning never closed",
            "<think>".to_string()
                + &"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>".repeat(20_000),
        ),
        (
            "mentions in reasoning never closed",
            "<think>".to_string() + &"<tool_call> [TOOL_CALLS] <a:b> ".repeat(40_000),
        ),
    ];
    for (label, text) in inputs {
        let p = parse(&text, &t);
        let total = p.content.len() + p.reasoning.as_ref().map_or(0, String::len);
        assert!(
            total > 0 || !p.calls.is_empty() || label == "think tags",
            "{label}"
        );
        // Streaming in uneven chunks gives the same result.
        let chunks: Vec<&str> = text
            .as_bytes()
            .chunks(4093)
            .map(|c| std::str::from_utf8(c).unwrap_or(""))
            .collect();
        if chunks.concat() == text {
            assert_eq!(stream(&chunks, &t), p, "{label}");
        }
    }
}

#[test]
fn missing_closing_brace_before_close_tag_is_repaired() {
    let t = tools(&["f"]);
    let p = check(
        r#"<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call> ok"#,
        &t,
    );
    assert_eq!(p.calls, vec![call("f", json!({"a": 1}))]);
    assert_eq!(p.content, "ok");
    // Not before the closer: stays content.
    let text = r#"<tool_call>{"name": "f", "arguments": {"a": 1} and more"#;
    let p = check(text, &t);
    assert!(p.calls.is_empty());
    assert_eq!(p.content, text);
}

#[test]
fn stream_emits_before_finish() {
    let t = tools(&["f"]);
    let call_text = r#"<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>"#;
    let tail = " and then a long explanation follows here".repeat(4);
    let text = format!("I think.</think>Sure, calling now. {call_text}{tail}");
    let mut p = StreamParser::new(t.clone());
    let mut before_finish = Vec::new();
    for c in chars(&text) {
        before_finish.extend(p.push(c));
    }
    let at_finish = p.finish();
    // Reasoning, the content before the call, the call and most of the
    // content after it all arrive before finish().
    assert!(matches!(before_finish.first(), Some(StreamEvent::Reasoning(r)) if r == "I think."));
    let before_call: String = before_finish
        .iter()
        .take_while(|e| !matches!(e, StreamEvent::Call(_)))
        .filter_map(|e| match e {
            StreamEvent::Content(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(before_call, "Sure, calling now.");
    assert!(
        before_finish
            .iter()
            .any(|e| matches!(e, StreamEvent::Call(_)))
    );
    let late: usize = at_finish
        .iter()
        .map(|e| match e {
            StreamEvent::Content(s) => s.len(),
            _ => 0,
        })
        .sum();
    assert!(late < tail.len() / 2, "{late} bytes only at finish");
    let mut all = before_finish;
    all.extend(at_finish);
    assert_eq!(collect(all), parse(&text, &t));
}

#[test]
fn held_back_prefixes_are_released_when_decided() {
    let opts = ParseOptions {
        orphan_think_close: false,
    };
    let mut p = StreamParser::with_options(tools(&["f"]), opts);
    assert_eq!(p.push("a <"), vec![StreamEvent::Content("a".into())]);
    assert_eq!(p.push("b> {"), vec![StreamEvent::Content(" <b>".into())]);
    // A `]` at the end may begin MiniMax-M3's `]<]minimax[>[`: held until
    // the next chunk tells.
    assert_eq!(
        p.push("x} [see]"),
        vec![StreamEvent::Content(" {x} [see".into())]
    );
    assert_eq!(p.push(" <tool_"), vec![StreamEvent::Content("]".into())]);
    assert_eq!(p.finish(), vec![StreamEvent::Content(" <tool_".into())]);
}

#[test]
fn attribute_style_xml_params_are_their_value_attributes() {
    let t = tools(&["get_weather"]);
    let text = "<function name=\"get_weather\"><params><param name=\"location\" value=\"S&amp;P 500\" type=\"string\"/><param name=\"unit\" value=\"c\" type=\"string\" /></params></function>";
    let p = check(text, &t);
    assert_eq!(
        p.calls,
        vec![call(
            "get_weather",
            json!({"location": "S&P 500", "unit": "c"})
        )]
    );
    assert_eq!(p.content, "");
    // A `>` inside a quoted value does not end the tag.
    let p = check(
        "<function name=\"get_weather\"><params><param name=\"location\" value=\"a > b\"/></params></function>",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"location": "a > b"}))]
    );
}

#[test]
fn xml_values_have_their_entities_decoded_and_cdata_kept_as_written() {
    let t = tools(&["run"]);
    let text = "<tool_call>\n<function=run>\n<parameter=code>\nif a &lt; b &amp;&amp; c: pass\n</parameter>\n<parameter=raw><![CDATA[x &amp; <y>]]></parameter>\n</function>\n</tool_call>";
    let p = check(text, &t);
    assert_eq!(
        p.calls,
        vec![call(
            "run",
            json!({"code": "if a < b && c: pass", "raw": "x &amp; <y>"})
        )]
    );
    let glm = check(
        "<tool_call>run\n<arg_key>code</arg_key>\n<arg_value>1 &gt; 0</arg_value>\n</tool_call>",
        &t,
    );
    assert_eq!(glm.calls, vec![call("run", json!({"code": "1 > 0"}))]);
}

#[test]
fn a_value_holding_its_format_s_markup_is_an_unreadable_call_not_an_argument() {
    let t = tools(&["f"]);
    for text in [
        // A `</param>` forgotten: the next item would be the value.
        "<function name=\"f\"><param name=\"a\">1<param name=\"b\">2</param></function>",
        // GLM: a value closer forgotten.
        "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1 <arg_key>b</arg_key></arg_value>\n</tool_call>",
        // MiniMax: a parameter inside another.
        "<minimax:tool_call><invoke name=\"f\"><parameter name=\"a\">1 <parameter name=\"b\">2</parameter></invoke></minimax:tool_call>",
    ] {
        let p = check(text, &t);
        assert_eq!(p.calls.len(), 1, "{text}");
        let c = &p.calls[0];
        assert_eq!(c.name, "f");
        assert_eq!(c.arguments, json!({}), "{text}");
        assert!(
            c.unreadable
                .as_deref()
                .is_some_and(|w| w.contains("markup")),
            "{text}: {c:?}"
        );
    }
}

#[test]
fn minimax_invoke_items_and_a_parameter_closer_inside_a_value() {
    let t = tools(&["get_weather", "write_file"]);
    let text = "Checking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n<invoke name=\"write_file\">\n<parameter name=\"content\"><parameter>x</parameter> in XML</parameter>\n<parameter name=\"path\">a.xml</parameter>\n</invoke>\n</minimax:tool_call>";
    let p = check(text, &t);
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"city": "Paris"})),
            call(
                "write_file",
                json!({"content": "<parameter>x</parameter> in XML", "path": "a.xml"})
            ),
        ]
    );
    assert_eq!(p.content, "Checking.");
}

#[test]
fn a_tool_definition_is_not_a_call() {
    // Text that shows a tool's definition (BFCL's live_irrelevance has
    // one as a user's message) is content, bare or in OpenAI's shape.
    let t = tools(&["record"]);
    let definition = r#"{"name": "record", "description": "Records queries.", "parameters": {"type": "dict", "properties": {"q": {"type": "list"}}}}"#;
    let p = check(definition, &t);
    assert!(p.calls.is_empty(), "{:?}", p.calls);
    assert_eq!(p.content, definition);
    let openai = format!(r#"{{"type": "function", "function": {definition}}}"#);
    assert!(check(&openai, &t).calls.is_empty());
    // A call whose arguments happen to hold `type` and `properties` is
    // still a call when no description stands beside them.
    let p = check(
        r#"{"name": "record", "parameters": {"type": "x", "properties": {}}}"#,
        &t,
    );
    assert_eq!(p.calls.len(), 1);
}

#[test]
fn pythonic_keyword_names_may_hold_letters_beyond_ascii() {
    // BFCL's live_simple_67: a Spanish API's `año_vehiculo`.
    let t = tools(&["obtener_cotizacion"]);
    let p = check(
        "[obtener_cotizacion(año_vehiculo=2024, producto=\"auto\")]",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "obtener_cotizacion",
            json!({"año_vehiculo": 2024, "producto": "auto"})
        )]
    );
}

#[test]
fn a_double_quoted_string_keeps_the_separators_of_its_notation() {
    // Gemma's notation reads bare words up to `,`, `:`, `}`; a value (or
    // key) in double quotes is one string, with JSON's escapes.
    let t = tools(&["foo"]);
    let p = check(r#"<|tool_call>call:foo{q:"a,b:c"}<tool_call|>"#, &t);
    assert_eq!(p.calls, vec![call("foo", json!({"q": "a,b:c"}))]);
    let p = check(
        r#"<|tool_call>call:foo{"k,1":"say \"hi\"\n{x}",list:["a]b",2],n:3}<tool_call|>"#,
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call(
            "foo",
            json!({"k,1": "say \"hi\"\n{x}", "list": ["a]b", 2], "n": 3})
        )]
    );
    assert_eq!(p.content, "");
    // FunctionGemma alike, and its own quote token unchanged beside it.
    let p = check(
        r#"<start_function_call>call:foo{a:"x:y,z" b:<escape>1,2<escape>}<end_function_call>"#,
        &t,
    );
    assert_eq!(
        p.calls,
        vec![call("foo", json!({"a": "x:y,z", "b": "1,2"}))]
    );
    // A bare word holding a quote mid-way is still a bare word.
    let p = check(r#"<|tool_call>call:foo{q:He said "hi"}<tool_call|>"#, &t);
    assert_eq!(p.calls, vec![call("foo", json!({"q": "He said \"hi\""}))]);
}

#[test]
fn a_tool_call_may_hold_a_name_then_json_arguments() {
    // GLM's variant: the name on the first line, JSON arguments after it.
    let t = tools(&["get_weather"]);
    let p = check(
        "Checking.\n<tool_call>get_weather\n{\"city\": \"Paris\"}</tool_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Paris"}))]);
    assert_eq!(p.content, "Checking.");
    let p = check("<tool_call>\nget_weather {\"city\": \"Oslo\"}\n", &t);
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Oslo"}))]);
    // The whole call object after its name gives its arguments.
    let p = check(
        "<tool_call>get_weather\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
        &t,
    );
    assert_eq!(p.calls, vec![call("get_weather", json!({"city": "Rome"}))]);
    // Not an offered tool, or something between the JSON and the closer:
    // content, as written.
    stay_content(
        &t,
        &[
            "<tool_call>get_time\n{\"city\": \"Paris\"}</tool_call>",
            "<tool_call>get_weather\n{\"city\": \"Paris\"} and more</tool_call>",
            "I would call get_weather\n{\"city\": \"Paris\"} next.",
        ],
    );
}

#[test]
fn a_last_string_never_closed_is_repaired_only_when_unambiguous() {
    let t = tools(&["bash"]);
    let want = call("bash", json!({"path": "/tmp", "command": "ls"}));
    // A real Gemma 4 output (shortened): the last string never closed,
    // then the object's closer and the block's; or the closer alone at the
    // end of the output.
    for text in [
        "<|tool_call>call:bash{path:<|\"|>/tmp<|\"|>,command:<|\"|>ls}<tool_call|>",
        "<|tool_call>call:bash{path:<|\"|>/tmp<|\"|>,command:<|\"|>ls}",
        "<|tool_call>call:bash{path:<|\"|>/tmp<|\"|>,command:<|\"|>ls <tool_call|>\n",
        "<|tool_call>call:bash{path:\"/tmp\",command:\"ls} <tool_call|>",
        // JSON in an explicit block, the same way.
        "<tool_call>{\"name\": \"bash\", \"arguments\": {\"path\": \"/tmp\", \"command\": \"ls}}</tool_call>",
        "<tool_call>{\"name\": \"bash\", \"arguments\": {\"path\": \"/tmp\", \"command\": \"ls}}",
        // Containers the block's closer leaves open after a complete value.
        "<|tool_call>call:bash{path:<|\"|>/tmp<|\"|>,command:<|\"|>ls<|\"|><tool_call|>",
    ] {
        let p = check(text, &t);
        assert_eq!(p.calls, vec![want.clone()], "{text}");
        assert!(p.calls[0].repaired, "{text}");
        assert_eq!(p.repaired, 1, "{text}");
        assert_eq!(p.content, "", "{text}");
    }
    // A call that needed no repair is not counted.
    let p = check(
        "<|tool_call>call:bash{command:<|\"|>ls<|\"|>}<tool_call|>",
        &t,
    );
    assert!(!p.calls[0].repaired);
    assert_eq!(p.repaired, 0);
    // Ambiguous or not at the end: nothing is read, nothing is invented.
    for text in [
        // The output stops inside the string: cut off, not closed.
        "<|tool_call>call:bash{command:<|\"|>ls",
        "<|tool_call>call:bash{command:<|\"|>ls -la",
        // Only some of the closers.
        "<|tool_call>call:bash{opts:{command:<|\"|>ls}<tool_call|>",
        // Text after the block's closer: not the end of the output.
        "<|tool_call>call:bash{command:<|\"|>ls}<tool_call|> and then",
        "<|tool_call>call:bash{n:1<tool_call|> more",
        // A number the output stops in may be cut short.
        "<|tool_call>call:bash{n:4",
        "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls",
        // Prose that names a tool.
        "I would run bash with \"ls} now",
    ] {
        let p = check(text, &t);
        assert!(p.calls.is_empty(), "{text}: {:?}", p.calls);
        assert_eq!(p.repaired, 0);
        assert_eq!(p.content, text);
    }
}

#[test]
fn a_call_marker_of_any_family_ends_template_opened_reasoning() {
    let t = tools(&["get_weather"]);
    let want = vec![call("get_weather", json!({"city": "Paris"}))];
    // The template opened <think>; the model calls before closing it.
    for marker_call in [
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
        "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Paris</parameter></invoke></minimax:tool_call>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<ns:function_calls><ns:invoke name=\"get_weather\"><ns:parameter name=\"city\">Paris</ns:parameter></ns:invoke></ns:function_calls>",
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>",
    ] {
        let text = format!("The user wants Paris.\n{marker_call}\n</think>");
        let p = check(&text, &t);
        assert_eq!(p.calls, want, "{text}");
        assert_eq!(
            p.reasoning.as_deref(),
            Some("The user wants Paris."),
            "{text}"
        );
        assert_eq!(p.content, "", "{text}");
    }
    // A marker that starts no call (mentioned, or a tool not offered) is
    // reasoning like any other text.
    for text in [
        "I will wrap it in <tool_call> tags.</think>Done.",
        "Maybe <|tool_call>call:get_time{}<tool_call|> instead.</think>Done.",
    ] {
        let p = check(text, &t);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(p.content, "Done.", "{text}");
    }
}

#[test]
fn namespaced_xml_calls_read_whatever_the_prefix() {
    let t = tools(&["get_weather", "get_time"]);
    let p = check(
        "Let me look.\n<ns:function_calls>\n<ns:invoke name=\"get_weather\">\n<ns:parameter name=\"city\">Paris</ns:parameter>\n</ns:invoke>\n<ns:invoke name=\"get_time\"><ns:parameter name=\"tz\">CET</ns:parameter></ns:invoke>\n</ns:function_calls>\nDone.",
        &t,
    );
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", json!({"city": "Paris"})),
            call("get_time", json!({"tz": "CET"}))
        ]
    );
    assert_eq!(p.content, "Let me look.\nDone.");
    // Another prefix and wrapper name; the closer optional at the end.
    let p = check(
        "<x-y.z:tool_calls><x-y.z:invoke name=\"get_weather\"><x-y.z:parameter name=\"city\">S&amp;P </x-y.z:parameter></x-y.z:invoke>",
        &t,
    );
    // The value as written: these formats write values raw.
    assert_eq!(
        p.calls,
        vec![call("get_weather", json!({"city": "S&amp;P "}))]
    );
    // Not offered, not invokes, or prose: content as written.
    stay_content(
        &t,
        &[
            "<ns:function_calls><ns:invoke name=\"nope\"><ns:parameter name=\"a\">1</ns:parameter></ns:invoke></ns:function_calls>",
            "<svg:g><svg:rect width=\"1\"/></svg:g>",
            "<ns:invoke name=\"get_weather\"> alone, outside a wrapper",
            "a <b:c> tag",
        ],
    );
}

#[test]
fn a_call_ends_a_reasoning_block_never_closed() {
    let t = tools(&["get_weather"]);
    let want = vec![call("get_weather", json!({"city": "Paris"}))];
    // The model reasons in the template's <think> and calls without
    // writing </think>: the call is read, the text after it is content.
    for marker_call in [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    ] {
        for (open, tail, content) in [
            ("<think>", "", ""),
            ("<think>", "\nDone.", "Done."),
            ("<|channel>thought\n", "", ""),
            ("<thinking>", " ok", "ok"),
        ] {
            let text = format!("{open}The user wants Paris.\n{marker_call}{tail}");
            let p = check(&text, &t);
            assert_eq!(p.calls, want, "{text}");
            assert_eq!(
                p.reasoning.as_deref(),
                Some("The user wants Paris."),
                "{text}"
            );
            assert_eq!(p.content, content, "{text}");
        }
        // Content before the block stays content.
        let text = format!("Sure. <think>Paris.\n{marker_call}");
        let p = check(&text, &t);
        assert_eq!(p.calls, want, "{text}");
        assert_eq!(p.content, "Sure.", "{text}");
        // A block closed later stays reasoning, the call in it included:
        // the model was thinking about it.
        let text = format!("<think>Maybe\n{marker_call}\nor not.</think>Done.");
        let p = check(&text, &t);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(
            p.reasoning,
            Some(format!("Maybe\n{marker_call}\nor not.")),
            "{text}"
        );
        assert_eq!(p.content, "Done.", "{text}");
    }
    // Several calls.
    let p = check(
        "<think>Both.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
        &t,
    );
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.calls[1], call("get_weather", json!({"city": "Rome"})));
    assert_eq!(p.reasoning.as_deref(), Some("Both."));
    // A marker mentioned before the call stays reasoning.
    let p = check(
        "<think>I write <tool_call> tags, not [TOOL_CALLS].\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
        &t,
    );
    assert_eq!(p.calls, want);
    assert_eq!(
        p.reasoning.as_deref(),
        Some("I write <tool_call> tags, not [TOOL_CALLS].")
    );
    // No offered call reads from the marker: all reasoning.
    for text in [
        "<think>Maybe <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
        "<think>Maybe <|tool_call>call:get_time{}<tool_call|> then.",
        "<think>I will wrap it in <tool_call> tags.",
        "<think>I will wrap it in <tool_call> tags, or [TOOL_CALLS], or <function=",
        "<think>Calling <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
    ] {
        let p = check(text, &t);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(p.content, "", "{text}");
        assert_eq!(
            p.reasoning.as_deref(),
            text.strip_prefix("<think>").map(str::trim_end),
            "{text}"
        );
    }
}

#[test]
fn an_open_block_tries_only_its_last_markers() {
    let t = tools(&["f"]);
    let call_text = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
    // A call more than MAX_HELD bytes before the end stays reasoning.
    let far = format!(
        "<think>r {call_text}{}",
        " x".repeat(reasoning::MAX_HELD / 2)
    );
    // One within it is read, whatever markers came before it.
    let near = format!(
        "<think>{}{}\n{call_text}",
        "See <tool_call> tags. ".repeat(1000),
        " y".repeat(reasoning::MAX_HELD / 2)
    );
    // Only the first MAX_TRIED markers within it are tried.
    let many = format!("<think>{}{call_text}", "<tool_call> tags. ".repeat(8));
    let fewer = format!("<think>{}{call_text}", "<tool_call> tags. ".repeat(7));
    for (text, calls) in [(&far, 0), (&near, 1), (&many, 0), (&fewer, 1)] {
        let whole = parse(text, &t);
        assert_eq!(whole.calls.len(), calls, "{}", &text[..60]);
        assert!(whole.reasoning.is_some());
        for n in [1, 7, 4093] {
            let chunks: Vec<&str> = text
                .as_bytes()
                .chunks(n)
                .map(|c| std::str::from_utf8(c).unwrap_or(""))
                .collect();
            assert_eq!(stream(&chunks, &t), whole, "{n}: {}", &text[..60]);
        }
    }
    check(&many, &t);
    check(&fewer, &t);
}

#[test]
fn an_open_block_holds_back_only_what_may_be_a_call() {
    let t = tools(&["f"]);
    let reasoning = |ev: &[StreamEvent]| -> String {
        ev.iter()
            .filter_map(|e| match e {
                StreamEvent::Reasoning(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    };
    let call_text = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
    // The reasoning before a call streams; the call is held until the
    // block closes (reasoning) or the output ends (a call).
    let mut p = StreamParser::new(t.clone());
    let ev = p.push("<think>Let me look. ");
    assert_eq!(reasoning(&ev), "Let me look.");
    assert!(p.push(call_text).is_empty());
    assert!(p.push(" Or not.").is_empty());
    let mut ev = p.push("</think>No.");
    assert_eq!(reasoning(&ev), format!(" {call_text} Or not."));
    ev.extend(p.finish());
    assert!(ev.contains(&StreamEvent::Content("No.".into())));
    assert!(!ev.iter().any(|e| matches!(e, StreamEvent::Call(_))));
    let mut p = StreamParser::new(t.clone());
    p.push("<think>Let me look. ");
    assert!(p.push(call_text).is_empty());
    assert_eq!(p.finish(), vec![StreamEvent::Call(call("f", json!({})))]);
    // A marker no call can read from is released once that is known.
    let mut p = StreamParser::new(t.clone());
    let mut got = reasoning(&p.push("<think>I write <tool_call> tags"));
    got += &reasoning(&p.push(", then JSON, and so on. More reasoning follows."));
    assert!(got.starts_with("I write <tool_call> tags, then"), "{got}");
    // Beyond MAX_HELD, held text is reasoning.
    let mut p = StreamParser::new(t);
    p.push("<think>Let me look. ");
    p.push(call_text);
    let ev = p.push(&" x".repeat(reasoning::MAX_HELD / 2 + 8));
    assert!(reasoning(&ev).starts_with(&format!(" {call_text}")));
}
