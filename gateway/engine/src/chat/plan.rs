//! What a chat request becomes, decided the same way for every face: the
//! request passed to the upstream untouched (no tools at all), or a tool
//! loop with the set's tools and the client's.

use std::sync::Arc;

use crate::catalog::{Catalog, SetError};
use crate::conversation::{Request, RequestError, ToolDef};
use crate::executor::Executor;
use crate::governance::limits::Guards;
use crate::identity::auth::ApiKey;
use crate::model::formatter::Learned;
use crate::model::protocol::OfferedTools;
use crate::model::routing::{Resolved, Router};
use crate::model::upstream::Upstream;
use crate::tools::discovery::{Discovery, FIND_TOOLS};
use crate::tools::tool::Tool;
use crate::tools::tool::context::CallContext;

/// The tool-set name that turns gateway tools off for one request.
pub const NO_TOOL_SET: &str = "none";

/// What a request becomes.
#[derive(Debug)]
pub enum Plan {
    /// No gateway tools and no client tools: the request goes to
    /// `upstream` as it is, with `model` as the upstream's model name.
    Proxy {
        upstream: Arc<Upstream>,
        model: String,
        request: Box<Request>,
        /// Whose spend the call is.
        who: crate::governance::spend::Who,
        /// The route's own prices, if it has them.
        price: Option<toolgate_config::format::PriceDecl>,
    },
    /// The tool loop.
    Loop(Box<Loop>),
}

/// The gateway's shared parts a loop runs with.
#[derive(Debug, Clone)]
pub struct Services {
    pub executor: Executor,
    /// Formatter choices learned in `auto` mode.
    pub learned: Arc<Learned>,
    /// Caps and rate buckets (sub-agents are counted against them).
    pub guards: Arc<Guards>,
    /// Targets' health and which made which opaque state.
    pub router: Arc<Router>,
    /// What was spent, and budgets' counts.
    pub spend: Arc<crate::governance::spend::Spend>,
}

/// Why a request cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "the request has {count} messages; this gateway accepts at most {max} (limits.max_messages)"
    )]
    TooManyMessages { count: usize, max: usize },
    #[error(transparent)]
    Set(#[from] SetError),
    #[error(
        "no model upstream is configured: declare `upstreams` in toolgate.yaml or set OPENAI_BASE_URL"
    )]
    NoUpstream,
    #[error("no route serves model `{0}`; GET /v1/models lists the routable models")]
    UnknownModel(String),
    #[error(
        "the client tool `{name}` has the name of a tool of the set `{set}`; rename it or pick another tool set"
    )]
    ClientToolClash { name: String, set: String },
    #[error("`n` greater than 1 is not supported with gateway tools")]
    ManyChoices,
    /// The conversation cannot be read.
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl PlanError {
    /// The request field at fault, if one is.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            PlanError::TooManyMessages { .. } => Some("messages"),
            PlanError::Set(_) => Some("tool_set"),
            PlanError::NoUpstream => None,
            PlanError::UnknownModel(_) => Some("model"),
            PlanError::ClientToolClash { .. } => Some("tools"),
            PlanError::ManyChoices => Some("n"),
            PlanError::Request(_) => None,
        }
    }
}

/// Whether a request without tools may go to the upstream untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passthrough {
    /// When the upstream speaks the face's protocol.
    Allowed,
    /// Never: even without tools, the request runs as a (one-call) loop
    /// whose answer the face encodes.
    Never,
}

/// Decides what `request` becomes. `set` is the tool set the caller named
/// (the body's `tool_set`, else a face's own way, e.g. a header), `key` the
/// caller's key, `context` the context of its tool calls.
pub fn plan(
    catalog: &Arc<Catalog>,
    services: &Services,
    mut request: Request,
    set: Option<String>,
    key: Option<Arc<ApiKey>>,
    context: CallContext,
    passthrough: Passthrough,
) -> Result<Plan, PlanError> {
    let max = catalog.settings.limits.max_messages;
    let count = request.message_count;
    if count > max {
        return Err(PlanError::TooManyMessages { count, max });
    }
    let set = match request.tool_set.take().or(set).as_deref() {
        Some(NO_TOOL_SET) => None,
        Some(name) => Some(catalog.usable_set(name, key.as_deref())?),
        // A key's own default (resolved against the catalog's when the key
        // was validated), else the catalog's.
        None => match &key {
            Some(key) => key.default_tool_set.as_deref().and_then(|n| catalog.set(n)),
            None => catalog.default_set(),
        },
    };
    if catalog.upstreams.is_empty() {
        return Err(PlanError::NoUpstream);
    }
    let resolved = catalog
        .upstreams
        .resolve(&request.model)
        .ok_or_else(|| PlanError::UnknownModel(request.model.clone()))?;
    if set.is_none()
        && request.tools.is_empty()
        && request.deferred.is_none()
        && passthrough == Passthrough::Allowed
        && resolved.upstream.protocol == request.face
        // A route of several targets runs as a loop: it fails over, and
        // learns which target made the opaque state of each answer.
        && !resolved.several()
    {
        return Ok(Plan::Proxy {
            upstream: Arc::clone(&resolved.upstream),
            who: crate::governance::spend::Who::of(&context),
            price: resolved.terms.price,
            model: resolved.model,
            request: Box::new(request),
        });
    }

    request.decode_rest()?;
    request.release_conversation_fields();
    // Tool mode: the set's tools, then the client's, with no name twice.
    // A set that searches offers `find_tools` (and, later, what it
    // found); every tool of the set may be called.
    let gateway: Vec<Arc<crate::tools::tool::Tool>> = set
        .map(|s| catalog.tools_in(s, context.subject.as_deref()).collect())
        .unwrap_or_default();
    let mut own: Vec<&'static str> = Vec::new();
    // Code mode: the model gets `run_code` (and `find_tools` to find the
    // functions when the set searches), never the tools themselves.
    let code = set.is_some_and(|s| {
        request.tool_mode.unwrap_or(s.mode) == toolgate_config::format::SetMode::Code
    });
    let search = set.filter(|_| !code).and_then(|s| match s.discovery {
        Discovery::All => None,
        Discovery::Search {
            max_tools_in_prompt,
            preload,
        } => Some(Search {
            tool: Arc::clone(&s.search_tool),
            max_tools_in_prompt,
            preload,
        }),
    });
    let code_searches =
        code && set.is_some_and(|s| matches!(s.discovery, Discovery::Search { .. }));
    if search.is_some() || code_searches {
        own.push(FIND_TOOLS);
    }
    if code {
        own.push(crate::tools::code::RUN_CODE);
    }
    let offered: Vec<Arc<ToolDef>> = match (&search, set) {
        (_, Some(s)) if code => {
            // Its JSON kept once written, for the loop's model calls.
            let mut run_code = crate::tools::code::offer(&gateway, code_searches);
            run_code.json.share();
            std::iter::once(Arc::new(run_code))
                .chain(code_searches.then(|| s.search_tool.spec()))
                .collect()
        }
        (Some(_), _) => Vec::new(),
        (None, _) => gateway.iter().map(|t| t.spec()).collect(),
    };
    let gateway_tools = GatewayTools::new(gateway, own);
    // A hosted tool a gateway tool of its name serves is that tool.
    request.hosted.retain(|h| !gateway_tools.contains(&h.name));
    let deferred = request.deferred.take();
    let deferred_names = deferred.iter().flat_map(|d| {
        std::iter::once(d.search.as_str()).chain(d.tools.iter().map(|t| t.name.as_str()))
    });
    let client_names = request
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .chain(deferred_names);
    for name in client_names {
        if gateway_tools.contains(name) {
            return Err(PlanError::ClientToolClash {
                name: name.to_owned(),
                set: set.map(|s| s.name.clone()).unwrap_or_default(),
            });
        }
    }
    if request.choices.is_some_and(|n| n > 1) {
        return Err(PlanError::ManyChoices);
    }
    let tools = OfferedTools::new(offered, &request.tools);
    let settings = &catalog.settings;
    let max_iterations = request
        .max_tool_iterations
        .unwrap_or(settings.defaults.max_tool_iterations)
        .min(settings.limits.max_tool_iterations);
    let tool_set = set.map(|s| s.name.clone());
    Ok(Plan::Loop(Box::new(Loop {
        catalog: Arc::clone(catalog),
        executor: services.executor.clone(),
        resolved,
        context: context.with_tool_set(tool_set.clone()),
        tool_set,
        tools,
        gateway_tools,
        search,
        deferred,
        max_iterations,
        request,
        learned: Arc::clone(&services.learned),
        router: Arc::clone(&services.router),
        guards: Arc::clone(&services.guards),
        spend: Arc::clone(&services.spend),
        key,
    })))
}
/// The tools a loop's gateway runs, known by name: the set's tools, held
/// by a count each (their names are the tools' own, not copies), and the
/// gateway's own tools the loop offers (`find_tools`, `run_code`).
#[derive(Debug, Clone, Default)]
pub struct GatewayTools {
    /// Sorted by name.
    set: Vec<Arc<Tool>>,
    own: Vec<&'static str>,
}

impl GatewayTools {
    pub fn new(mut set: Vec<Arc<Tool>>, own: Vec<&'static str>) -> GatewayTools {
        set.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        GatewayTools { set, own }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.own.contains(&name)
            || self
                .set
                .binary_search_by(|t| t.name.as_str().cmp(name))
                .is_ok()
    }

    /// The same tools but `name`.
    pub fn without(&self, name: &str) -> GatewayTools {
        GatewayTools {
            set: self
                .set
                .iter()
                .filter(|t| t.name != name)
                .cloned()
                .collect(),
            own: self.own.iter().copied().filter(|n| *n != name).collect(),
        }
    }
}

/// Everything one loop needs.
#[derive(Debug)]
pub struct Loop {
    pub catalog: Arc<Catalog>,
    pub executor: Executor,
    pub resolved: Resolved,
    pub request: Request,
    /// The tool set in force, if any.
    pub tool_set: Option<String>,
    /// Tools offered to the model: the set's (none when it searches, see
    /// `search`), then the client's.
    pub tools: OfferedTools,
    /// The tools the gateway runs: the set's, `find_tools` among them
    /// when the set searches.
    pub gateway_tools: GatewayTools,
    /// The set's tool search, when it searches (`discovery: search`).
    pub search: Option<Search>,
    /// The client's deferred tools and the search over them the loop runs
    /// itself (not a gateway tool: its matches are the client's to run).
    pub deferred: Option<Box<crate::conversation::DeferredTools>>,
    pub max_iterations: u32,
    /// Formatter choices learned in `auto` mode.
    pub learned: Arc<Learned>,
    /// Targets' health and which made which opaque state.
    pub router: Arc<Router>,
    /// The request's context, injected into native tool calls.
    pub context: crate::tools::tool::context::CallContext,
    /// The caps and buckets sub-agents are counted against.
    pub guards: Arc<crate::governance::limits::Guards>,
    /// The caller's key, whose limits sub-agents count against.
    pub key: Option<Arc<crate::identity::auth::ApiKey>>,
    /// What was spent, and budgets' counts.
    pub spend: Arc<crate::governance::spend::Spend>,
}

/// A set's tool search, as a loop offers it: `find_tools` first, then the
/// tools it found (at most `max_tools_in_prompt`, the oldest found leave
/// first), then the client's.
#[derive(Debug, Clone)]
pub struct Search {
    pub tool: Arc<Tool>,
    pub max_tools_in_prompt: usize,
    /// How many best matches for the user's latest message are offered
    /// from the first model call on.
    pub preload: usize,
}
