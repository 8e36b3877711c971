//! Sub-agents: the chat loop's implementation of the `spawn` builtin. Each
//! task becomes its own [`Loop`] against the same route, with the same tool
//! set minus `spawn` (so a sub-agent cannot spawn), a bounded number of
//! iterations, and a bounded number running at once. Each sub-agent counts
//! as a request of the caller's key (its requests per minute) and as a tool
//! loop (the gateway's and the key's concurrent-loop caps): spawning cannot
//! multiply what a key may do. The result lists each task's answer or
//! error, in the order of the tasks.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};

use super::FinishReason;
use super::plan::Loop;
use super::{Answer, ChatError};
use crate::conversation::{Item, Role, ToolDef, Turn};
use crate::tools::tool::ToolError;

/// The name of the builtin the loop runs itself.
pub const SPAWN: &str = "spawn";

const SYSTEM: &str = "You are a sub-agent working on one task for another assistant. \
Use the tools you have when they help, then answer with the result of the task \
only: the other assistant reads your answer, not the user.";

/// Runs the tasks of one `spawn` call made inside `parent`, each child loop
/// by `run_child` (the loop's own `run`, handed in: the loop runs
/// sub-agents, which run loops).
pub async fn run<F, Fut>(
    parent: &Loop,
    tasks: Vec<String>,
    run_child: F,
) -> Result<Value, ToolError>
where
    F: Fn(Loop) -> Fut,
    Fut: std::future::Future<Output = Result<Answer, ChatError>>,
{
    let settings = &parent.catalog.settings.builtins.spawn;
    if tasks.len() > settings.max_tasks {
        return Err(ToolError::Refused(format!(
            "{} tasks were given; at most {} may run in one call (builtins.spawn.max_tasks)",
            tasks.len(),
            settings.max_tasks
        )));
    }
    let concurrency = settings.concurrency.max(1);
    let mut answers: Vec<Option<Value>> = vec![None; tasks.len()];
    let mut pending = tasks.iter().enumerate();
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < concurrency {
            let Some((i, task)) = pending.next() else {
                break;
            };
            match take_place(parent).await {
                Ok(permit) => {
                    let child = run_child(child_loop(parent, task));
                    running.push(async move {
                        let outcome = child.await;
                        drop(permit);
                        (i, outcome.map_err(|e| e.to_string()))
                    });
                }
                Err(why) => {
                    answers[i] = Some(json!({"task": task, "success": false, "error": why}))
                }
            }
        }
        let Some((i, outcome)) = running.next().await else {
            break;
        };
        let task = &tasks[i];
        answers[i] = Some(match outcome {
            Ok(answer) => json!({
                "task": task,
                "success": !matches!(
                    answer.summary.finish,
                    FinishReason::MaxToolIterations | FinishReason::BudgetExceeded
                ),
                "cost_usd": answer.summary.report.cost.usd,
                "answer": answer.content,
                "finish_reason": answer.summary.finish.as_str(),
                "tool_calls": answer.summary.report.tool_calls.len(),
            }),
            Err(e) => json!({"task": task, "success": false, "error": e}),
        });
    }
    Ok(Value::Array(answers.into_iter().flatten().collect()))
}

/// A sub-agent's place: one request of the key's per-minute budget, and a
/// place under the loop caps (held while it runs).
async fn take_place(parent: &Loop) -> Result<crate::governance::limits::Permit, String> {
    if let Some(key) = &parent.key
        && let Some(per_minute) = key.requests_per_minute
        && let Err(refused) = parent
            .guards
            .rates
            .check(
                &key.name,
                crate::governance::limits::Rate::Requests,
                per_minute,
            )
            .await
    {
        return Err(match refused {
            crate::governance::limits::Refused::Limited(_) => format!(
                "not started: API key `{}` may make {per_minute} requests per minute, and each sub-agent is one",
                key.name
            ),
            crate::governance::limits::Refused::Unavailable => {
                "not started: the rate limit cannot be checked (the shared state is unavailable)"
                    .to_owned()
            }
        });
    }
    parent
        .guards
        .enter_loop(&parent.catalog.settings.limits, parent.key.as_deref())
        .map_err(|full| format!("not started: {}", full.message))
}

/// The loop of one sub-agent.
fn child_loop(parent: &Loop, task: &str) -> Loop {
    let turns = vec![
        Turn::new(Role::System, vec![Item::text(SYSTEM)]),
        Turn::new(Role::User, vec![Item::text(task)]),
    ];
    let tools: Vec<Arc<ToolDef>> = parent
        .tools
        .specs()
        .iter()
        .filter(|t| t.name != SPAWN && parent.gateway_tools.contains(&t.name))
        .cloned()
        .collect();
    let gateway_tools = parent.gateway_tools.without(SPAWN);
    Loop {
        catalog: Arc::clone(&parent.catalog),
        executor: parent.executor.clone(),
        resolved: parent.resolved.clone(),
        request: parent.request.derived(turns),
        tool_set: parent.tool_set.clone(),
        tools: crate::model::protocol::OfferedTools::new(tools, &[]),
        gateway_tools,
        search: parent.search.clone(),
        deferred: None,
        max_iterations: parent.catalog.settings.builtins.spawn.max_iterations,
        learned: Arc::clone(&parent.learned),
        router: Arc::clone(&parent.router),
        context: parent.context.clone(),
        guards: Arc::clone(&parent.guards),
        key: parent.key.clone(),
        spend: Arc::clone(&parent.spend),
    }
}
