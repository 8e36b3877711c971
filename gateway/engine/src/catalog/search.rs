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
        let query = args["query"].as_str().unwrap_or_default();
        let limit = args["limit"]
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(DEFAULT_RESULTS)
            .clamp(1, MAX_RESULTS);
        let found = self.find_tools(set, query, limit, caller);
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
