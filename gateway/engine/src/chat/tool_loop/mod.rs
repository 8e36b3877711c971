//! The server-side tool loop: call the model, run the gateway tools it asks
//! for, feed the results back, repeat until it answers (or the iteration
//! budget is spent), then answer, streaming or not. The loop knows no wire format
//! of the client's: it returns an [`Answer`] or yields [`Event`]s.
//!
//! Policies:
//! - Tool calls in one turn run as one executor batch (validated, in
//!   parallel, de-duplicated); failures become tool messages the model reads.
//! - `tool_choice` forcing a call (`required` or a named function) applies to
//!   the first model call only; later calls use `auto`, or the loop could
//!   never end.
//! - When a turn calls a client tool, the loop stops and the client gets the
//!   client tools' calls as a normal `tool_calls` answer. Gateway tool calls
//!   of that same turn are not run and not shown: the model sees the client's
//!   results on the next request and asks again for what it still needs.
//! - When the budget is spent and the model still asks for gateway tools,
//!   those calls are not run: the model gets one last call without the
//!   gateway's tools (client tools stay offered) to answer from what it has,
//!   and whatever it says then is the answer (a short text saying the budget
//!   ran out if it says nothing), finishing `MaxToolIterations`. Clients
//!   then see an answer, not an empty message they would ask again about.
//! - The formatter (see [`crate::model::formatter`]) decides how tools reach the
//!   model and how calls come back; the loop itself works on the typed
//!   conversation ([`crate::conversation`]) whatever the formatter, and the
//!   route's model protocol ([`crate::model::protocol`]) writes it for the model
//!   and reads the answers, whole and streamed alike.

mod calls;
mod stream;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use futures::Stream;

use super::events::{
    Answer, CallRecord, ChatError, Cost, Event, FinishReason, Report, Started, Summary,
};
use super::plan::Loop;
use crate::conversation::{
    Call, Item, Notices, Origin, Reasoning, Role, Slot, ToolChoice, ToolDef, Turn, Usage,
};
use crate::governance::spend::budgets::Exceeded;
use crate::governance::spend::prices::{NanoUsd, Price};
use crate::governance::spend::{Admission, ModelSpend, SpendError, Who};
use crate::model::formatter::{self, PromptTemplate};
use crate::model::protocol::{self, Assembly, Outgoing, Tools};
use crate::model::routing::{self, Attempt};
use crate::model::upstream::{ModelCall, Reply, UpstreamError};
use crate::tools::discovery::MAX_QUERY_CHARS;
use crate::tools::tool::Tool;
use calls::deferred_search_tool;
use toolgate_config::format::FormatterKind;
use toolgate_toolcall::{OfferedTool, ParseOptions};
use tracing::Instrument;

/// How text is parsed for structured-prompt models. A `</think>` without an
/// opener is content: treating it as the end of reasoning would hold back
/// every streamed word until the answer ends.
const PARSE: ParseOptions = ParseOptions {
    orphan_think_close: false,
};

/// Progress reports waiting to be streamed; beyond, they are dropped.
const PROGRESS_BACKLOG: usize = 64;

/// The formatter in force for one loop.
#[derive(Debug, Clone)]
enum Mode {
    /// Native function calling; `fallback` when `auto` may still switch.
    FunctionCalling { fallback: bool },
    Structured {
        template: Arc<PromptTemplate>,
        offered: Vec<OfferedTool>,
    },
}

impl Mode {
    fn label(&self) -> &'static str {
        match self {
            Mode::FunctionCalling { .. } => "function_calling",
            Mode::Structured { .. } => "structured_prompt",
        }
    }
}

/// What to do after a turn.
enum Next {
    /// The model answered: return this turn.
    Answer,
    /// The model called client tools: return only those calls.
    ClientCalls(Vec<Call>),
    /// The budget is spent and the model still wants gateway tools: one
    /// last call without them.
    LastCall,
    /// Run these gateway calls and go on.
    Run(Vec<Call>),
}

/// What one model turn said, read by the formatter in force.
#[derive(Debug, Default)]
struct Said {
    content: Option<String>,
    reasoning: Option<String>,
    /// The reasoning as the model gave it (with its opaque state).
    reasoning_items: Vec<Reasoning>,
    calls: Vec<Call>,
    finish: Option<FinishReason>,
    /// The turn as the model's protocol replays it.
    replay: Option<Box<serde_json::value::RawValue>>,
    /// What the answer held that the engine has no type for.
    natives: Vec<crate::conversation::Native>,
}

/// A loop in progress.
struct Run {
    l: Loop,
    mode: Mode,
    /// The conversation: the client's turns, then the loop's.
    turns: Vec<Turn>,
    iterations: u32,
    calls: Vec<CallRecord>,
    usage: Usage,
    /// What the model protocol could not carry of the request.
    notices: Notices,
    /// The budget is spent: this call offers no gateway tools, and its
    /// answer ends the loop.
    last_call: bool,
    /// With a search: the tools found (or called), the most recent last.
    found: Vec<Arc<Tool>>,
    /// With deferred client tools: those a search of them found, in the
    /// order found (offered from then on).
    loaded: Vec<Arc<ToolDef>>,
    /// The span of the latest model call (its token usage is recorded on
    /// it once read).
    model_span: tracing::Span,
    /// On a route of several targets: the one the conversation's opaque
    /// state belongs to (the latest that answered, once one has).
    affinity: Option<String>,
    /// On a route of several targets: every target tried, in order.
    attempts: Vec<Attempt>,
    /// Whose budgets the model calls count against (boxed: the run lives
    /// as long as its stream).
    who: Box<Who>,
    /// The next model call's admission by the caller's budgets (boxed, as
    /// the rarer fields are: the run lives as long as its stream).
    admission: Option<Box<Admission>>,
    /// The latest model call's counts (without its native object), until
    /// its spend is counted.
    last_usage: Usage,
    /// What the model calls cost so far, in nano-dollars, and how many
    /// had no known price.
    cost: (NanoUsd, u32),
    /// Budgets of the caller past their warning share.
    budget_warnings: Vec<String>,
    /// A budget the calls spent: the loop runs no more tools.
    budget_spent: Option<Box<Exceeded>>,
    /// When the latest model call began.
    call_began: std::time::Instant,
}

impl Loop {
    async fn start(mut self) -> Result<Run, ChatError> {
        let kind = self
            .learned
            .effective(
                self.resolved.formatter,
                &self.resolved.upstream.name,
                &self.resolved.model,
            )
            .await;
        let turns = self.request.take_turns();
        let affinity = self.router.affinity(&self.resolved, &turns).await;
        let found = self.preloaded(&turns);
        let mode = match kind {
            FormatterKind::FunctionCalling => Mode::FunctionCalling { fallback: false },
            // Only a server of OpenAI's chat completions may lack function
            // calling: another protocol's refusal is about something else.
            FormatterKind::Auto => Mode::FunctionCalling {
                fallback: self.resolved.upstream.protocol
                    == crate::conversation::Protocol::OpenaiChat,
            },
            FormatterKind::StructuredPrompt => self.structured(&self.offered_tools(&found, &[]))?,
        };
        tracing::debug!(formatter = mode.label(), model = %self.request.model, "tool loop");
        Ok(Run {
            turns,
            iterations: 0,
            calls: Vec::new(),
            usage: Usage::default(),
            notices: Notices::default(),
            last_call: false,
            found,
            loaded: Vec::new(),
            model_span: tracing::Span::none(),
            affinity,
            attempts: Vec::new(),
            who: Box::new(Who::of(&self.context)),
            admission: None,
            last_usage: Usage::default(),
            cost: (0, 0),
            budget_warnings: Vec::new(),
            budget_spent: None,
            call_began: std::time::Instant::now(),
            mode,
            l: self,
        })
    }

    /// With a set's `preload`: its best matches for the user's latest
    /// words, offered from the first model call on (the best last, so it
    /// is the last to leave), as if `find_tools` had found them.
    fn preloaded(&self, turns: &[Turn]) -> Vec<Arc<Tool>> {
        let Some(search) = self.search.as_ref().filter(|s| s.preload > 0) else {
            return Vec::new();
        };
        let Some(set) = self.tool_set.as_deref().and_then(|s| self.catalog.set(s)) else {
            return Vec::new();
        };
        let Some(text) = turns
            .iter()
            .rev()
            .find(|t| {
                t.role == Role::User
                    && t.items
                        .iter()
                        .any(|i| matches!(i, Item::Text { .. } | Item::Media { .. }))
            })
            .map(Turn::text)
            .filter(|t| !t.trim().is_empty())
        else {
            return Vec::new();
        };
        let query: String = text.chars().take(MAX_QUERY_CHARS).collect();
        let mut found =
            self.catalog
                .find_tools(set, &query, search.preload, self.context.subject.as_deref());
        found.retain(|t| self.gateway_tools.contains(&t.name));
        found.reverse();
        found
    }

    fn structured(&self, tools: &[Arc<ToolDef>]) -> Result<Mode, ChatError> {
        let template = match &self.resolved.template {
            Some(t) => Arc::clone(t),
            None => PromptTemplate::default_template().map_err(ChatError::Internal)?,
        };
        Ok(Mode::Structured {
            template,
            offered: formatter::offered(tools),
        })
    }

    /// The tools a model call offers: with a search, `find_tools` and the
    /// tools `found` before the client's; with deferred client tools, their
    /// search and the ones `loaded` after the client's. Borrowed when they
    /// are the planned tools.
    fn offered_tools(
        &self,
        found: &[Arc<Tool>],
        loaded: &[Arc<ToolDef>],
    ) -> Cow<'_, [Arc<ToolDef>]> {
        if self.search.is_none() && self.deferred.is_none() {
            return Cow::Borrowed(self.tools.specs());
        }
        let mut tools: Vec<Arc<ToolDef>> = Vec::new();
        if let Some(search) = &self.search {
            tools.push(search.tool.spec());
            tools.extend(found.iter().map(|t| t.spec()));
        }
        tools.extend(self.tools.specs().iter().cloned());
        if let Some(deferred) = &self.deferred {
            tools.push(Arc::new(deferred_search_tool(&deferred.search)));
            tools.extend(loaded.iter().cloned());
        }
        Cow::Owned(tools)
    }

    /// The client's tools a last call offers: its own and those it loaded.
    fn client_tools(&self, loaded: &[Arc<ToolDef>]) -> Cow<'_, [Arc<ToolDef>]> {
        if loaded.is_empty() {
            return Cow::Borrowed(self.tools.client());
        }
        Cow::Owned(self.tools.client().iter().chain(loaded).cloned().collect())
    }

    /// Runs the loop to its answer. (Boxed: a loop may run sub-agents,
    /// which are loops. Taken boxed, as a plan gives it: the box is freed
    /// as the loop moves into its run, not kept by the caller.)
    pub fn run(self: Box<Self>) -> futures::future::BoxFuture<'static, Result<Answer, ChatError>> {
        Box::pin((*self).run_to_end())
    }

    async fn run_to_end(self) -> Result<Answer, ChatError> {
        let mut run = self.start().await?;
        let mut iteration = 0;
        loop {
            iteration += 1;
            run.iterations = iteration;
            let reply = run.call(iteration, false).await?;
            // The target that answered (on a route of several, any).
            let protocol = run.l.resolved.upstream.protocol;
            let body = run
                .l
                .resolved
                .upstream
                .read_body(reply, run.limits().max_upstream_response_bytes)
                .await?;
            let decoded = protocol::decode(protocol, &body.into()).map_err(|e| run.invalid(e))?;
            let mut assembly = Assembly::default();
            for delta in decoded.deltas {
                assembly
                    .push(delta, run.limits().max_tool_calls_per_turn)
                    .map_err(|e| run.invalid(e))?;
            }
            let mut said = run.said(assembly);
            run.count_spend(!said.calls.is_empty()).await;
            run.remember(&said).await;
            run.check_call_count(said.calls.len())?;
            let (next, finish) = run.decide(&said, iteration);
            let client_calls = match next {
                Next::Run(calls) => {
                    run.run_calls(&said, &calls, iteration, None).await;
                    continue;
                }
                Next::LastCall => {
                    run.last_call = true;
                    continue;
                }
                Next::ClientCalls(calls) => calls,
                Next::Answer => Vec::new(),
            };
            if client_calls.is_empty()
                && let Some(text) = run.budget_text(&said)
            {
                said.content = Some(text);
            }
            let notices = std::mem::take(&mut run.notices);
            return Ok(Answer {
                envelope: Some(decoded.envelope),
                content: said.content,
                reasoning: said.reasoning,
                reasoning_items: said.reasoning_items,
                client_calls,
                notices,
                summary: run.finish(finish),
            });
        }
    }

    /// Starts the loop as a stream of events. The first model call is made
    /// before the stream starts, so its failure is an ordinary error (and
    /// what the model protocol could not carry is known).
    /// Dropping the stream (the client went away) cancels the model call
    /// and the tools in progress.
    ///
    /// Not an `async fn`, and its steps boxed: the future, which lives
    /// while the model takes to answer, holds the run and the model call,
    /// not also the loop it was made from and the largest step's state.
    /// The loop is taken boxed, as a plan gives it, and its box freed here.
    pub fn start_stream(
        self: Box<Self>,
    ) -> impl Future<Output = Result<(Started, impl Stream<Item = Event> + Send), ChatError>> + Send
    {
        let start = Box::pin((*self).start());
        async move {
            let mut run = start.await?;
            run.iterations = 1;
            let first = Box::pin(run.call(1, true)).await?;
            let is_sse = first
                .response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.contains("text/event-stream"));
            if !is_sse {
                return Err(
                    run.invalid("asked to stream, it answered without an event stream".into())
                );
            }
            let started = Started {
                notices: std::mem::take(&mut run.notices),
                attempts: run.attempts.clone(),
                budget_warnings: run.budget_warnings.clone(),
            };
            Ok((started, run.stream(first)))
        }
    }
}

impl Run {
    fn upstream_name(&self) -> &str {
        &self.l.resolved.upstream.name
    }

    fn limits(&self) -> &toolgate_config::format::Limits {
        &self.l.catalog.settings.limits
    }

    /// A turn with more calls than `limits.max_tool_calls_per_turn` is a
    /// broken (or hostile) model answer.
    fn check_call_count(&self, calls: usize) -> Result<(), ChatError> {
        let max = self.limits().max_tool_calls_per_turn;
        if calls > max {
            return Err(self.invalid(format!(
                "the model made {calls} tool calls in one turn, more than {max} (limits.max_tool_calls_per_turn)"
            )));
        }
        Ok(())
    }

    /// The loop's end: how it finished, what it did, what it cost.
    fn finish(&mut self, finish: FinishReason) -> Summary {
        crate::support::metrics::record(|m| m.loop_finished(self.iterations, finish.as_str()));
        Summary {
            finish,
            report: Report {
                tool_set: self.l.tool_set.clone(),
                formatter: self.mode.label(),
                upstream: self.upstream_name().to_owned(),
                iterations: self.iterations,
                tool_calls: std::mem::take(&mut self.calls),
                attempts: std::mem::take(&mut self.attempts),
                cost: Cost {
                    usd: (self.cost.1 == 0)
                        .then(|| crate::governance::spend::prices::usd(self.cost.0)),
                    unpriced_calls: self.cost.1,
                    budget_warnings: dedup(std::mem::take(&mut self.budget_warnings)),
                },
            },
            usage: std::mem::take(&mut self.usage),
        }
    }

    /// One model call's usage: summed, and recorded on its span
    /// (OpenTelemetry's GenAI names), whole or streamed alike.
    fn count_usage(&mut self, usage: Usage) {
        if usage.is_empty() {
            return;
        }
        // The spend reads the counts alone.
        self.last_usage = usage.counts();
        self.record_usage(&self.last_usage);
        self.usage.add(usage);
    }

    /// The call's token counts, on its span.
    fn record_usage(&self, usage: &Usage) {
        self.model_span
            .record("gen_ai.usage.input_tokens", usage.input);
        self.model_span
            .record("gen_ai.usage.output_tokens", usage.output);
        self.model_span
            .record("gen_ai.usage.cache_read.input_tokens", usage.cache_read);
        self.model_span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            usage.cache_write,
        );
        self.model_span
            .record("gen_ai.usage.reasoning.output_tokens", usage.reasoning);
    }

    /// Admits the next model call (a body of `bytes`) by the caller's
    /// budgets (the caller checks there are budgets and no admission yet).
    async fn admit(&mut self, bytes: usize) -> Result<(), ChatError> {
        // Its input, guessed at a token per four bytes.
        let guess = Usage {
            input: (bytes / 4) as u64,
            calls: 1,
            ..Usage::default()
        };
        let admission = self
            .l
            .spend
            .admit(&self.l.catalog.spend, &self.who, &guess, self.price())
            .await?;
        self.budget_warnings
            .extend(admission.warnings.iter().cloned());
        self.admission = Some(Box::new(admission));
        Ok(())
    }

    /// The price of the target in use.
    fn price(&self) -> Option<Price> {
        let resolved = &self.l.resolved;
        self.l
            .catalog
            .spend
            .price(resolved.terms.price.map(Price::from), &resolved.model)
    }

    /// The latest model call's spend: counted against the caller's budgets
    /// (the call's reservation replaced by its cost), in the ledger and
    /// the metrics, and on the call's span. When the model wants tools
    /// run, the next call is admitted now: a budget spent (by this call or
    /// another of the caller's) ends the loop with what the model said.
    async fn count_spend(&mut self, wants_tools: bool) {
        let usage = std::mem::take(&mut self.last_usage);
        let price = self.price();
        let call = ModelSpend {
            model: &self.l.resolved.model,
            usage: &usage,
            price,
            took: self.call_began.elapsed(),
        };
        let cost = match self.admission.take() {
            Some(admission) => {
                let settled = self.l.spend.settle(*admission, &self.who, call).await;
                for w in &settled.warnings {
                    tracing::info!("{w}");
                }
                self.budget_warnings.extend(settled.warnings);
                if let Some(e) = settled.exceeded {
                    self.budget_spent = Some(Box::new(e));
                }
                settled.cost
            }
            None => self.l.spend.record(&self.who, call).await,
        };
        match cost {
            Some(c) => {
                self.cost.0 += c;
                self.model_span.record(
                    "toolgate.cost_usd",
                    crate::governance::spend::prices::usd(c),
                );
            }
            None => self.cost.1 += 1,
        }
        if wants_tools && self.budget_spent.is_none() && !self.l.catalog.spend.budgets.is_empty() {
            // The next call's input: at least this one's.
            let guess = Usage {
                input: usage.input,
                calls: 1,
                ..Usage::default()
            };
            match self
                .l
                .spend
                .admit(&self.l.catalog.spend, &self.who, &guess, price)
                .await
            {
                Ok(admission) => self.admission = Some(Box::new(admission)),
                Err(SpendError::Exceeded(e)) => self.budget_spent = Some(Box::new(e)),
                Err(SpendError::Unavailable) => {}
            }
        }
        if let Some(e) = &self.budget_spent {
            tracing::warn!(budget = %e.budget, "a budget is spent: the loop stops");
        }
    }

    /// The request body of model call number `iteration` (1-based).
    fn body(&mut self, iteration: u32, stream: bool) -> Result<bytes::Bytes, ChatError> {
        let req = &self.l.request;
        let mut choice = req.tool_choice.clone().unwrap_or_default();
        let forced = choice.forces();
        if iteration > 1 && forced {
            choice = ToolChoice::Auto;
        }
        let model = &self.l.resolved.model;
        let protocol = self.l.resolved.upstream.protocol;
        // The last call offers the client's tools only.
        let tools = if self.last_call {
            if forced {
                choice = ToolChoice::Auto;
            }
            self.l.client_tools(&self.loaded)
        } else {
            self.l.offered_tools(&self.found, &self.loaded)
        };
        let mut notices = Notices::default();
        // On a target the conversation's opaque state does not belong to,
        // without that state.
        let key = self.l.resolved.key();
        let foreign =
            self.l.resolved.several() && self.affinity.as_ref().is_some_and(|a| *a != key);
        let turns: Cow<'_, [Turn]> = if foreign {
            Cow::Owned(routing::without_others_state(
                &self.turns,
                &key,
                &mut notices,
            ))
        } else {
            Cow::Borrowed(&self.turns)
        };
        let body = match &self.mode {
            Mode::FunctionCalling { .. } => {
                let offered = Tools(&tools);
                let call = Outgoing {
                    request: req,
                    model,
                    turns: &turns,
                    tools: offered,
                    tool_choice: (iteration > 1 && forced && !tools.is_empty())
                        .then_some(ToolChoice::Auto),
                    stream,
                };
                protocol::encode(protocol, &call, &mut notices)
            }
            Mode::Structured { template, .. } => {
                let plain = formatter::to_plain(
                    template,
                    &turns,
                    &tools,
                    &protocol::openai_chat::tool_choice(&choice),
                )
                .map_err(ChatError::Internal)?;
                let call = Outgoing {
                    request: req,
                    model,
                    turns: &plain,
                    tools: Tools(&[]),
                    tool_choice: None,
                    stream,
                };
                protocol::encode(protocol, &call, &mut notices)
            }
        };
        self.notices.extend(notices);
        Ok(body)
    }

    /// One model call (retries and the `tools` fallback included) in a
    /// span of its own (OpenTelemetry's GenAI conventions).
    async fn call(&mut self, iteration: u32, stream: bool) -> Result<Reply, ChatError> {
        self.last_usage = Usage::default();
        self.call_began = std::time::Instant::now();
        // The span moved into the call, not also kept beside it.
        let call = {
            let span = crate::model::upstream::chat_span(
                &self.l.resolved.upstream,
                &self.l.resolved.model,
            );
            span.record("iteration", iteration);
            self.model_span = span.clone();
            self.call_upstream(iteration, stream).instrument(span)
        };
        call.await
    }

    /// Calls the model: on a route of several targets, each in the
    /// router's order until one answers or fails in a way another would
    /// too (an answer begun is never tried again elsewhere: this returns
    /// at its head).
    async fn call_upstream(&mut self, iteration: u32, stream: bool) -> Result<Reply, ChatError> {
        if self.l.resolved.several() {
            // Boxed: a route's own state is no part of a single target's
            // call, which lives as long as the model takes to answer.
            Box::pin(self.call_route(iteration, stream)).await
        } else {
            self.call_target(iteration, stream).await
        }
    }

    /// [`Run::call_upstream`] on a route of several targets.
    async fn call_route(&mut self, iteration: u32, stream: bool) -> Result<Reply, ChatError> {
        let router = Arc::clone(&self.l.router);
        let order = router
            .order(&self.l.resolved, self.affinity.as_deref())
            .await;
        let mut last = None;
        let from = self.attempts.len();
        for i in order {
            self.l.resolved.switch(i);
            let key = self.l.resolved.key();
            let result = self.call_target(iteration, stream).await;
            let outcome = match &result {
                Ok(_) => "ok",
                Err(ChatError::Upstream(e)) => e.code(),
                Err(_) => "error",
            };
            self.attempts.push(Attempt {
                target: key.clone(),
                outcome,
            });
            match result {
                Ok(reply) => {
                    router.health.succeeded(&key);
                    self.affinity = Some(key);
                    self.record_attempts(from);
                    return Ok(reply);
                }
                Err(ChatError::Upstream(e)) if routing::fails_over(&e) => {
                    let retry_after = match &e {
                        UpstreamError::Status { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    router
                        .health
                        .failed(&key, retry_after, &self.l.resolved.terms.cooldown)
                        .await;
                    tracing::warn!(target = %key, "model target failed ({e}); trying the next");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        self.record_attempts(from);
        Err(last
            .map(ChatError::from)
            .unwrap_or_else(|| ChatError::Internal("a route without targets".into())))
    }

    /// The attempts of this model call (from index `from`) on its span,
    /// and the target that answered.
    fn record_attempts(&self, from: usize) {
        if let Some(tried) = routing::attempts_header(&self.attempts[from..]) {
            self.model_span.record("toolgate.attempts", tried.as_str());
        }
        self.model_span
            .record("toolgate.upstream", self.l.resolved.upstream.name.as_str());
    }

    /// Remembers which target made the opaque state of an answer (on a
    /// route of several, for the conversation's next requests).
    async fn remember(&self, said: &Said) {
        if !self.l.resolved.several() {
            return;
        }
        let key = self.l.resolved.key();
        let items: Vec<Item> = said
            .reasoning_items
            .iter()
            .cloned()
            .map(Item::Reasoning)
            .chain(said.calls.iter().cloned().map(Item::Call))
            .collect();
        self.l.router.remember(&items, &key).await;
    }

    /// Calls the target in use; in `auto` mode, falls back to the
    /// structured prompt (and remembers it) when the upstream rejects
    /// `tools`.
    ///
    /// The attempts the upstream's `retries` allow are made here, each
    /// with its body written again from the conversation: no copy of the
    /// body is kept while the model answers. (On a route of several
    /// targets, the route tries the next target instead.)
    ///
    /// A model call's future lives as long as the model takes to answer
    /// its head, so the rarer steps are awaited in boxes (a budget's
    /// admission, the fallback, the wait between attempts) and no outcome
    /// is held across a wait: the future is sized to the call alone.
    async fn call_target(&mut self, iteration: u32, stream: bool) -> Result<Reply, ChatError> {
        let upstream = Arc::clone(&self.l.resolved.upstream);
        let mut deadline = upstream.deadline();
        let mut attempt = 1;
        loop {
            let body = self.body(iteration, stream)?;
            if self.admission.is_none() && !self.l.catalog.spend.budgets.is_empty() {
                Box::pin(self.admit(body.len())).await?;
            }
            let e = match upstream.call(self.model_call(body, stream, deadline)).await {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            if matches!(self.mode, Mode::FunctionCalling { fallback: true }) && e.rejects_tools() {
                // The call again from its start, with the structured prompt.
                Box::pin(self.fall_back(e)).await?;
                (attempt, deadline) = (1, upstream.deadline());
                continue;
            }
            if self.l.resolved.several() {
                return Err(e.into());
            }
            let resume = upstream.next_attempt(attempt, e, deadline)?;
            Box::pin(tokio::time::sleep_until(resume)).await;
            attempt += 1;
        }
    }

    /// The upstream rejected `tools` (`e`): the structured prompt from now
    /// on for this model.
    async fn fall_back(&mut self, e: UpstreamError) -> Result<(), ChatError> {
        let upstream = Arc::clone(&self.l.resolved.upstream);
        tracing::warn!(
            upstream = %upstream.name,
            model = %self.l.resolved.model,
            "the upstream rejects tools ({e}); using the structured prompt for this model from now on"
        );
        self.l
            .learned
            .remember_structured(&upstream.name, &self.l.resolved.model)
            .await;
        self.mode = self
            .l
            .structured(&self.l.offered_tools(&self.found, &self.loaded))?;
        Ok(())
    }

    /// A model call of `body`: the client's protocol headers go along when
    /// the upstream speaks its protocol.
    fn model_call(
        &self,
        body: bytes::Bytes,
        stream: bool,
        deadline: tokio::time::Instant,
    ) -> ModelCall<'_> {
        let same = self.l.resolved.upstream.protocol == self.l.request.face;
        ModelCall {
            body,
            model: &self.l.resolved.model,
            stream,
            request_id: Some(&self.l.context.request_id),
            headers: if same { &self.l.request.headers } else { &[] },
            // Each attempt's body is written again (`call_target`).
            single_attempt: true,
            deadline: Some(deadline),
        }
    }

    /// What a whole answer says, read by the formatter in force.
    fn said(&mut self, mut assembly: Assembly) -> Said {
        self.count_usage(std::mem::take(&mut assembly.usage));
        match &self.mode {
            Mode::FunctionCalling { .. } => Said {
                reasoning: assembly.reasoning_text(),
                content: assembly.text,
                reasoning_items: assembly.reasoning,
                calls: assembly.calls,
                finish: assembly.finish,
                replay: assembly.replay,
                natives: assembly.natives,
            },
            Mode::Structured { offered, .. } => {
                let text = assembly.text.as_deref().unwrap_or_default();
                let parsed = toolgate_toolcall::parse_with_options(text, offered, PARSE);
                crate::model::formatter::count_repaired(parsed.repaired);
                Said {
                    content: (!parsed.content.is_empty()).then_some(parsed.content),
                    reasoning: parsed.reasoning,
                    calls: parsed.calls.into_iter().map(Call::from_parsed).collect(),
                    finish: assembly.finish,
                    ..Said::default()
                }
            }
        }
    }

    /// What to do after `said`, and the finish reason if that ends the
    /// loop (one rule for streamed and whole answers).
    fn decide(&self, said: &Said, iteration: u32) -> (Next, FinishReason) {
        let next = self.next(said, iteration);
        let finish = match &next {
            Next::Answer if self.budget_spent.is_some() && !said.calls.is_empty() => {
                FinishReason::BudgetExceeded
            }
            Next::Answer if self.last_call => FinishReason::MaxToolIterations,
            Next::Answer | Next::Run(_) | Next::LastCall => {
                FinishReason::of_answer(said.finish.as_ref())
            }
            Next::ClientCalls(_) => FinishReason::ToolCalls,
        };
        (next, finish)
    }

    /// After the last call: the text that says the budget ran out, when
    /// the model's answer has none of its own.
    fn budget_text(&self, said: &Said) -> Option<String> {
        let said_nothing = said.content.as_deref().is_none_or(|c| c.trim().is_empty());
        if let Some(e) = &self.budget_spent
            && said_nothing
            && !said.calls.is_empty()
        {
            return Some(format!("The tools were not run: {e}."));
        }
        (self.last_call && said_nothing).then(|| {
            format!(
                "The tools did not lead to an answer within this request's budget of {} tool iterations.",
                self.l.max_iterations
            )
        })
    }

    fn next(&self, said: &Said, iteration: u32) -> Next {
        if said.calls.is_empty() {
            return Next::Answer;
        }
        // A deferred tool is the client's to run, found or not.
        let deferred = self.l.deferred.iter().flat_map(|d| &d.tools);
        let client_names: HashSet<&str> = self
            .l
            .request
            .tools
            .iter()
            .chain(deferred)
            .map(|t| t.name.as_str())
            .collect();
        // A call that could not be read is the loop's to answer, whoever's
        // tool it names: the model is told and writes it again.
        let unreadable = said.calls.iter().any(|c| c.unreadable.is_some());
        let client: Vec<Call> = said
            .calls
            .iter()
            .filter(|c| client_names.contains(c.name.as_str()))
            .cloned()
            .collect();
        if !client.is_empty() && !unreadable {
            return Next::ClientCalls(client);
        }
        // After the last call, or once a budget is spent, gateway calls
        // are not run.
        if self.last_call || self.budget_spent.is_some() {
            return Next::Answer;
        }
        if iteration >= self.l.max_iterations {
            return Next::LastCall;
        }
        Next::Run(said.calls.clone())
    }

    /// The model's turn as the conversation keeps it: its items, and (for
    /// a protocol whose opaque state must go back verbatim) the turn as
    /// the model wrote it, marked with the upstream that made it.
    fn model_turn(&self, said: &Said, calls: &[Call]) -> Turn {
        // Sized at once: the turn is kept for the rest of the loop, and a
        // vector grown item by item keeps room for four.
        let mut items: Vec<Item> = Vec::with_capacity(
            said.reasoning_items.len()
                + usize::from(said.content.is_some())
                + calls.len()
                + said.natives.len(),
        );
        items.extend(said.reasoning_items.iter().cloned().map(Item::Reasoning));
        if let Some(c) = &said.content {
            items.push(Item::text(c.clone()));
        }
        items.extend(calls.iter().cloned().map(Item::Call));
        items.extend(said.natives.iter().cloned().map(Item::Native));
        Turn {
            role: Role::Assistant,
            items,
            origin: said.replay.clone().map(|raw| Origin {
                protocol: self.l.resolved.upstream.protocol,
                slot: Slot::Message,
                raw: raw.into(),
                untyped: Vec::new(),
                made_by: Some(self.l.resolved.key()),
            }),
        }
    }

    fn invalid(&self, message: String) -> ChatError {
        ChatError::Upstream(UpstreamError::Invalid {
            upstream: self.upstream_name().to_owned(),
            message,
        })
    }
}

/// `items` without repeats, in their first order.
fn dedup(mut items: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    items.retain(|i| seen.insert(i.clone()));
    items
}
