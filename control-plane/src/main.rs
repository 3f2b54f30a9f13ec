//! `warden-control-plane`: serve the governance API, or manage API keys from
//! the command line (the bootstrap path: the first management key comes from
//! `keys create`).
//!
//! `main` only parses the command line and configuration, sets up logging,
//! binds the listener and calls into the library.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use chrono::Utc;
use clap::{Args, Parser, Subcommand};
use warden_control_plane::app::{self, AppState};
use warden_control_plane::auth::{Audience, Environment, Permission, Scope, parse_list};
use warden_control_plane::config::{
    Config, ENV_DATABASE_URL, ENV_LISTEN, ENV_REDIS_URL, LogFormat, RawConfig,
};
use warden_control_plane::injector;
use warden_control_plane::keys::{self, Expiry, Grace, KeySpec};
use warden_control_plane::store::{self, KeyId, Page};

/// Every evaluation allocates its input, its masked copies and its stored
/// row: glibc's allocator was 17% of the server's samples under
/// `scripts/load-evaluate`, and mimalloc's per-thread free lists cut it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "warden-control-plane",
    version,
    about = "Warden's control plane: the governance API and key management"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API.
    Serve(ServeArgs),
    /// Manage API keys directly in the database.
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Args)]
struct DbArgs {
    /// `sqlite:PATH` or `postgres://…` [env: WARDEN_DATABASE_URL; default: SQLite in WARDEN_DATA_DIR]
    #[arg(long)]
    database_url: Option<String>,
    /// A TOML configuration file.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on [env: WARDEN_LISTEN; default: 127.0.0.1:8080].
    #[arg(long)]
    listen: Option<String>,
    /// Redis for a rate limiter shared by replicas [env: WARDEN_REDIS_URL].
    #[arg(long)]
    redis_url: Option<String>,
    /// Serve the sidecar injector (a Kubernetes mutating admission webhook)
    /// with TLS on this address [env: WARDEN_INJECTOR_LISTEN; default: off].
    #[arg(long)]
    injector_listen: Option<String>,
    /// The injector's PEM certificate chain [env: WARDEN_INJECTOR_TLS_CERT].
    #[arg(long)]
    injector_tls_cert: Option<String>,
    /// The injector's PEM private key [env: WARDEN_INJECTOR_TLS_KEY].
    #[arg(long)]
    injector_tls_key: Option<String>,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key; prints the plaintext key and nothing else on stdout.
    Create {
        /// The organization (created if missing).
        #[arg(long)]
        org: String,
        /// 1-50 characters.
        #[arg(long)]
        name: String,
        /// `management` or `harness`.
        #[arg(long)]
        audience: String,
        /// `all` or a comma-separated list [default: all for management keys].
        #[arg(long)]
        permissions: Option<String>,
        /// `full_access` or a comma-separated list.
        #[arg(long, default_value = "full_access")]
        scopes: String,
        /// `production` or `test`.
        #[arg(long, default_value = "production")]
        environment: String,
        /// `30d`, `90d`, `180d`, `1y` or `never`.
        #[arg(long, default_value = "90d")]
        expires: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List an organization's keys (no secrets).
    List {
        #[arg(long)]
        org: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Rotate a key; prints the new plaintext key.
    Rotate {
        key_id: String,
        /// `immediate`, `1h`, `24h` or `7d`.
        #[arg(long, default_value = "24h")]
        grace: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a key at once.
    Revoke {
        key_id: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Defaults < file < environment < flags.
fn load_config(db: &DbArgs, flags: RawConfig) -> anyhow::Result<Config> {
    let file = match &db.config {
        Some(path) => RawConfig::from_toml(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )?,
        None => RawConfig::default(),
    };
    let flags = RawConfig {
        database_url: db.database_url.clone(),
        ..flags
    };
    Ok(Config::from_raw(
        file.overlay(RawConfig::from_env(&env_lookup))
            .overlay(flags),
    )?)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
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
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(
        &args.db,
        RawConfig {
            listen: args.listen,
            redis_url: args.redis_url,
            injector_listen: args.injector_listen,
            injector_tls_cert: args.injector_tls_cert,
            injector_tls_key: args.injector_tls_key,
            ..RawConfig::default()
        },
    )?;
    init_logging(config.log_format);
    tracing::debug!(?config, "configuration");
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {} (set {ENV_LISTEN} or --listen)", config.listen))?;
    let injector = match &config.injector {
        Some(inj) => {
            let cert =
                std::sync::Arc::new(injector::ReloadingCert::load(&inj.tls_cert, &inj.tls_key)?);
            let listener = tokio::net::TcpListener::bind(inj.listen)
                .await
                .with_context(|| format!("binding the injector on {}", inj.listen))?;
            Some((inj.clone(), cert, listener))
        }
        None => None,
    };
    let state = AppState::open(config).await.context(format!(
        "opening the database ({ENV_DATABASE_URL}) or Redis ({ENV_REDIS_URL})"
    ))?;
    // One signal stops both servers.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        stop_tx.send_replace(true);
    });
    let metrics = state.metrics.clone();
    let injector = injector.map(|(inj, cert, listener)| {
        tokio::spawn(injector::serve(
            inj.sidecar,
            metrics,
            cert,
            inj.tls_reload,
            listener,
            stopped(),
        ))
    });
    let served = app::serve(state, listener, stopped()).await;
    if let Some(task) = injector {
        task.await.context("the injector task")??;
    }
    served
}

async fn keys_command(cmd: KeysCommand) -> anyhow::Result<()> {
    let db = match &cmd {
        KeysCommand::Create { db, .. }
        | KeysCommand::List { db, .. }
        | KeysCommand::Rotate { db, .. }
        | KeysCommand::Revoke { db, .. } => db,
    };
    let config = load_config(db, RawConfig::default())?;
    init_logging(LogFormat::Text);
    if let Some(path) = config.sqlite_path()
        && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let store = store::open(&config.database_url)
        .await
        .context("opening the database")?;
    let now = Utc::now();
    let mut out = std::io::stdout().lock();
    match cmd {
        KeysCommand::Create {
            org,
            name,
            audience,
            permissions,
            scopes,
            environment,
            expires,
            ..
        } => {
            let audience =
                Audience::parse(&audience).context("--audience must be management or harness")?;
            let permissions = match (audience, permissions.as_deref()) {
                (Audience::Harness, None) => Vec::new(),
                (Audience::Harness, Some(_)) => bail!("harness keys carry no permissions"),
                (Audience::Management, p) => parse_list(
                    p.unwrap_or("all"),
                    "all",
                    Permission::ALL,
                    Permission::parse,
                )
                .map_err(|e| anyhow::anyhow!("--permissions: {e}"))?,
            };
            let scopes = parse_list(&scopes, "all", Scope::ALL, Scope::parse)
                .map_err(|e| anyhow::anyhow!("--scopes: {e}"))?;
            let n = name.chars().count();
            if !(1..=50).contains(&n) {
                bail!("--name must be 1 to 50 characters");
            }
            let spec = KeySpec {
                name,
                audience,
                environment: Environment::parse(&environment)
                    .context("--environment must be production or test")?,
                permissions,
                scopes,
                expiry: Expiry::parse(&expires)
                    .context("--expires must be 30d, 90d, 180d, 1y or never")?,
                agent_id: None,
                plaintext: None,
            };
            let org = store.ensure_org(&org, now).await?;
            let issued = keys::create(store.as_ref(), org.id, None, spec, now)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            writeln!(out, "{}", issued.plaintext)?;
        }
        KeysCommand::List { org, .. } => {
            let Some(org) = store.org_by_name(&org).await? else {
                bail!("no organization named `{org}`");
            };
            let (rows, _) = store
                .list_keys(
                    org.id,
                    Page {
                        page: 1,
                        limit: 10_000,
                    },
                )
                .await?;
            writeln!(
                out,
                "{:36}  {:28}  {:10}  {:8}  {:25}  name",
                "id", "key", "audience", "status", "expires"
            )?;
            for k in rows {
                let expires = k
                    .expires_at
                    .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339());
                let status = serde_json::to_value(k.status(now))?;
                writeln!(
                    out,
                    "{:36}  {:28}  {:10}  {:8}  {:25}  {}",
                    k.id.0,
                    &k.display[..k.display.len().min(28)],
                    k.audience,
                    status.as_str().unwrap_or(""),
                    expires,
                    k.name
                )?;
            }
        }
        KeysCommand::Rotate { key_id, grace, .. } => {
            let grace = Grace::parse(&grace).context("--grace must be immediate, 1h, 24h or 7d")?;
            let key = find(store.as_ref(), &key_id).await?;
            let issued = keys::rotate(store.as_ref(), &key, None, grace, now)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            writeln!(out, "{}", issued.plaintext)?;
        }
        KeysCommand::Revoke { key_id, .. } => {
            let key = find(store.as_ref(), &key_id).await?;
            keys::revoke(store.as_ref(), &key, None, now)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            writeln!(out, "revoked {}", key.id.0)?;
        }
    }
    Ok(())
}

async fn find(store: &dyn store::Store, key_id: &str) -> anyhow::Result<store::ApiKey> {
    let id =
        uuid::Uuid::parse_str(key_id).context("KEY_ID must be a key's UUID (see `keys list`)")?;
    store
        .key_any_org(KeyId(id))
        .await?
        .context("no key with that id")
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Keys(cmd) => keys_command(cmd).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
