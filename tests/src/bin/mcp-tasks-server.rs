//! An MCP server (stdio) with the Tasks extension (SEP-2663), written with
//! `rmcp` and its task manager: the tools the official conformance suite's
//! `tasks-*` scenarios call, which the gateway carries to its own clients.
//!
//! - `greet`: answers at once (`Hello, {name}!`), never a task.
//! - `slow_compute`: a task for a client that declared the extension,
//!   sleeping `seconds` (cancellable); run in the call for one that did not.
//! - `failing_job`: a task only (a client without the extension gets
//!   `-32021`); ends after about a second as a tool error.
//! - `protocol_error_job`: a task that fails with a JSON-RPC error.
//! - `confirm_delete`: a task that asks its client to confirm, then ends.
//! - `multi_input`: a task that asks two things at once.
//! - `test_tool_with_task`: asks the client's name in its answer
//!   (`input_required`), then runs a task that greets it; a task only.
//!
//!     mcp-tasks-server      # MCP over stdin/stdout

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ContentBlock, CreateTaskResult, ElicitRequest, ElicitRequestParams, GetTaskParams,
    GetTaskResult, Implementation, InputRequest, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Tasks {
    tasks: TaskManager,
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("a schema is an object")
    };
    Tool::new(name, description, schema)
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn elicitation(message: &str, schema: Value) -> Result<InputRequest, McpError> {
    let params: ElicitRequestParams = serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(InputRequest::Elicitation(ElicitRequest::new(params)))
}

fn missing_tasks() -> McpError {
    McpError::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

/// Waits `seconds`, or until the task is cancelled.
async fn compute(
    ctx: Option<TaskContext>,
    seconds: f64,
    label: String,
) -> Result<CallToolResult, TaskExit> {
    let sleep = tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 600.0)));
    match ctx {
        Some(ctx) => tokio::select! {
            () = ctx.cancelled() => Err(TaskExit::Cancelled),
            () = sleep => Ok(text(format!("computed {label} in {seconds} s"))),
        },
        None => {
            sleep.await;
            Ok(text(format!("computed {label} in {seconds} s")))
        }
    }
}

impl Tasks {
    fn spawn<F>(&self, run: F) -> CallToolResponse
    where
        F: FnOnce(TaskContext) -> rmcp::task_manager::TaskFuture,
    {
        let task = self.tasks.spawn(
            TaskOptions::new()
                .with_ttl_ms(600_000)
                .with_poll_interval_ms(100),
            run,
        );
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}

impl ServerHandler for Tasks {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate-tasks-server", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let none = json!({"type": "object", "properties": {}});
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "greet",
                "Greets someone at once.",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
            tool(
                "slow_compute",
                "Waits `seconds` (a task for a client that follows tasks).",
                json!({"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}, "required": ["seconds"]}),
            ),
            tool(
                "failing_job",
                "A task that ends as a tool error.",
                none.clone(),
            ),
            tool(
                "protocol_error_job",
                "A task that fails with a protocol error.",
                none.clone(),
            ),
            tool(
                "confirm_delete",
                "A task that asks its client to confirm.",
                json!({"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]}),
            ),
            tool(
                "multi_input",
                "A task that asks two things at once.",
                none.clone(),
            ),
            tool(
                "test_tool_with_task",
                "Asks a name, then greets it in a task.",
                none,
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let args = request.arguments.clone().unwrap_or_default();
        let string = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match request.name.as_ref() {
            "greet" => Ok(text(format!("Hello, {}!", string("name"))).into()),
            "slow_compute" => {
                let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
                let label = string("label");
                if !tasks {
                    return compute(None, seconds, label)
                        .await
                        .map(Into::into)
                        .map_err(|_| McpError::internal_error("cancelled", None));
                }
                Ok(self.spawn(move |ctx| Box::pin(compute(Some(ctx), seconds, label))))
            }
            _ if !tasks => Err(missing_tasks()),
            "failing_job" => Ok(self.spawn(|_| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(CallToolResult::error(vec![ContentBlock::text(
                        "the job failed",
                    )]))
                })
            })),
            "protocol_error_job" => Ok(self.spawn(|_| {
                Box::pin(async {
                    Err(TaskExit::Error(McpError::internal_error(
                        "the job crashed",
                        None,
                    )))
                })
            })),
            "confirm_delete" => {
                let filename = string("filename");
                let ask = elicitation(
                    &format!("Delete {filename}?"),
                    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
                )?;
                Ok(self.spawn(move |ctx| {
                    Box::pin(async move {
                        let answer = ctx.request_input("confirm", ask).await?;
                        let confirmed =
                            answer.pointer("/content/confirm") == Some(&Value::Bool(true));
                        Ok(text(if confirmed {
                            format!("deleted {filename}")
                        } else {
                            format!("kept {filename}")
                        }))
                    })
                }))
            }
            "multi_input" => {
                let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
                let (first, second) = (
                    elicitation("First?", schema.clone())?,
                    elicitation("Second?", schema)?,
                );
                Ok(self.spawn(move |ctx| {
                    Box::pin(async move {
                        let (a, b) = tokio::join!(
                            ctx.request_input("first", first),
                            ctx.request_input("second", second)
                        );
                        let (a, b) = (a?, b?);
                        Ok(text(format!(
                            "got {} and {}",
                            a.pointer("/content/name").unwrap_or(&Value::Null),
                            b.pointer("/content/name").unwrap_or(&Value::Null)
                        )))
                    })
                }))
            }
            "test_tool_with_task" => {
                let name = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_name"))
                    .and_then(|a| a.pointer("/content/name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let Some(name) = name else {
                    let ask = elicitation(
                        "What is your name?",
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                    )?;
                    return Ok(CallToolResponse::InputRequired(
                        InputRequiredResult::from_input_requests(
                            [("user_name".to_owned(), ask)].into(),
                        ),
                    ));
                };
                Ok(self.spawn(move |_| {
                    Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok(text(format!("Hello, {name}, from a task")))
                    })
                }))
            }
            other => Err(McpError::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let running = Tasks::default().serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
