//! `text_process`: counting, case, trimming, replacing, splitting and regex
//! search over a text. Regexes are the `regex` crate's (linear time, no
//! backtracking), with a size limit.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::tool;

use toolgate::ToolError;

/// Largest compiled regex, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Most matches or pieces returned.
const MAX_ITEMS: usize = 1_000;

/// What to do with the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextOperation {
    /// Count characters, words, lines and bytes.
    Count,
    /// Upper-case the text.
    Upper,
    /// Lower-case the text.
    Lower,
    /// Remove leading and trailing whitespace.
    Trim,
    /// Replace every occurrence of `pattern` (literal) with `replacement`.
    Replace,
    /// Replace every match of the regex `pattern` with `replacement` ($1 for groups).
    RegexReplace,
    /// Split on `pattern` (literal; whitespace when absent).
    Split,
    /// Every match of the regex `pattern`, with its capture groups.
    RegexFind,
}

/// Process a text: count (characters, words, lines, bytes), upper, lower,
/// trim, replace (literal), regex_replace, split, or regex_find (every
/// match with its groups).
#[tool(category = "text", read_only)]
pub fn text_process(
    /// The text to process.
    text: String,
    /// The operation.
    operation: TextOperation,
    /// The literal (replace, split) or regex (regex_replace, regex_find) to look for.
    pattern: Option<String>,
    /// The replacement for replace and regex_replace (default: empty).
    replacement: Option<String>,
) -> Result<Value, ToolError> {
    let need_pattern = || {
        pattern.clone().filter(|p| !p.is_empty()).ok_or_else(|| {
            ToolError::Failed(format!(
                "`{}` needs a non-empty `pattern`",
                serde_json::to_value(operation)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ))
        })
    };
    let replacement = replacement.clone().unwrap_or_default();
    Ok(match operation {
        TextOperation::Count => json!({
            "characters": text.chars().count(),
            "words": text.split_whitespace().count(),
            "lines": text.lines().count(),
            "bytes": text.len(),
        }),
        // A character's case mapping is at most three characters of at most
        // four bytes: bounded before mapping.
        TextOperation::Upper => {
            json!(within(text.len().saturating_mul(3), "the text").map(|()| text.to_uppercase())?)
        }
        TextOperation::Lower => {
            json!(within(text.len().saturating_mul(3), "the text").map(|()| text.to_lowercase())?)
        }
        TextOperation::Trim => json!(text.trim()),
        TextOperation::Replace => {
            let p = need_pattern()?;
            let count = text.matches(p.as_str()).count();
            let size = (text.len() - count * p.len())
                .saturating_add(count.saturating_mul(replacement.len()));
            within(size, "the replaced text")?;
            json!({"text": text.replace(p.as_str(), &replacement), "replacements": count})
        }
        TextOperation::RegexReplace => {
            let re = regex(&need_pattern()?)?;
            let (out, count) = replace_within(&re, &text, &replacement)?;
            json!({"text": out, "replacements": count})
        }
        TextOperation::Split => {
            let pieces: Vec<&str> = match pattern.as_deref().filter(|p| !p.is_empty()) {
                Some(p) => text.split(p).take(MAX_ITEMS).collect(),
                None => text.split_whitespace().take(MAX_ITEMS).collect(),
            };
            json!(pieces)
        }
        TextOperation::RegexFind => {
            let re = regex(&need_pattern()?)?;
            // Nested groups copy the same text again: the copies are
            // counted before they are made.
            let mut size = 0usize;
            let matches: Vec<Value> = re
                .captures_iter(&text)
                .take(MAX_ITEMS)
                .map(|caps| {
                    size = caps
                        .iter()
                        .flatten()
                        .fold(size, |n, m| n.saturating_add(m.len() + 16));
                    within(size, "the matches").map(|()| caps)
                })
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter_map(|caps| {
                    let whole = caps.get(0)?;
                    let groups: Vec<Value> = caps
                        .iter()
                        .skip(1)
                        .map(|g| g.map_or(Value::Null, |m| json!(m.as_str())))
                        .collect();
                    Some(if groups.is_empty() {
                        json!({"match": whole.as_str(), "start": whole.start()})
                    } else {
                        json!({"match": whole.as_str(), "start": whole.start(), "groups": groups})
                    })
                })
                .collect();
            json!(matches)
        }
    })
}

/// `Ok` when a result of `size` bytes stays within the builtin's bound.
fn within(size: usize, what: &str) -> Result<(), ToolError> {
    if size > super::MAX_RESULT_BYTES {
        return Err(super::too_large(what, size));
    }
    Ok(())
}

/// `regex_replace`: every match replaced (`$1` for groups), the output
/// checked against the bound as it grows; returns it and the count.
fn replace_within(
    re: &regex::Regex,
    text: &str,
    replacement: &str,
) -> Result<(String, usize), ToolError> {
    let mut out = String::new();
    let mut last = 0;
    let mut count = 0;
    // Each `$` of the replacement may insert the whole match (or less).
    let refs = replacement.matches('$').count();
    for caps in re.captures_iter(text) {
        let Some(whole) = caps.get(0) else { continue };
        let most = out
            .len()
            .saturating_add(whole.start() - last)
            .saturating_add(
                replacement
                    .len()
                    .saturating_add(refs.saturating_mul(whole.len())),
            );
        within(most, "the replaced text")?;
        out.push_str(&text[last..whole.start()]);
        caps.expand(replacement, &mut out);
        last = whole.end();
        count += 1;
        within(out.len() + (text.len() - last), "the replaced text")?;
    }
    out.push_str(&text[last..]);
    Ok((out, count))
}

fn regex(pattern: &str) -> Result<regex::Regex, ToolError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ToolError::Failed(format!("the regex is invalid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: Value) -> Result<Value, ToolError> {
        let tool = text_process::tool();
        let ctx = toolgate::context::ToolContext::detached("text_process");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tool.call(args, ctx))
    }

    #[test]
    fn operations() {
        assert_eq!(
            run(json!({"text": "héllo world\nbye", "operation": "count"})).unwrap(),
            json!({"characters": 15, "words": 3, "lines": 2, "bytes": 16})
        );
        assert_eq!(
            run(json!({"text": "Straße", "operation": "upper"})).unwrap(),
            json!("STRASSE")
        );
        assert_eq!(
            run(json!({"text": "ABC", "operation": "lower"})).unwrap(),
            json!("abc")
        );
        assert_eq!(
            run(json!({"text": "  x \n", "operation": "trim"})).unwrap(),
            json!("x")
        );
        assert_eq!(
            run(
                json!({"text": "a.b.c", "operation": "replace", "pattern": ".", "replacement": "-"})
            )
            .unwrap(),
            json!({"text": "a-b-c", "replacements": 2})
        );
        assert_eq!(
            run(json!({"text": "2024-01-31", "operation": "regex_replace", "pattern": r"(\d+)-(\d+)-(\d+)", "replacement": "$3/$2/$1"}))
                .unwrap(),
            json!({"text": "31/01/2024", "replacements": 1})
        );
        assert_eq!(
            run(json!({"text": "a, b,c", "operation": "split", "pattern": ","})).unwrap(),
            json!(["a", " b", "c"])
        );
        assert_eq!(
            run(json!({"text": " a  b\tc ", "operation": "split"})).unwrap(),
            json!(["a", "b", "c"])
        );
        assert_eq!(
            run(json!({"text": "x=1, y=22", "operation": "regex_find", "pattern": r"(\w)=(\d+)"}))
                .unwrap(),
            json!([
                {"match": "x=1", "start": 0, "groups": ["x", "1"]},
                {"match": "y=22", "start": 5, "groups": ["y", "22"]}
            ])
        );
    }

    #[test]
    fn refused_inputs() {
        let e = run(json!({"text": "x", "operation": "regex_find", "pattern": "("})).unwrap_err();
        assert!(e.to_string().contains("the regex is invalid"), "{e}");
        let e = run(json!({"text": "x", "operation": "replace"})).unwrap_err();
        assert!(
            e.to_string()
                .contains("`replace` needs a non-empty `pattern`"),
            "{e}"
        );
        let e = run(json!({"text": "x", "operation": "regex_find", "pattern": "a{1000}{1000}"}))
            .unwrap_err();
        assert!(e.to_string().contains("the regex is invalid"), "{e}");
        let e = run(json!({"text": "x", "operation": "shout"})).unwrap_err();
        assert_eq!(e.code(), "invalid_arguments");
    }
}
