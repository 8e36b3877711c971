//! One call run: the tool looked up and its arguments checked, the cache
//! asked, the tool invoked by its kind under its timeout with panics
//! caught, and its answer checked (`output`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use serde_json::Value;
use toolgate::canonical_json;

use crate::catalog::Catalog;
use crate::support::shared;
use crate::tools::tool::context::{CallContext, ToolContext};
use crate::tools::tool::{Output, ProgressSink, ResultCache, Tool, ToolError, ToolKind};

use super::output::{json_len, json_len_upto, panic_message};
use super::{CallError, Executor, ToolCall, ToolResult, sampling_by_model};

impl Executor {
    pub(super) async fn execute(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        progress: Option<&ProgressSink>,
    ) -> ToolResult {
        let started = Instant::now();
        let caller = ctx.subject.as_deref();
        let mut tool = catalog.tool_for(&call.name, ctx.tool_set.as_deref(), caller);
        // A tool only the caller is offered, whose listing is gone (their
        // session closed): listed to them again.
        if tool.is_none() && caller.is_some() && catalog.mcp().has_per_caller() {
            self.list_as_caller(catalog, ctx).await;
            tool = catalog.tool_for(&call.name, ctx.tool_set.as_deref(), caller);
        }
        let Some(tool) = tool else {
            let error = match catalog.unavailable_tool_as(&call.name, caller) {
                Some(u) => {
                    CallError::failed(format!("tool `{}` is unavailable: {}", call.name, u.reason))
                }
                None => CallError::UnknownTool(call.name.clone()),
            };
            return ToolResult::failure(error, started);
        };
        let max_bytes = catalog.settings.limits.max_tool_argument_bytes;
        let size = json_len(&call.arguments);
        if size > max_bytes {
            return ToolResult::failure(
                CallError::invalid_argument(
                    "/",
                    "maxBytes",
                    format!(
                        "the arguments are {size} bytes of JSON, over the limit of {max_bytes} (limits.max_tool_argument_bytes)"
                    ),
                ),
                started,
            );
        }
        let mut arguments = tool.normalize_arguments(&call.arguments);
        if let Err(errors) = tool.validate(&arguments) {
            return ToolResult::failure(ToolError::InvalidArguments(errors), started);
        }
        if let Err(e) = self
            .authorize(catalog, Some(&tool), &call.name, &arguments, ctx)
            .await
        {
            return ToolResult::failure(e, started);
        }
        if let Err(e) = crate::governance::guards::check_arguments(
            &catalog.settings.guards,
            &call.name,
            &mut arguments,
        ) {
            return ToolResult::failure(e, started);
        }
        if let Err(error) = self.spend_tool_call(catalog, ctx).await {
            return ToolResult::failure(error, started);
        }
        let per_caller = || {
            format!(
                "{}\u{0}{}\u{0}{}\u{0}{}",
                ctx.key.as_deref().unwrap_or_default(),
                ctx.subject.as_deref().unwrap_or_default(),
                ctx.project().unwrap_or_default(),
                canonical_json(&arguments)
            )
        };
        let cache_key = tool.cache.as_ref().map(|_| match &tool.kind {
            // A tool reading the context may answer differently per project.
            ToolKind::Native(n) if n.takes_context => format!(
                "{}\u{0}{}",
                ctx.project().unwrap_or_default(),
                canonical_json(&arguments)
            ),
            // A server told who calls may answer each caller differently.
            ToolKind::Mcp(m) if m.varies_by_caller() => per_caller(),
            ToolKind::Http(h) if h.reads_caller || h.credentials.is_some() => per_caller(),
            _ => canonical_json(&arguments),
        });
        // A tool acting as the caller upstream runs (and answers from the
        // cache) only while the caller has credentials there.
        let credentials = match &tool.kind {
            ToolKind::Http(http) => http.credentials.clone(),
            ToolKind::Mcp(mcp) => mcp.credentials(),
            _ => None,
        };
        if let Some(how) = &credentials
            && let Some(connections) = catalog.connections.as_deref()
            && let Err(e) = connections
                .ready(&connections.store(self.shared.as_ref()), how, ctx)
                .await
        {
            return ToolResult::failure(e, started);
        }
        if let (Some(cache), Some(key)) = (&tool.cache, &cache_key)
            && let Some(output) = self.cached(&tool, cache, key).await
        {
            let mut result = self
                .finish_output(&call.name, Ok(output), catalog, started)
                .await;
            result.cached = true;
            return result;
        }

        let timeout = tool
            .timeout
            .unwrap_or(catalog.settings.defaults.tool_timeout);
        let run = AssertUnwindSafe(self.invoke(&tool, arguments, call, ctx, catalog, progress))
            .catch_unwind();
        let mut outcome = match tokio::time::timeout(timeout, run).await {
            Err(_) => Err(CallError::Timeout(timeout)),
            Ok(Err(panic)) => Err(CallError::Panicked(panic_message(&panic))),
            Ok(Ok(outcome)) => outcome,
        };
        if let Ok(output) = &mut outcome
            && output.mcp_result.as_ref().is_some_and(|c| {
                let limit = catalog.settings.limits.max_response_bytes;
                json_len_upto(c, limit) > limit
            })
        {
            output.mcp_result = None;
        }
        if let (Ok(output), Some(cache), Some(key)) = (&outcome, &tool.cache, cache_key) {
            // The model-readable data only: raw MCP results (base64 and all)
            // would make the entry count no bound on the cache's bytes.
            if let Some(redis) = &self.shared {
                let shared_key = cache.shared_key(&tool, &key);
                if redis
                    .cache_put(&shared_key, &output.data, cache.ttl())
                    .await
                    .is_err()
                {
                    shared::fell_back("cache", "local");
                }
            }
            cache.insert(
                key,
                Output {
                    data: output.data.clone(),
                    mcp_result: None,
                },
            );
        }
        self.finish_output(&call.name, outcome, catalog, started)
            .await
    }

    /// A cached result: this replica's, else the shared state's (not copied
    /// here: a copy would live a whole TTL more than the shared entry).
    pub(super) async fn cached(
        &self,
        tool: &Tool,
        cache: &ResultCache,
        key: &str,
    ) -> Option<Output> {
        if let Some(output) = cache.get(key) {
            return Some(output);
        }
        let redis = self.shared.as_ref()?;
        match redis.cache_get(&cache.shared_key(tool, key)).await {
            Ok(Some(data)) => Some(Output {
                data,
                mcp_result: None,
            }),
            Ok(None) => None,
            Err(_) => {
                shared::fell_back("cache", "local");
                None
            }
        }
    }

    pub(super) async fn invoke(
        &self,
        tool: &Arc<Tool>,
        args: Value,
        call: &ToolCall,
        ctx: &CallContext,
        catalog: &Catalog,
        progress: Option<&ProgressSink>,
    ) -> Result<Output, CallError> {
        Ok(match &tool.kind {
            ToolKind::Http(http) => {
                let connections = catalog.connections.as_deref();
                let store = connections.map(|c| c.store(self.shared.as_ref()));
                // Boxed, like the MCP and code calls below: the call's
                // future holds a large state only while that kind runs, and
                // every call's future (moved into the batch) stays small.
                Box::pin(http.call_traced(&self.http, &args, ctx, connections.zip(store.as_ref())))
                    .await
                    .map(Output::from)?
            }
            ToolKind::Native(native) => {
                let ctx = ToolContext::new(ctx, &call.id, &tool.name, catalog.extensions().clone());
                native.call(args, ctx).await.map(Output::from)?
            }
            // Dropped on timeout, which tells the server to cancel the call.
            ToolKind::Mcp(mcp) => {
                let answered = sampling_by_model(catalog, mcp, ctx, self.spend.as_ref());
                let ctx = answered.as_ref().unwrap_or(ctx);
                return Box::pin(self.invoke_mcp(mcp, &args, ctx, catalog, progress)).await;
            }
            ToolKind::Search => catalog
                .run_find_tools(ctx.tool_set.as_deref(), &args, ctx.subject.as_deref())
                .map(Output::from)?,
            ToolKind::Code => Box::pin(self.run_program(catalog, call, ctx, &args))
                .await
                .map(Output::from)?,
        })
    }

    /// An MCP tool's call: over the gateway's session, or as the caller
    /// with their token for a server called as each caller.
    pub(super) async fn invoke_mcp(
        &self,
        mcp: &crate::tools::tool::mcp::McpTool,
        args: &Value,
        ctx: &CallContext,
        catalog: &Catalog,
        progress: Option<&ProgressSink>,
    ) -> Result<Output, CallError> {
        match mcp.credentials() {
            None => Ok(crate::tools::tool::mcp::call(mcp, args, ctx, progress, None).await?),
            Some(how) => {
                let connections = catalog.connections.as_deref().ok_or_else(|| {
                    CallError::failed(
                        "this MCP server is called as each caller, and the gateway has no `connections`",
                    )
                })?;
                let store = connections.store(self.shared.as_ref());
                connections
                    .with_token(&store, &how, ctx, |token| async move {
                        let result =
                            crate::tools::tool::mcp::call(mcp, args, ctx, progress, Some(&token))
                                .await
                                .map_err(CallError::from);
                        // The server refused the token.
                        let refused =
                            matches!(result, Err(CallError::Tool(ToolError::NotConnected(_))));
                        (result, refused)
                    })
                    .await
            }
        }
    }

    /// [`run`](Self::run) as a boxed future: a program's calls run inside
    /// a call, and a future cannot hold itself.
    pub(super) fn run_boxed<'a>(
        &'a self,
        catalog: &'a Catalog,
        call: &'a ToolCall,
        ctx: &'a CallContext,
    ) -> futures::future::BoxFuture<'a, ToolResult> {
        Box::pin(self.run(catalog, call, ctx))
    }

    /// Runs a code-mode program (`run_code`): the set's tools are its
    /// functions, and each call it makes is a call of this executor, made
    /// in the set (`Catalog::callable`) with the request's context, so it
    /// passes every check a direct call passes and is audited as itself.
    pub(super) async fn run_program(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        args: &Value,
    ) -> Result<Value, ToolError> {
        use crate::catalog::CallScope;
        let Some(set) = ctx.tool_set.as_deref().and_then(|s| catalog.set(s)) else {
            return Err(ToolError::Failed(
                "run_code runs over a tool set, and this call names none".into(),
            ));
        };
        let code = args["code"].as_str().unwrap_or_default();
        // Function name -> tool name, for the tools a program may call.
        let functions: std::collections::HashMap<String, String> = catalog
            .tools_in(set, ctx.subject.as_deref())
            .filter_map(|t| crate::tools::code::function_name(&t.name).map(|f| (f, t.name.clone())))
            .collect();
        let names: Vec<String> = functions.keys().cloned().collect();
        let worker = toolgate_code::Worker::current()
            .map_err(ToolError::Failed)?
            .as_user(catalog.code_user());
        let mut made = 0u32;
        let outcome = worker
            .run(code, &names, &crate::tools::code::limits(), |asked| {
                made += 1;
                let inner_id = format!("{}.{made}", call.id);
                let functions = &functions;
                async move {
                    let Some(name) = functions.get(&asked.name) else {
                        return Err(format!("`{}` is not a tool of this set", asked.name));
                    };
                    let tool = catalog
                        .callable(CallScope::Set(set), name, ctx.subject.as_deref())
                        .map_err(|e| e.to_string())?;
                    let arguments = crate::tools::code::arguments(&tool, asked.args, asked.kwargs)?;
                    let inner = ToolCall {
                        id: inner_id,
                        name: name.clone(),
                        arguments,
                    };
                    let result = self.run_boxed(catalog, &inner, ctx).await;
                    match (result.data, result.error) {
                        (_, Some(e)) => Err(format!("{name}: {e}")),
                        (Some(data), None) => Ok(data),
                        (None, None) => Ok(Value::Null),
                    }
                }
            })
            .await;
        crate::tools::code::answer(outcome)
    }
}
