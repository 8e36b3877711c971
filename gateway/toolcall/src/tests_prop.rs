//! Property tests: no panics on arbitrary input, and streaming over any
//! chunking equals whole-text parsing.

use proptest::prelude::*;

use super::tests::{stream, stream_with, tools};
use super::*;

const FRAGMENTS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<tool_call",
    "<|tool_call|>",
    "<tool_calls>",
    "</tool_calls>",
    "<function=f>",
    "<function=add>",
    "</function>",
    "<function name=\"f\">",
    "<parameter=a>",
    "</parameter>",
    "<param name=\"a\" type=\"int\">",
    "</param>",
    "<arg_key>a</arg_key>",
    "<arg_value>1</arg_value>",
    "<think>",
    "</think>",
    "<seed:think>",
    "[TOOL_CALLS]",
    "functools",
    "<|python_tag|>",
    "<|python_start|>",
    "```",
    "```json\n",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>functions.f:0",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<｜DSML｜function_calls>",
    "<｜DSML｜tool_calls>",
    "<｜DSML｜invoke name=\"f\">",
    "<｜DSML｜parameter name=\"a\" string=\"false\">",
    "</｜DSML｜parameter>",
    "</｜DSML｜invoke>",
    "<invoke name=\"f\">",
    "<parameter name=\"a\">",
    "<dots_function_call>",
    "<｜tool_calls_begin｜>",
    "<｜tool_call_begin｜>function<｜tool_sep｜>",
    "<steptml:invoke name=\"f\">",
    "<｜tool_call_end｜>",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    "<|start|>assistant",
    "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
    "<|channel|>final<|message|>",
    "<|call|>",
    "<|open|>tools<|sep|>",
    "<|open|>call tool=\"f\" index=\"1\"<|sep|>",
    "<|open|>argument key=\"a\" type=\"number\"<|sep|>",
    "<|close|>argument<|sep|>",
    "<|close|>call<|sep|>",
    "<|close|>think<|sep|>",
    "<|tool_call>call:f{",
    "<|\"|>",
    "<tool_call|>",
    "<start_function_call>call:add{",
    "<escape>",
    "<end_function_call>",
    "<|channel>thought",
    "<channel|>",
    "<|tools_prefix|>[{\"f\": {}}]",
    "<|inner_prefix|>",
    "]<]minimax[>[<tool_call>",
    "]<]minimax[>[<invoke name=\"f\">",
    "]<]minimax[>[<a>",
    "]<]minimax[>[</a>",
    "]<]minimax[>[<item>",
    "]<]minimax[>[</invoke>",
    "]<]minimax[>[",
    ">>>",
    ">>>all\n",
    "f\n{}",
    "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
    "{\"name\": \"add\", \"parameters\": {}}",
    "{\"name\": \"nope\", \"arguments\": {}}",
    "{\"name\": \"f\"",
    ", \"arguments\": {",
    "\"x\": \"}\"",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "\"",
    "'",
    "\\",
    ",",
    ";",
    ":",
    "f(a=1)",
    "[f(a='x'), add(b=[1, {'c': None}])]",
    "get_weather",
    "add",
    "f",
    " ",
    "\n",
    "text ",
    "é",
    "🎉",
    "<",
    ">",
    "=",
    // Namespaced XML, Kimi K2 "horizon", GLM's name + JSON, Step3's
    // separator, a DSML closer misspelled short.
    "<ns:function_calls>",
    "<ns:invoke name=\"f\">",
    "<ns:parameter name=\"a\">",
    "</ns:parameter>",
    "</ns:invoke>",
    "</ns:function_calls>",
    "<ifm|tool_calls>",
    "<ifm|tool_call>f",
    "<ifm|arg_key>a</ifm|arg_key>",
    "<ifm|arg_type>integer</ifm|arg_type>",
    "<ifm|arg_value>1</ifm|arg_value>",
    "</ifm|tool_call>",
    "<tool_call>f\n{\"a\": 1}",
    "<｜tool_sep｜>",
    "</｜DSML｜>",
    // Gemma's bare and split calls, double-quoted strings, the end of a
    // block right after a value.
    "call:f{",
    "<call>",
    "<|tool_call>:",
    // A reasoning block never closed, a call in it.
    "<think>Let me call. <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>",
    "a:\"x,y:z\"",
    "\\\"",
    "}<tool_call|>",
    // Python: string prefixes, quotes inside strings, brackets after.
    "b'",
    "r\"",
    "')",
    ")]",
];

/// A JSON Schema of any shape, its `$ref`s pointing anywhere in it
/// (itself, each other, nowhere).
fn schema() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": "integer"})),
        Just(json!({"type": "object"})),
        prop::sample::select(vec![
            "#",
            "#/$defs/A",
            "#/$defs/B",
            "#/properties/a",
            "#/x/y",
            "http://x"
        ])
        .prop_map(|r| json!({"$ref": r})),
    ];
    leaf.prop_recursive(6, 64, 4, |inner| {
        prop::collection::btree_map(
            prop::sample::select(vec![
                "a",
                "b",
                "$defs",
                "A",
                "B",
                "properties",
                "items",
                "anyOf",
            ]),
            inner,
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
    })
}

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..24).prop_map(|v| v.concat())
}

/// Pieces of a reasoning block never closed: markers that start calls,
/// markers that start none, prose.
const OPEN_BLOCK: &[&str] = &[
    "<tool_call> tags. ",
    "<tool_call>",
    "</tool_call>",
    "{\"name\": \"f\", \"arguments\": {}}",
    "{\"name\": \"nope\", \"arguments\": {}}",
    "[TOOL_CALLS]",
    "<|tool_call>call:f{}<tool_call|>",
    "<function=f>",
    "</function>",
    "<a:b>",
    "</think>",
    "<",
    " x",
    "\n",
];

fn open_block_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(OPEN_BLOCK), 0..40)
        .prop_map(|v| format!("<think>{}", v.concat()))
}

/// Split `text` at the given char positions (taken modulo its length).
fn split<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| bounds.get(c % bounds.len().max(1)).copied().unwrap_or(0))
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut last = 0;
    for p in points {
        if p > last {
            out.push(&text[last..p]);
            last = p;
        }
    }
    out.push(&text[last..]);
    out
}

fn offered() -> Vec<OfferedTool> {
    tools(&["f", "add", "get_weather"])
}

proptest! {
    // 512 cases, or PROPTEST_CASES when set (`make fuzz`).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_strings_never_panic_and_stream_equals_whole(
        text in any::<String>(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let t = offered();
        let whole = parse(&text, &t);
        prop_assert_eq!(stream(&split(&text, &cuts), &t), whole);
    }

    #[test]
    fn marker_fragments_never_panic_and_stream_equals_whole(
        text in fragment_text(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let t = offered();
        let whole = parse(&text, &t);
        for c in &whole.calls {
            prop_assert!(c.arguments.is_object());
            prop_assert!(["f", "add", "get_weather"].contains(&c.name.as_str()));
        }
        prop_assert_eq!(stream(&split(&text, &cuts), &t), whole.clone());
        let chars: Vec<&str> = split(&text, &(0..text.chars().count()).collect::<Vec<_>>());
        prop_assert_eq!(stream(&chars, &t), whole);
    }

    #[test]
    fn an_open_block_streams_as_it_parses_whole(
        text in open_block_text(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let t = offered();
        let whole = parse(&text, &t);
        prop_assert_eq!(stream(&split(&text, &cuts), &t), whole.clone());
        let chars: Vec<&str> = split(&text, &(0..text.chars().count()).collect::<Vec<_>>());
        prop_assert_eq!(stream(&chars, &t), whole);
    }

    #[test]
    fn stream_equals_whole_without_orphan_close(
        text in fragment_text(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let t = offered();
        let opts = ParseOptions { orphan_think_close: false };
        let whole = parse_with_options(&text, &t, opts);
        prop_assert_eq!(stream_with(&split(&text, &cuts), &t, opts), whole);
    }

    #[test]
    fn any_schema_references_are_inlined_within_bounds(
        schema in schema(),
        text in fragment_text(),
    ) {
        // Circular and exploding `$ref`s: the tools are built and used.
        let t = vec![OfferedTool { name: "f".to_string(), parameters: schema.into() }];
        let whole = parse(&text, &t);
        prop_assert_eq!(stream(&split(&text, &[3, 7]), &t), whole);
    }

    #[test]
    fn without_calls_nothing_is_lost(text in fragment_text()) {
        let whole = parse(&text, &[]);
        prop_assert!(whole.calls.is_empty());
        let mut got: Vec<char> = whole.content.chars().chain(whole.reasoning.unwrap_or_default().chars())
            .filter(|c| !c.is_whitespace()).collect();
        let mut want: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
        got.sort_unstable();
        want.sort_unstable();
        // Only the think tags that were split off may be missing.
        let mut missing = want.clone();
        for c in &got {
            let pos = missing.binary_search(c);
            prop_assert!(pos.is_ok(), "content has extra char {:?}", c);
            if let Ok(i) = pos {
                missing.remove(i);
            }
        }
        // Only tags and frame tokens may be missing: the reasoning tags
        // split off and the frames dropped.
        let removable = [
            "<think>", "</think>", "<thinking>", "</thinking>", "<seed:think>", "</seed:think>",
            "<|channel|>analysis<|message|>", "<|end|>", "<|channel>thought", "<channel|>",
            "<|inner_prefix|>", "<|inner_suffix|>", "<|open|>think<|sep|>", "<|close|>think<|sep|>",
            "<|call|>", "<|return|>", "<|start|>assistant", "<|open|>response<|sep|>",
            "<|close|>response<|sep|>", "<|close|>message<|sep|>", ">>>all",
        ];
        let mut pool: Vec<char> = removable
            .iter()
            .flat_map(|t| text.match_indices(t).flat_map(|(_, m)| m.chars()))
            .filter(|c| !c.is_whitespace())
            .collect();
        // Harmony's headers (`<|start|>…<|channel|>…<|message|>`) are frames too.
        for (a, _) in text.match_indices("<|start|>").chain(text.match_indices("<|channel|>")) {
            let rest = &text[a..];
            if let Some(m) = rest.find("<|message|>") {
                pool.extend(rest[..m + "<|message|>".len()].chars().filter(|c| !c.is_whitespace()));
            }
        }
        pool.sort_unstable();
        let mut allowed = true;
        for c in &missing {
            match pool.binary_search(c) {
                Ok(i) => {
                    pool.remove(i);
                }
                Err(_) => allowed = false,
            }
        }
        prop_assert!(allowed, "lost {:?}", missing);
    }
}
