//! `warden-proxy`: reads the configuration, binds the listeners, runs until
//! SIGINT or SIGTERM. `--check-config FILE` validates a file and exits.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use warden_proxy::config::{Config, RawConfig};
use warden_proxy::server::{self, Listeners};

/// The sidecar sits on every tool call's path: mimalloc's per-thread free
/// lists cut the allocator's share of its CPU (measured with
/// `scripts/bench-proxy`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "warden-proxy", version, about = "Warden's sidecar")]
struct Cli {
    /// The configuration file (YAML).
    #[arg(long, env = "WARDEN_PROXY_CONFIG", conflicts_with = "check_config")]
    config: Option<std::path::PathBuf>,
    /// Validates this configuration file (with the environment's overrides)
    /// and exits: 0 when it is valid.
    #[arg(long, value_name = "FILE")]
    check_config: Option<std::path::PathBuf>,
}

/// The configuration's text inline, when no file is given: how the sidecar
/// injector configures an injected sidecar (JSON is YAML).
const ENV_CONFIG_YAML: &str = "WARDEN_PROXY_CONFIG_YAML";

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text)
}

fn parse(text: &str) -> anyhow::Result<Config> {
    let env = |name: &str| std::env::var(name).ok();
    let raw = RawConfig::from_yaml(text)?.with_env(&env);
    Ok(Config::from_raw(raw, &env)?)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = cli.check_config {
        return match load(&path) {
            Ok(c) => {
                println!("{}: valid ({} routes)", path.display(), c.routes.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e:#}", path.display());
                ExitCode::FAILURE
            }
        };
    }
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let loaded = match (cli.config, std::env::var(ENV_CONFIG_YAML)) {
        (Some(path), _) => load(&path),
        (None, Ok(text)) => parse(&text).context(ENV_CONFIG_YAML),
        (None, Err(_)) => {
            eprintln!(
                "warden-proxy: give --config FILE (or WARDEN_PROXY_CONFIG, or the text in \
                 {ENV_CONFIG_YAML}), or --check-config FILE"
            );
            return ExitCode::FAILURE;
        }
    };
    let result = loaded.and_then(|config| {
        // This thread runs the background work (bundle, mode stream,
        // telemetry), the admin listener and the accept loops; `serve`
        // starts the `workers` threads that serve the agent's requests.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime")?;
        rt.block_on(async {
            let listeners = Listeners::bind(&config).await.context("cannot bind")?;
            server::serve(config, listeners, shutdown_signal()).await
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "warden-proxy stopped");
            eprintln!("warden-proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}
