//! The `toolgate` command line: `serve`, `check`, `tools`, `call`, `schema`.
//! This is the binary edge: errors become messages and exit codes here.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use toolgate_config::format::json_schemas;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, http_client};
use toolgate_engine::tools::tool::context::CallContext;
use toolgate_engine::tools::tool::native::NativeTool;

#[derive(Debug, Parser)]
#[command(
    name = "toolgate",
    version,
    about = "A declarative tool gateway for LLM applications"
)]
struct Cli {
    /// Folder holding toolgate.yaml, tools.d/ and tool-sets/.
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    config: PathBuf,
    /// How logs are written on stderr: `text`, or `json` (one object per
    /// line, for log collectors).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "TOOLGATE_LOG_FORMAT"
    )]
    log_format: crate::telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway's HTTP server.
    Serve {
        /// Address to listen on; overrides `listen` in toolgate.yaml.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Validate the configuration: exit 1 listing every error, or print a summary.
    Check {
        /// Also start every MCP server, list the tools it would offer (and
        /// report what is wrong), then stop them.
        #[arg(long)]
        connect: bool,
    },
    /// List the tools (of one tool set, or all).
    Tools {
        #[arg(long, value_name = "NAME")]
        tool_set: Option<String>,
    },
    /// Run one tool without the server and print its result.
    Call {
        /// The tool's name.
        name: String,
        /// The arguments, as a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON")]
        args: String,
    },
    /// Serve one tool set as an MCP server on stdin/stdout, for clients
    /// that launch their servers as commands (Claude Desktop, editors).
    /// Logs go to stderr.
    #[command(args_conflicts_with_subcommands = true)]
    Mcp {
        #[command(subcommand)]
        action: Option<McpAction>,
        /// The tool set to serve; default: the configuration's default set.
        #[arg(long, value_name = "NAME")]
        tool_set: Option<String>,
        /// `search`: list only `find_tools` and `call_tool`; `all`: every
        /// tool; default: the set's own `discovery`.
        #[arg(long, value_enum)]
        discovery: Option<DiscoveryArg>,
    },
    /// Start one MCP server, and print the fingerprints of the tool
    /// definitions it lists now as a pin file (JSON) for its `pins`: what
    /// you review now is what the gateway trusts from then on.
    Pin {
        /// The MCP server's `name`.
        server: String,
    },
    /// Write tools from an API description, for review and a `tools.d`
    /// file.
    #[command(subcommand)]
    Import(Import),
    /// Print the JSON Schema of the configuration formats, for editors.
    Schema {
        #[arg(long, value_enum, default_value_t = SchemaKind::All)]
        kind: SchemaKind,
    },
}

/// `toolgate mcp` besides serving.
#[derive(Debug, Subcommand)]
enum McpAction {
    /// Authorize the gateway at an MCP server declared with
    /// `oauth.authorization_code`: prints the URL to open, waits for the
    /// authorization server's redirect on 127.0.0.1, and keeps the token in
    /// the server's token file (a running gateway picks it up).
    Login {
        /// The MCP server's `name`.
        server: String,
    },
}

#[derive(Debug, Subcommand)]
enum Import {
    /// One HTTP tool per operation of an OpenAPI 3.0/3.1 or Swagger 2.0
    /// description (YAML or JSON), in the tools.d format: every `$ref`
    /// resolved, parameters and the request body as one arguments object,
    /// security schemes read from environment variables. Operations that
    /// cannot be tools are listed in the file's header.
    Openapi {
        /// The spec file.
        spec: PathBuf,
        /// Only operations whose name, operationId or path matches one of
        /// these globs (repeatable).
        #[arg(long, value_name = "GLOB")]
        include: Vec<String>,
        /// Not the operations matching one of these globs (repeatable).
        #[arg(long, value_name = "GLOB")]
        exclude: Vec<String>,
        /// Put before every tool name, e.g. `github_`.
        #[arg(long, default_value = "", value_name = "P")]
        prefix: String,
        /// The API's base URL, instead of the spec's first server.
        #[arg(long, value_name = "URL")]
        server: Option<String>,
        /// The environment variable holding the API's credential (for every
        /// security scheme; a bearer token when the spec declares none).
        #[arg(long, value_name = "NAME")]
        auth_env: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SchemaKind {
    All,
    Gateway,
    Tools,
    ToolSet,
}

/// `toolgate mcp --discovery`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum DiscoveryArg {
    All,
    Search,
}

impl DiscoveryArg {
    fn into_config(self) -> toolgate_config::format::Discovery {
        match self {
            DiscoveryArg::All => toolgate_config::format::Discovery::All,
            DiscoveryArg::Search => toolgate_config::format::Discovery::Search,
        }
    }
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Native tools of the binary running the CLI, set once by [`main_with`].
static EXTRA_TOOLS: std::sync::OnceLock<Vec<NativeTool>> = std::sync::OnceLock::new();

/// Loads the catalog of `dir` with the binary's native tools.
fn load_catalog(dir: &Path) -> Result<Catalog, toolgate_config::ConfigErrors> {
    let extra = EXTRA_TOOLS.get().map(Vec::as_slice).unwrap_or_default();
    Catalog::load_with(dir, &|name| std::env::var(name).ok(), extra)
}

/// Transparent huge pages off for this process and the processes it
/// starts (`PR_SET_THP_DISABLE`), unless `MIMALLOC_ALLOW_THP` is set (the
/// allocator's own switch, which it then follows). Where the kernel gives
/// them to every mapping, the allocator's arenas are backed two megabytes
/// at a time: 9,700 open streams took 261 MiB instead of 217, an idle
/// gateway 62 MiB instead of 40, for no measured gain in CPU
/// (docs/benchmarks.md). A kernel without the switch keeps its default.
fn small_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    main_with(Vec::new())
}

/// Runs the same command line with native tools of the calling binary
/// added to the catalog, next to the enabled builtins: a crate that depends
/// on `gateway` and `tool-macros` calls
/// `gateway::cli::main_with(gateway::tools![my_tool, other_tool])` from its
/// `main`. YAML tool sets can name these tools; a name clash with any other
/// tool is a configuration error.
pub fn main_with(tools: Vec<NativeTool>) -> ExitCode {
    small_pages();
    // A worker running one program for the interpreter: before any thread
    // or runtime exists, so its confinement covers the whole process.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == toolgate_code::WORKER_ARG)
    {
        return ExitCode::from(u8::try_from(toolgate_code::worker_main()).unwrap_or(2));
    }
    // A command of `exec` or lenient Python, confining itself first.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == toolgate_code::CONFINE_ARG)
    {
        let args: Vec<String> = std::env::args().skip(2).collect();
        let code = toolgate_code::confine::child_main(&args);
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    let _ = EXTRA_TOOLS.set(tools);
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Traces are exported by the server only.
    let otlp = match cli.command {
        Command::Serve { .. } => crate::telemetry::otlp_settings(&cli.config),
        _ => None,
    };
    let telemetry = crate::telemetry::init(cli.log_format, otlp.as_ref(), runtime.handle().clone());
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown();
    // Blocking work still running (a tool stuck in a system call) must not
    // keep the process alive: the shutdown grace period is a hard deadline.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let dir = &cli.config;
    match cli.command {
        Command::Check { connect: false } => Ok(check(dir)),
        Command::Check { connect: true } => Ok(check_connect(dir).await),
        Command::Pin { server } => pin(dir, &server).await,
        Command::Import(import) => import_openapi(import),
        Command::Schema { kind } => print_schema(kind),
        Command::Tools { tool_set } => {
            let catalog = load(dir)?;
            catalog.mcp().start().await;
            let listed = list_tools(&catalog, tool_set.as_deref());
            catalog.mcp().shutdown().await;
            listed
        }
        Command::Call { name, args } => call_tool(dir, name, &args).await,
        Command::Mcp {
            action: Some(McpAction::Login { server }),
            ..
        } => mcp_login(dir, &server).await,
        Command::Mcp {
            action: None,
            tool_set,
            discovery,
        } => serve_mcp_stdio(dir, tool_set, discovery).await,
        Command::Serve { listen } => {
            let catalog = load(dir)?;
            // What loading built and dropped goes back to the system: the
            // thread that loaded may stay idle for long.
            toolgate_alloc::release_free_memory();
            let addr = match listen {
                Some(a) => a,
                None => catalog
                    .settings
                    .listen
                    .as_deref()
                    .unwrap_or(DEFAULT_LISTEN)
                    .parse()
                    .context("invalid listen address")?,
            };
            serve(catalog, addr, dir).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `toolgate import openapi`: the tools file of a description, written or
/// printed, with a summary on stderr.
fn import_openapi(import: Import) -> anyhow::Result<ExitCode> {
    let Import::Openapi {
        spec,
        include,
        exclude,
        prefix,
        server,
        auth_env,
        out,
    } = import;
    let options = toolgate_openapi::Options {
        include,
        exclude,
        prefix,
        server,
        auth_env,
    };
    let imported = toolgate_openapi::import_file(&spec, &options)?;
    let yaml = toolgate_openapi::to_yaml(&imported, &spec.display().to_string())?;
    match &out {
        Some(path) => std::fs::write(path, &yaml)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{yaml}"),
    }
    let skipped = if imported.skipped.is_empty() {
        String::new()
    } else {
        format!(
            "; {} not imported (listed in the header)",
            imported.skipped.len()
        )
    };
    let credentials = if imported.env.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = imported.env.iter().map(|(n, _)| n.as_str()).collect();
        format!("; credentials from {}", names.join(", "))
    };
    eprintln!(
        "{} tools from {} operations{skipped}{credentials}",
        imported.tools.len(),
        imported.operations,
    );
    Ok(ExitCode::SUCCESS)
}

/// `toolgate schema`: the JSON Schemas of the configuration files.
fn print_schema(kind: SchemaKind) -> anyhow::Result<ExitCode> {
    let mut all = json_schemas();
    let value = match kind {
        SchemaKind::All => serde_json::to_value(&all)?,
        SchemaKind::Gateway => all.remove("toolgate.yaml").unwrap_or_default(),
        SchemaKind::Tools => all.remove("tools.d/*.yaml").unwrap_or_default(),
        SchemaKind::ToolSet => all.remove("tool-sets/*.yaml").unwrap_or_default(),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(ExitCode::SUCCESS)
}

/// `toolgate call`: one tool run without the server, its result printed.
async fn call_tool(dir: &Path, name: String, args: &str) -> anyhow::Result<ExitCode> {
    let catalog = load(dir)?;
    catalog.mcp().start().await;
    let arguments: serde_json::Value =
        serde_json::from_str(args).context("--args is not valid JSON")?;
    let executor = Executor::new(http_client()?);
    let call = ToolCall {
        id: "cli".into(),
        name,
        arguments,
    };
    let result = executor.run(&catalog, &call, &CallContext::new()).await;
    catalog.mcp().shutdown().await;
    match (&result.data, &result.error) {
        (_, Some(e)) => {
            eprintln!("error ({}): {e}", e.code());
            Ok(ExitCode::FAILURE)
        }
        (Some(serde_json::Value::String(s)), None) => {
            println!("{s}");
            Ok(ExitCode::SUCCESS)
        }
        (data, None) => {
            println!("{}", serde_json::to_string_pretty(data)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `toolgate mcp login`: an MCP server's OAuth authorization, its token
/// kept for the gateway.
async fn mcp_login(dir: &Path, server: &str) -> anyhow::Result<ExitCode> {
    let catalog = load(dir)?;
    let (url, oauth) = catalog.mcp().oauth_of(server).map_err(anyhow::Error::msg)?;
    let saved = toolgate_engine::tools::tool::mcp::oauth::login(&url, &oauth, |at| {
        println!("Open this URL to authorize toolgate at `{server}`:\n\n  {at}\n");
        println!("Waiting for the redirect (5 minutes)...");
    })
    .await
    .map_err(anyhow::Error::msg)?;
    println!("Authorized: the token is kept in {}", saved.display());
    Ok(ExitCode::SUCCESS)
}

/// `toolgate mcp`: one tool set as an MCP server on stdin/stdout.
async fn serve_mcp_stdio(
    dir: &Path,
    tool_set: Option<String>,
    discovery: Option<DiscoveryArg>,
) -> anyhow::Result<ExitCode> {
    let catalog = load(dir)?;
    let Some(set) = tool_set.or_else(|| catalog.default_set().map(|s| s.name.clone())) else {
        anyhow::bail!("the configuration has no default tool set: name one with --tool-set");
    };
    let loader: crate::reload::Loader = Arc::new(|dir: &Path| load_catalog(dir));
    crate::server::stdio(
        catalog,
        set,
        discovery.map(DiscoveryArg::into_config),
        crate::server::Options {
            dir: dir.to_path_buf(),
            loader,
            signals: false,
        },
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// Loads the catalog, printing every diagnostic on failure and warnings on
/// success.
fn load(dir: &Path) -> anyhow::Result<Catalog> {
    match load_catalog(dir) {
        Ok(catalog) => {
            for w in &catalog.warnings {
                tracing::warn!("{w}");
            }
            Ok(catalog)
        }
        Err(errors) => anyhow::bail!("{errors}"),
    }
}

fn check(dir: &Path) -> ExitCode {
    match load_catalog(dir) {
        Ok(catalog) => {
            for w in &catalog.warnings {
                println!("{w}");
            }
            println!("ok: {}", catalog.summary());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for d in &errors.diagnostics {
                println!("{d}");
            }
            let n = errors.errors().count();
            println!("{n} error{} found", if n == 1 { "" } else { "s" });
            ExitCode::FAILURE
        }
    }
}

/// `check --connect`: the configuration check, then every MCP server
/// started, its tools listed, and stopped. Exit 1 when the configuration is
/// invalid, a server does not start, or one of its tools cannot be offered.
/// `toolgate pin SERVER`: the server's tools' fingerprints, as a pin file.
async fn pin(dir: &Path, server: &str) -> anyhow::Result<ExitCode> {
    let catalog = load(dir)?;
    let mcp = catalog.mcp();
    if !mcp.reports().iter().any(|r| r.name == server) {
        anyhow::bail!("no MCP server `{server}` is declared (see `toolgate check`)");
    }
    mcp.start().await;
    let reports = mcp.reports();
    mcp.shutdown().await;
    let Some(report) = reports.into_iter().find(|r| r.name == server) else {
        anyhow::bail!("no MCP server `{server}` is declared");
    };
    if let Some(reason) = &report.reason {
        anyhow::bail!("MCP server `{server}` did not start: {reason}");
    }
    println!("{}", serde_json::to_string_pretty(&report.fingerprints)?);
    Ok(ExitCode::SUCCESS)
}

async fn check_connect(dir: &Path) -> ExitCode {
    let Ok(catalog) = load_catalog(dir) else {
        return check(dir);
    };
    for w in &catalog.warnings {
        println!("{w}");
    }
    let mcp = catalog.mcp();
    mcp.start().await;
    let reports = mcp.reports();
    // With the tools the servers offered.
    let summary = catalog.summary();
    mcp.shutdown().await;
    let mut failed = 0;
    for r in &reports {
        let info = r
            .server_info
            .as_deref()
            .map(|i| format!(" ({i})"))
            .unwrap_or_default();
        match &r.reason {
            Some(reason) if r.per_caller() => println!(
                "MCP server `{}` over {}: per caller — {reason}",
                r.name, r.transport
            ),
            None => println!(
                "MCP server `{}`{info} over {}: {} tools",
                r.name,
                r.transport,
                r.tools.len()
            ),
            Some(reason) => println!(
                "{}:{}:{}: error: MCP server `{}` did not start: {reason} — run its command (or open its URL) by hand to see why",
                r.file, r.pos.line, r.pos.column, r.name
            ),
        }
        let width = r.tools.iter().map(|t| t.0.len()).max().unwrap_or(0);
        for (name, remote, description) in &r.tools {
            let first_line = description.lines().next().unwrap_or_default();
            // Shown when the name is not just the prefix and the server's name.
            let renamed = if name.ends_with(remote.as_str()) {
                String::new()
            } else {
                format!("(`{remote}`) ")
            };
            println!("  {name:<width$}  {renamed}{first_line}");
        }
        for p in &r.problems {
            println!("  error: {p}");
        }
        if !r.is_ok() {
            failed += 1;
        }
    }
    if failed > 0 {
        println!(
            "{failed} of {} MCP server{} failed or offer unusable tools",
            reports.len(),
            if reports.len() == 1 { "" } else { "s" }
        );
        return ExitCode::FAILURE;
    }
    println!("ok: {summary}");
    ExitCode::SUCCESS
}

fn list_tools(catalog: &Catalog, set: Option<&str>) -> anyhow::Result<ExitCode> {
    let (tools, unavailable): (Vec<_>, Vec<_>) = match set {
        Some(name) => {
            let Some(set) = catalog.set(name) else {
                let names: Vec<&str> = catalog.sets().map(|s| s.name.as_str()).collect();
                anyhow::bail!(
                    "tool set `{name}` does not exist; available: {}",
                    names.join(", ")
                );
            };
            (
                catalog.tools_in(set, None).collect(),
                catalog.unavailable_in(set, None),
            )
        }
        None => (catalog.tools().collect(), catalog.unavailable().collect()),
    };
    let width = tools
        .iter()
        .map(|t| t.name.len())
        .chain(unavailable.iter().map(|u| u.name.len()))
        .max()
        .unwrap_or(4);
    for t in tools {
        let first_line = t.description.lines().next().unwrap_or_default();
        println!("{:<width$}  {:<7} {}", t.name, t.kind.label(), first_line);
    }
    for u in unavailable {
        println!("{:<width$}  -       unavailable: {}", u.name, u.reason);
    }
    Ok(ExitCode::SUCCESS)
}

/// Connections the kernel queues for the gateway before it accepts them.
/// `TcpListener::bind`'s (128, the standard library's) drops the tail of a
/// burst — thousands of agents reconnecting at once after a deploy — where
/// they would have waited a moment; Linux clamps this to
/// `net.core.somaxconn` (4,096 by default).
const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`] (and, but on
/// Windows, address reuse, as `bind` sets it).
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves the HTTP API until SIGINT/SIGTERM, reloading the configuration
/// folder `dir` when it changes (and on SIGHUP); see [`crate::server`].
///
/// MCP servers are started first (each until it is ready or has failed its
/// first attempt, within its `startup_timeout`), so the first requests
/// already see their tools; a server that fails keeps being retried in the
/// background. They are stopped after the server.
pub async fn serve(catalog: Catalog, addr: SocketAddr, dir: &Path) -> anyhow::Result<()> {
    let listener = listen(addr).with_context(|| format!("cannot listen on {addr}"))?;
    let loader: crate::reload::Loader = Arc::new(|dir: &Path| load_catalog(dir));
    let running = crate::server::start(
        catalog,
        listener,
        crate::server::Options {
            dir: dir.to_owned(),
            loader,
            signals: true,
        },
    )
    .await?;
    running.wait().await?;
    Ok(())
}
