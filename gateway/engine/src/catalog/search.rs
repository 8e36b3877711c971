//! Tool search over a catalog's sets: what `find_tools` finds (the set's
//! index over the tools it has now) and a `find_tools` call run.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Catalog, ToolSet};
use crate::tools::discovery::{DEFAULT_RESULTS, MAX_RESULTS, RESULT_DESCRIPTION_CHARS};
use crate::tools::tool::{Tool, ToolError};

impl Catalog {
    /// The tools of `set` that best match `query` for `caller`, best first.
    pub fn find_tools(
        &self,
        set: &ToolSet,
        query: &str,
        limit: usize,
        caller: Option<&str>,
    ) -> Vec<Arc<Tool>> {
        let tools: Vec<Arc<Tool>> = self.tools_in(set, caller).collect();
        set.index
            .search(tools, query, limit, self.search_model.as_ref())
    }

    /// A `find_tools` call by `caller` in the set `set` (arguments already
    /// validated).
    pub fn run_find_tools(
        &self,
        set: Option<&str>,
        args: &Value,
        caller: Option<&str>,
    ) -> Result<Value, ToolError> {
        let Some(set) = set.and_then(|s| self.set(s)) else {
            return Err(ToolError::Failed(
                "find_tools searches a tool set, and this call names none".into(),
            ));
        };
        // One query, or one per thing the request needs (the schema
        // bounds their number and length).
        let queries: Vec<&str> = match &args["query"] {
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            one => one.as_str().into_iter().collect(),
        };
        let limit = args["limit"]
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(DEFAULT_RESULTS)
            .clamp(1, MAX_RESULTS);
        let found = merged(
            queries
                .iter()
                .map(|q| self.find_tools(set, q, limit, caller))
                .collect(),
        );
        let tools: Vec<Value> = found
            .iter()
            .map(|t| {
                let mut found = json!({
                    "name": t.name,
                    "description": toolgate::truncate_chars(&t.description, RESULT_DESCRIPTION_CHARS),
                });
                // In code mode the model calls it from a program: its
                // signature says how.
                if set.mode == toolgate_config::format::SetMode::Code
                    && let Some(stub) = crate::tools::code::stub(t)
                {
                    found["function"] = json!(stub);
                }
                found
            })
            .collect();
        Ok(if tools.is_empty() {
            json!({"tools": [], "note": "No tool matches. Search again with other words."})
        } else {
            json!({"tools": tools})
        })
    }
}

/// Each query's matches taken in turn (every query's best, then every
/// query's second…), each tool once, at most [`MAX_RESULTS`]: a request
/// that needs several things finds each of them, none crowded out.
fn merged(each: Vec<Vec<Arc<Tool>>>) -> Vec<Arc<Tool>> {
    let mut found: Vec<Arc<Tool>> = Vec::new();
    let deepest = each.iter().map(Vec::len).max().unwrap_or(0);
    for rank in 0..deepest {
        for tool in each.iter().filter_map(|matches| matches.get(rank)) {
            if found.len() < MAX_RESULTS && !found.iter().any(|f| Arc::ptr_eq(f, tool)) {
                found.push(Arc::clone(tool));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(names: &[&str]) -> Vec<Arc<Tool>> {
        names
            .iter()
            .map(|n| {
                Arc::new(crate::tools::tool::test_tool(
                    n,
                    "a tool",
                    json!({"type": "object"}),
                ))
            })
            .collect()
    }

    #[test]
    fn each_querys_best_comes_before_any_seconds() {
        let [a, b, c, d] = [&["a"][..], &["b"], &["c"], &["d"]].map(tools);
        let first = vec![Arc::clone(&a[0]), Arc::clone(&b[0]), Arc::clone(&c[0])];
        let second = vec![Arc::clone(&d[0]), Arc::clone(&a[0])];
        let names: Vec<String> = merged(vec![first, second])
            .iter()
            .map(|t| t.name.clone())
            .collect();
        // a (1st of the first), d (1st of the second), b, then a again
        // (already in), c.
        assert_eq!(names, ["a", "d", "b", "c"]);
        let many: Vec<Vec<Arc<Tool>>> = (0..8)
            .map(|q| {
                tools(
                    &(0..5)
                        .map(|i| format!("t{q}_{i}"))
                        .collect::<Vec<_>>()
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let found = merged(many);
        assert_eq!(found.len(), MAX_RESULTS);
        assert!(found[..8].iter().all(|t| t.name.ends_with("_0")));
    }
}
