//! The tool-call parser judged on public data no one here wrote: every
//! function call of the Berkeley Function Calling Leaderboard's answer sets
//! (the `bfcl-eval` wheel from PyPI, hash-pinned in
//! `tests/public-data/requirements.txt`, unpacked by `make setup` into
//! `target/public-data/bfcl/`), rendered as model text in each output
//! format the parser accepts, parsed whole and streamed, and compared with
//! the call written (same name, equal arguments). On the irrelevance sets
//! (questions no offered function answers), the question's text as the
//! model's answer must give no call at all.
//!
//! The ground truth lists, for each parameter, the values a judge accepts;
//! the first one is the call written ("" means the parameter may be left
//! out). Names are written with `.` as `_`, as BFCL itself does for models
//! with native function calling (the gateway's tool names allow no dots).
//! Java and JavaScript sets are left out: their values are source code in
//! those languages, not JSON values. What misses is an answer whose value
//! contradicts the set's own schema (`number_of_rooms: 2` for a string enum
//! of `"1"`..`"3"`): written as text, the parser gives the schema's type.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value, json};
use toolgate_tests::{json_lines, public_data};
use toolgate_toolcall::{OfferedTool, StreamEvent, StreamParser, parse};

/// BFCL's answered sets (Java and JavaScript left out, see above).
pub const SETS: &[&str] = &[
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
];

/// BFCL's sets of questions no offered function answers.
pub const IRRELEVANCE: &[&str] = &["irrelevance", "live_irrelevance"];

/// The share of calls each format must read back exactly.
const GOAL: f64 = 0.995;

fn data_dir() -> Option<PathBuf> {
    public_data("bfcl/BFCL_v4_simple_python.json")?;
    public_data("bfcl")
}

fn tool_name(name: &str) -> String {
    name.replace('.', "_")
}

/// BFCL's parameter types, as JSON Schema.
fn schema(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let v = match (k.as_str(), v.as_str()) {
                    ("type", Some("dict")) => json!("object"),
                    ("type", Some("float")) => json!("number"),
                    ("type", Some("tuple")) => json!("array"),
                    ("type", Some("any")) => continue,
                    _ => schema(v),
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(schema).collect()),
        other => other.clone(),
    }
}

/// The value written for one parameter: the first accepted one; `None`
/// when the first is "" (left out).
fn pick(accepted: &Value) -> Option<Value> {
    let first = match accepted {
        Value::Array(options) => options.first()?,
        other => other,
    };
    if first == &json!("") {
        return None;
    }
    Some(written(first))
}

/// A value as written: a nested object's members are lists of accepted
/// values again.
fn written(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, accepted)| pick(accepted).map(|v| (k.clone(), v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[derive(Debug, Clone)]
struct Call {
    name: String,
    arguments: Map<String, Value>,
}

struct Case {
    id: String,
    tools: Vec<OfferedTool>,
    calls: Vec<Call>,
}

fn offered(functions: &Value) -> Vec<OfferedTool> {
    functions
        .as_array()
        .unwrap()
        .iter()
        .map(|f| OfferedTool {
            name: tool_name(f["name"].as_str().unwrap()),
            parameters: schema(&f["parameters"]).into(),
        })
        .collect()
}

fn cases(dir: &std::path::Path) -> Vec<Case> {
    let mut out = Vec::new();
    for set in SETS {
        let questions = json_lines(&dir.join(format!("BFCL_v4_{set}.json")));
        let answers: BTreeMap<String, Value> =
            json_lines(&dir.join(format!("possible_answer/BFCL_v4_{set}.json")))
                .into_iter()
                .map(|a| {
                    (
                        a["id"].as_str().unwrap().to_owned(),
                        a["ground_truth"].clone(),
                    )
                })
                .collect();
        for q in questions {
            let id = q["id"].as_str().unwrap().to_owned();
            let truth = &answers[&id];
            let calls = truth
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c.as_object().unwrap().iter())
                .map(|(name, params)| Call {
                    name: tool_name(name),
                    arguments: params
                        .as_object()
                        .unwrap()
                        .iter()
                        .filter_map(|(k, accepted)| pick(accepted).map(|v| (k.clone(), v)))
                        .collect(),
                })
                .collect();
            out.push(Case {
                id,
                tools: offered(&q["function"]),
                calls,
            });
        }
    }
    out
}

/// A value as a Python literal.
fn python(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        // A JSON string literal is a valid Python one (Python reads `\uXXXX`
        // and the other escapes alike).
        Value::String(_) => v.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::from(k.as_str()), python(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A value as the text of an XML parameter: a string as it is, anything
/// else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn xml_attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

/// A value in Gemma's notation: strings between `quote`, the rest bare,
/// keys bare where they are words.
fn gemma(v: &Value, quote: &str) -> String {
    match v {
        Value::String(s) => format!("{quote}{s}{quote}"),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|x| gemma(x, quote))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, x)| {
                    let bare = !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_');
                    let key = if bare {
                        k.clone()
                    } else {
                        format!("{quote}{k}{quote}")
                    };
                    format!("{key}:{}", gemma(x, quote))
                })
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}

/// A value as MiniMax-M3's template writes it: an object's members and an
/// array's `<item>`s as namespaced elements, anything else as text.
fn m3(v: &Value) -> String {
    const NS: &str = "]<]minimax[>[";
    let element = |k: &str, x: &Value| format!("{NS}<{k}>{}{NS}</{k}>", m3(x));
    match v {
        Value::Object(map) => map.iter().map(|(k, x)| element(k, x)).collect(),
        Value::Array(items) => items.iter().map(|x| element("item", x)).collect(),
        other => text(other),
    }
}

/// DSML's `string="true"` for a string, `"false"` and JSON for the rest.
fn dsml(calls: &[Call], block: &str) -> String {
    let invokes = each_call(calls, "", |c| {
        let params = each_param(c, |k, v| {
            let is_string = v.is_string();
            format!(
                "<｜DSML｜parameter name=\"{k}\" string=\"{is_string}\">{}</｜DSML｜parameter>\n",
                text(v)
            )
        });
        format!(
            "<｜DSML｜invoke name=\"{}\">\n{params}</｜DSML｜invoke>\n",
            c.name
        )
    });
    format!("<｜DSML｜{block}>\n{invokes}</｜DSML｜{block}>")
}

type Render = fn(&[Call]) -> String;

fn json_calls(calls: &[Call], key: &str) -> String {
    Value::Array(
        calls
            .iter()
            .map(|c| json!({"name": c.name, key: c.arguments}))
            .collect(),
    )
    .to_string()
}

/// Each call of `calls` written by `f`, joined by `sep`.
fn each_call(calls: &[Call], sep: &str, f: impl Fn(&Call) -> String) -> String {
    calls.iter().map(f).collect::<Vec<_>>().join(sep)
}

/// Each argument of `call` written by `f`, concatenated.
fn each_param(call: &Call, f: impl Fn(&str, &Value) -> String) -> String {
    call.arguments.iter().map(|(k, v)| f(k, v)).collect()
}

/// Each format: its name, how it writes the calls of one answer.
const FORMATS: &[(&str, Render)] = &[
    ("hermes", |calls| {
        each_call(calls, "\n", |c| {
            let call = json!({"name": c.name, "arguments": c.arguments});
            format!("<tool_call>\n{call}\n</tool_call>")
        })
    }),
    ("json_array", |calls| json_calls(calls, "arguments")),
    ("json_fenced", |calls| {
        let list = json_calls(calls, "parameters");
        format!("I will call the tools.\n```json\n{list}\n```")
    }),
    ("mistral", |calls| {
        format!("[TOOL_CALLS]{}", json_calls(calls, "arguments"))
    }),
    ("pythonic", |calls| {
        let list = each_call(calls, ", ", |c| {
            let args: Vec<String> = c
                .arguments
                .iter()
                .map(|(k, v)| format!("{k}={}", python(v)))
                .collect();
            format!("{}({})", c.name, args.join(", "))
        });
        format!("[{list}]")
    }),
    ("xml_parameters", |calls| {
        each_call(calls, "\n", |c| {
            let params = each_param(c, |k, v| {
                format!("<parameter={k}>\n{}\n</parameter>\n", text(v))
            });
            format!(
                "<tool_call>\n<function={}>\n{params}</function>\n</tool_call>",
                c.name
            )
        })
    }),
    ("xml_attributes", |calls| {
        each_call(calls, "\n", |c| {
            let params = each_param(c, |k, v| {
                let (value, kind) = (xml_attr(&text(v)), json_type(v));
                format!("<param name=\"{k}\" value=\"{value}\" type=\"{kind}\"/>")
            });
            format!(
                "<function name=\"{}\"><params>{params}</params></function>",
                c.name
            )
        })
    }),
    ("minimax", |calls| {
        let invokes = each_call(calls, "", |c| {
            let params = each_param(c, |k, v| {
                format!("<parameter name=\"{k}\">{}</parameter>\n", text(v))
            });
            format!("<invoke name=\"{}\">\n{params}</invoke>\n", c.name)
        });
        format!("<minimax:tool_call>\n{invokes}</minimax:tool_call>")
    }),
    ("glm", |calls| {
        each_call(calls, "\n", |c| {
            let params = each_param(c, |k, v| {
                format!(
                    "<arg_key>{k}</arg_key>\n<arg_value>{}</arg_value>\n",
                    text(v)
                )
            });
            format!("<tool_call>{}\n{params}</tool_call>", c.name)
        })
    }),
    ("deepseek_v3", |calls| {
        let items = each_call(calls, "", |c| {
            let args = Value::Object(c.arguments.clone());
            format!(
                "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{}\n```json\n{args}\n```<｜tool▁call▁end｜>",
                c.name
            )
        });
        format!("<｜tool▁calls▁begin｜>{items}<｜tool▁calls▁end｜>")
    }),
    ("kimi_k2", |calls| {
        let items: String = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let args = Value::Object(c.arguments.clone());
                format!("<|tool_call_begin|>functions.{}:{i}<|tool_call_argument_begin|>{args}<|tool_call_end|>", c.name)
            })
            .collect();
        format!("<|tool_calls_section_begin|>{items}<|tool_calls_section_end|>")
    }),
    ("minimax_m3", |calls| {
        const NS: &str = "]<]minimax[>[";
        let invokes = each_call(calls, "\n", |c| {
            let args = m3(&Value::Object(c.arguments.clone()));
            format!("{NS}<invoke name=\"{}\">{args}{NS}</invoke>", c.name)
        });
        format!("{NS}<tool_call>\n{invokes}\n{NS}</tool_call>")
    }),
    ("dsml_v32", |calls| dsml(calls, "function_calls")),
    ("dsml_v4", |calls| dsml(calls, "tool_calls")),
    ("harmony", |calls| {
        let messages = each_call(calls, "", |c| {
            let args = Value::Object(c.arguments.clone());
            format!(
                "<|start|>assistant<|channel|>commentary to=functions.{} <|constrain|>json<|message|>{args}<|call|>",
                c.name
            )
        });
        format!("<|channel|>analysis<|message|>I need the tools.<|end|>{messages}")
    }),
    ("gemma4", |calls| {
        each_call(calls, "", |c| {
            let args = gemma(&Value::Object(c.arguments.clone()), "<|\"|>");
            format!("<|tool_call>call:{}{args}<tool_call|>", c.name)
        })
    }),
    ("functiongemma", |calls| {
        each_call(calls, "", |c| {
            let args = gemma(&Value::Object(c.arguments.clone()), "<escape>");
            format!(
                "<start_function_call>call:{}{args}<end_function_call>",
                c.name
            )
        })
    }),
    ("apertus", |calls| {
        let items: Vec<Value> = calls
            .iter()
            .map(|c| json!({ c.name.as_str(): c.arguments }))
            .collect();
        format!("<|tools_prefix|>{}<|tools_suffix|>", Value::Array(items))
    }),
    ("kimi_k3", |calls| {
        let items: String = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let params = each_param(c, |k, v| {
                    let kind = json_type(v);
                    format!(
                        "<|open|>argument key=\"{}\" type=\"{kind}\"<|sep|>{}<|close|>argument<|sep|>",
                        xml_attr(k),
                        text(v)
                    )
                });
                format!(
                    "<|open|>call tool=\"{}\" index=\"{}\"<|sep|>{params}<|close|>call<|sep|>",
                    c.name,
                    i + 1
                )
            })
            .collect();
        format!("<|open|>tools<|sep|>{items}<|close|>tools<|sep|><|close|>message<|sep|>")
    }),
    ("step3", |calls| {
        let items = each_call(calls, "\n", |c| {
            let params = each_param(c, |k, v| {
                format!(
                    "<steptml:parameter name=\"{k}\">{}</steptml:parameter>",
                    text(v)
                )
            });
            format!(
                "<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"{}\">{params}</steptml:invoke><｜tool_call_end｜>",
                c.name
            )
        });
        format!("<｜tool_calls_begin｜>\n{items}\n<｜tool_calls_end｜>")
    }),
    ("hunyuan_v3", |calls| {
        let items = each_call(calls, "\n", |c| {
            let params = each_param(c, |k, v| {
                format!(
                    "<arg_key>{k}</arg_key>\n<arg_value>{}</arg_value>\n",
                    text(v)
                )
            });
            format!("<tool_call>{}<tool_sep>\n{params}</tool_call>", c.name)
        });
        format!("<tool_calls>\n{items}\n</tool_calls>")
    }),
    ("functionary", |calls| {
        let messages: Vec<String> = calls
            .iter()
            .map(|c| format!("{}\n{}", c.name, Value::Object(c.arguments.clone())))
            .collect();
        messages.join(">>>")
    }),
];

/// JSON equality, numbers compared by value (`5` equals `5.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn matches(expected: &[Call], got: &[toolgate_toolcall::ParsedCall]) -> bool {
    expected.len() == got.len()
        && expected.iter().zip(got).all(|(e, g)| {
            g.unreadable.is_none()
                && e.name == g.name
                && same(&Value::Object(e.arguments.clone()), &g.arguments)
        })
}

/// `text` fed to a stream parser in chunks of 1 to 13 characters.
fn streamed(text: &str, tools: &[OfferedTool], seed: usize) -> Vec<toolgate_toolcall::ParsedCall> {
    let mut parser = StreamParser::new(tools.to_vec());
    let chars: Vec<char> = text.chars().collect();
    let mut events = Vec::new();
    let mut at = 0;
    let mut step = seed;
    while at < chars.len() {
        step = (step * 7 + 3) % 13 + 1;
        let end = (at + step).min(chars.len());
        events.extend(parser.push(&chars[at..end].iter().collect::<String>()));
        at = end;
    }
    events.extend(parser.finish());
    events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Call(c) => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_bfcl_answer_is_read_back_in_every_format_whole_and_streamed() {
    let Some(dir) = data_dir() else { return };
    let cases = cases(&dir);
    assert!(cases.len() > 2000, "{} cases", cases.len());
    let calls: usize = cases.iter().map(|c| c.calls.len()).sum();
    let mut report = Vec::new();
    let mut failed = Vec::new();
    for (format, render) in FORMATS {
        let (mut whole, mut stream) = (0usize, 0usize);
        let mut misses = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let text = render(&case.calls);
            let parsed = parse(&text, &case.tools);
            if matches(&case.calls, &parsed.calls) {
                whole += 1;
            } else if misses.len() < 3 {
                misses.push(format!("{}: {text:?} -> {:?}", case.id, parsed.calls));
            }
            if matches(&case.calls, &streamed(&text, &case.tools, i)) {
                stream += 1;
            }
        }
        let n = cases.len() as f64;
        report.push(format!(
            "{format:<15} whole {:6.2}%  streamed {:6.2}%",
            100.0 * whole as f64 / n,
            100.0 * stream as f64 / n
        ));
        if (whole as f64) < GOAL * n || (stream as f64) < GOAL * n {
            failed.push(format!("{format}: {misses:#?}"));
        }
    }
    eprintln!(
        "BFCL v4: {} answers ({calls} calls) in {} formats\n{}",
        cases.len(),
        FORMATS.len(),
        report.join("\n")
    );
    assert!(
        failed.is_empty(),
        "under {GOAL}:\n{}\n{}",
        report.join("\n"),
        failed.join("\n")
    );
}

#[test]
fn no_call_is_invented_from_the_irrelevance_sets() {
    let Some(dir) = data_dir() else { return };
    let mut questions = 0;
    for set in IRRELEVANCE {
        for q in json_lines(&dir.join(format!("BFCL_v4_{set}.json"))) {
            let tools = offered(&q["function"]);
            for turn in q["question"].as_array().unwrap() {
                for message in turn.as_array().unwrap() {
                    let text = message["content"].as_str().unwrap_or_default();
                    questions += 1;
                    let parsed = parse(text, &tools);
                    assert!(
                        parsed.calls.is_empty(),
                        "{}: {text:?} gave {:?}",
                        q["id"],
                        parsed.calls
                    );
                    assert!(
                        streamed(text, &tools, questions).is_empty(),
                        "{}: streamed",
                        q["id"]
                    );
                }
            }
        }
    }
    assert!(questions > 1000, "{questions} questions");
    eprintln!("BFCL v4 irrelevance: {questions} messages, 0 calls invented");
}
