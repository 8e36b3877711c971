//! A turn's calls run: the model's turn and the tools' results added to
//! the conversation, `spawn` run as sub-agents, the search of the client's
//! deferred tools run by the loop itself, and what a search found offered
//! from then on.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{Mode, Run, Said};
use crate::chat::events::CallRecord;
use crate::chat::plan::Loop;
use crate::chat::subagent;
use crate::conversation::{Call, CallResult, Item, Role, ToolDef, Turn};
use crate::executor::CallError;
use crate::executor::{CallProgress, ToolCall, ToolResult};
use crate::model::formatter;
use crate::tools::discovery::{
    self, DEFAULT_RESULTS, FIND_TOOLS, Indexed, MAX_QUERY_CHARS, MAX_RESULTS,
    RESULT_DESCRIPTION_CHARS, found_names,
};
use crate::tools::tool::ToolError;

impl Run {
    /// Runs a turn's calls: appends the model's turn and one turn of the
    /// tools' results to the conversation, and records each call in the
    /// report.
    pub(super) async fn run_calls(
        &mut self,
        said: &Said,
        calls: &[Call],
        iteration: u32,
        progress: Option<&tokio::sync::mpsc::Sender<CallProgress>>,
    ) {
        let turn = self.model_turn(said, calls);
        self.turns.push(turn);
        let mut said_results = Vec::with_capacity(calls.len());
        // Arguments that are not JSON are an error result, like any other.
        let mut parsed: Vec<Result<ToolCall, ToolResult>> = Vec::with_capacity(calls.len());
        for c in calls {
            let args = if c.arguments.trim().is_empty() {
                Ok(json!({}))
            } else {
                serde_json::from_str::<Value>(&c.arguments)
            };
            if let Some(why) = &c.unreadable {
                parsed.push(Err(ToolResult::failure(
                    CallError::invalid_argument(
                        "/",
                        "markup",
                        format!("the call could not be read: {why}"),
                    ),
                    Instant::now(),
                )));
                continue;
            }
            // A client's call in a turn with one that could not be read:
            // not made, so that the turn is written again whole.
            if !self.l.gateway_tools.contains(&c.name)
                && !self.is_deferred_search(&c.name)
                && calls.iter().any(|o| o.unreadable.is_some())
            {
                parsed.push(Err(ToolResult::failure(
                    CallError::failed(
                        "not made: another call of this turn could not be read; make both again",
                    ),
                    Instant::now(),
                )));
                continue;
            }
            parsed.push(match args {
                Ok(arguments)
                    if self.l.gateway_tools.contains(&c.name)
                        || self.is_deferred_search(&c.name) =>
                {
                    Ok(ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments,
                    })
                }
                Ok(_) => Err(ToolResult::failure(
                    CallError::UnknownTool(c.name.clone()),
                    Instant::now(),
                )),
                Err(e) => Err(ToolResult::failure(
                    CallError::invalid_argument(
                        "/",
                        "json",
                        format!("the arguments are not valid JSON: {e}"),
                    ),
                    Instant::now(),
                )),
            });
        }
        // `spawn` (sub-agents) needs the model, so the loop runs it itself,
        // next to the executor's batch.
        // A search of the client's deferred tools is the loop's own too.
        let (searches, batch): (Vec<ToolCall>, Vec<ToolCall>) = parsed
            .iter()
            .filter_map(|p| p.as_ref().ok().cloned())
            .partition(|c| self.is_deferred_search(&c.name));
        let (spawns, batch): (Vec<ToolCall>, Vec<ToolCall>) =
            batch.into_iter().partition(|c| c.name == subagent::SPAWN);
        let mut search_results = Vec::with_capacity(searches.len());
        for call in &searches {
            let result = self.search_deferred(call).await;
            self.l
                .executor
                .record(&self.l.catalog, call, &self.l.context, &result)
                .await;
            search_results.push(result);
        }
        let mut search_results = search_results.into_iter();
        let (batch_results, spawn_results) = futures::join!(
            self.l
                .executor
                .run_batch_reporting(&self.l.catalog, &batch, &self.l.context, progress),
            self.run_spawns(&spawns),
        );
        let mut results = batch_results.into_iter();
        let mut spawn_results = spawn_results.into_iter();
        for (call, p) in calls.iter().zip(parsed) {
            let result = match p {
                Ok(c) => if self.is_deferred_search(&c.name) {
                    search_results.next()
                } else if c.name == subagent::SPAWN {
                    spawn_results.next()
                } else {
                    results.next()
                }
                .unwrap_or_else(|| {
                    ToolResult::failure(CallError::failed("the call did not run"), Instant::now())
                }),
                // Refused before the executor (not in the set, arguments not
                // JSON): counted and audited like any call.
                Err(r) => {
                    let refused = ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
                    };
                    self.l
                        .executor
                        .record(&self.l.catalog, &refused, &self.l.context, &r)
                        .await;
                    r
                }
            };
            tracing::info!(
                tool = %call.name,
                success = result.success,
                ms = result.duration_ms,
                iteration,
                formatter = self.mode.label(),
                "tool call"
            );
            if result.success {
                self.note_found(call, &result);
                self.note_loaded(call, &result);
            }
            self.calls.push(CallRecord::new(call, &result, iteration));
            said_results.push(Item::Result(CallResult {
                name: Some(call.name.clone()),
                ..CallResult::text(call.id.clone(), result.to_model_text())
            }));
        }
        self.turns.push(Turn::new(Role::User, said_results));
        if (self.l.search.is_some() || self.l.deferred.is_some())
            && let Mode::Structured { template, .. } = &self.mode
        {
            let template = Arc::clone(template);
            let offered = formatter::offered(&self.l.offered_tools(&self.found, &self.loaded));
            self.mode = Mode::Structured { template, offered };
        }
    }

    fn is_deferred_search(&self, name: &str) -> bool {
        self.l.deferred.as_ref().is_some_and(|d| d.search == name)
    }

    /// A search of the client's deferred tools: the best matches' names
    /// and descriptions (they are offered from the next model call on).
    async fn search_deferred(&self, call: &ToolCall) -> ToolResult {
        let started = Instant::now();
        let Some(deferred) = &self.l.deferred else {
            return ToolResult::failure(CallError::UnknownTool(call.name.clone()), started);
        };
        let query = match call.arguments["query"].as_str() {
            Some(q) if !q.trim().is_empty() && q.chars().count() <= MAX_QUERY_CHARS => q,
            _ => {
                return ToolResult::failure(
                    CallError::invalid_argument(
                        "/query",
                        "required",
                        format!(
                            "`query` is required: what you want to do, in at most {MAX_QUERY_CHARS} characters"
                        ),
                    ),
                    started,
                );
            }
        };
        let limit = call.arguments["limit"]
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(DEFAULT_RESULTS)
            .clamp(1, MAX_RESULTS);
        let indexed: Vec<Indexed<'_>> = deferred
            .tools
            .iter()
            .map(|t| Indexed {
                name: &t.name,
                description: t.description.as_deref().unwrap_or_default(),
                category: None,
                parameters: &t.parameters,
            })
            .collect();
        let tools: Vec<Value> = discovery::rank(
            &indexed,
            query,
            limit,
            self.l.catalog.search_model.as_ref(),
        )
        .into_iter()
        .filter_map(|i| indexed.get(i))
        .map(|t| {
            json!({
                "name": t.name,
                "description": toolgate::truncate_chars(t.description, RESULT_DESCRIPTION_CHARS),
            })
        })
        .collect();
        let data = if tools.is_empty() {
            json!({"tools": [], "note": "No tool matches. Search again with other words."})
        } else {
            json!({"tools": tools})
        };
        self.l
            .executor
            .finish(&call.name, Ok(data), &self.l.catalog, started)
            .await
    }

    /// After a search of the client's deferred tools: what it found is
    /// offered from then on.
    fn note_loaded(&mut self, call: &Call, result: &ToolResult) {
        let Some(deferred) = &self.l.deferred else {
            return;
        };
        if call.name != deferred.search {
            return;
        }
        let Some(data) = &result.data else { return };
        for name in found_names(data) {
            if self.loaded.iter().any(|t| t.name == name) {
                continue;
            }
            if let Some(tool) = deferred.tools.iter().find(|t| t.name == name) {
                let mut tool = tool.clone();
                tool.json.share();
                self.loaded.push(Arc::new(tool));
            }
        }
    }

    /// With a search, a successful call adds tools to those offered: the
    /// tools `find_tools` found, or the tool called (so its schema is in
    /// the prompt from then on). The oldest leave beyond the cap.
    fn note_found(&mut self, call: &Call, result: &ToolResult) {
        let Some(search) = &self.l.search else {
            return;
        };
        let max = search.max_tools_in_prompt;
        // The best match last, so it is the last to leave.
        let names: Vec<String> = if call.name == FIND_TOOLS {
            let mut names: Vec<String> = result
                .data
                .as_ref()
                .map(|d| found_names(d).map(str::to_owned).collect())
                .unwrap_or_default();
            names.reverse();
            names
        } else {
            vec![call.name.clone()]
        };
        for name in names {
            if !self.l.gateway_tools.contains(&name) {
                continue;
            }
            let Some(tool) = self
                .l
                .catalog
                .tool_as(&name, self.l.context.subject.as_deref())
            else {
                continue;
            };
            self.found.retain(|t| t.name != name);
            self.found.push(tool);
        }
        let over = self.found.len().saturating_sub(max);
        self.found.drain(..over);
    }

    /// One `spawn` call: validated, authorized (policies, approvals) and
    /// counted like any call, then its tasks run as sub-agents.
    async fn run_spawn(&self, call: &ToolCall) -> Result<Value, CallError> {
        let tool = self
            .l
            .catalog
            .tool(subagent::SPAWN)
            .ok_or_else(|| CallError::UnknownTool(call.name.clone()))?;
        tool.validate(&call.arguments)
            .map_err(|e| CallError::Tool(ToolError::InvalidArguments(e)))?;
        let executor = &self.l.executor;
        executor
            .authorize(
                &self.l.catalog,
                Some(&tool),
                &call.name,
                &call.arguments,
                &self.l.context,
            )
            .await?;
        // A `spawn` is a tool call like any other: it spends one of the
        // key's tool calls per minute.
        executor
            .spend_tool_call(&self.l.catalog, &self.l.context)
            .await?;
        let tasks: Vec<String> = call.arguments["tasks"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Ok(subagent::run(&self.l, tasks, |child: Loop| Box::new(child).run()).await?)
    }

    /// Runs `spawn` calls: validated like any call, then each call's tasks
    /// as sub-agents.
    async fn run_spawns(&self, calls: &[ToolCall]) -> Vec<ToolResult> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            let started = std::time::Instant::now();
            let outcome = self.run_spawn(call).await;
            let result = self
                .l
                .executor
                .finish(&call.name, outcome, &self.l.catalog, started)
                .await;
            self.l
                .executor
                .record(&self.l.catalog, call, &self.l.context, &result)
                .await;
            out.push(result);
        }
        out
    }
}

/// The search of a client's deferred tools, as the model is offered it.
pub(super) fn deferred_search_tool(name: &str) -> ToolDef {
    ToolDef {
        json: Default::default(),
        name: name.to_owned(),
        description: Some(
            "Search the tools that are not loaded yet and make the best matches callable. \
            Say in plain words what you want to do (\"create an issue in a repository\"); you get \
            the matching tools' names and descriptions, and can call them from then on. Search \
            again with other words when none fits."
                .into(),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What you want to do, in a few words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                          "description": format!("How many tools to return (default {DEFAULT_RESULTS}).")}
            },
            "required": ["query"]
        }).into(),
        strict: None,
        native: None,
    }
}
