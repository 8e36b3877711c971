//! The `toolgate` command line: `serve`, `check`, `tools`, `call`, `schema`.
//! This is the binary edge: errors become messages and exit codes here.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

use crate::api::{AppState, router};
use crate::catalog::Catalog;
use crate::config::format::json_schemas;
use crate::executor::{Executor, ToolCall, http_client};

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
    Check,
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
    /// Print the JSON Schema of the configuration formats, for editors.
    Schema {
        #[arg(long, value_enum, default_value_t = SchemaKind::All)]
        kind: SchemaKind,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SchemaKind {
    All,
    Gateway,
    Tools,
    ToolSet,
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
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
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = EnvFilter::try_from_env("TOOLGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .try_init();
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check => Ok(check(&cli.config)),
        Command::Schema { kind } => {
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
        Command::Tools { tool_set } => {
            let catalog = load(&cli.config)?;
            list_tools(&catalog, tool_set.as_deref())
        }
        Command::Call { name, args } => {
            let catalog = load(&cli.config)?;
            let arguments: serde_json::Value =
                serde_json::from_str(&args).context("--args is not valid JSON")?;
            let executor = Executor::new(http_client());
            let result = executor
                .run(
                    &catalog,
                    &ToolCall {
                        id: "cli".into(),
                        name,
                        arguments,
                    },
                )
                .await;
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
        Command::Serve { listen } => {
            let catalog = load(&cli.config)?;
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
            serve(catalog, addr).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Loads the catalog, printing every diagnostic on failure and warnings on
/// success.
fn load(dir: &Path) -> anyhow::Result<Catalog> {
    match Catalog::load(dir) {
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
    match Catalog::load(dir) {
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
                catalog.tools_in(set).collect(),
                set.unavailable
                    .iter()
                    .filter_map(|n| catalog.unavailable_tool(n))
                    .collect(),
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
        println!("{:<width$}  {:<5} {}", t.name, t.kind.label(), first_line);
    }
    for u in unavailable {
        println!("{:<width$}  -     unavailable: {}", u.name, u.reason);
    }
    Ok(ExitCode::SUCCESS)
}

/// Serves the HTTP API until SIGINT/SIGTERM.
pub async fn serve(catalog: Catalog, addr: SocketAddr) -> anyhow::Result<()> {
    tracing::info!("catalog: {}", catalog.summary());
    let state = AppState::new(Arc::new(catalog), Executor::new(http_client()));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
