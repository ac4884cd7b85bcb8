//! `leasehold-server`: starts the server with flags named like redis-server's.

use std::sync::Arc;

use leasehold_server::clock::SystemClock;
use leasehold_server::config::Flags;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs to stdout, with colours only when stdout is a terminal (a file or a
/// pipe gets plain text), through a filter CONFIG SET loglevel can replace.
fn init_logging(level: &str) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{fmt, reload, EnvFilter};
    let filter = EnvFilter::try_new(leasehold_server::config::log_filter(level))?;
    let (filter, handle) = reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt::layer().with_ansi(std::io::stdout().is_terminal()))
        .init();
    let reload: leasehold_server::config::LogReload = Box::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    });
    let _ = leasehold_server::config::LOG_RELOAD.set(reload);
    Ok(())
}

/// A panic on any thread ends the process, as a failed assertion ends
/// Redis: a shard thread that died would leave a server that accepts
/// connections it can no longer serve and that SIGTERM cannot stop; a dead
/// process is one that a supervisor restarts and Sentinel fails over. The
/// panic's message and place are printed first (the default hook).
fn die_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        tracing::error!("a thread panicked ({info}); the server stops");
        std::process::abort();
    }));
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Flags::parse().into_config()?;
    init_logging(&config.log.level)?;
    die_on_panic();
    let addr = format!("{}:{}", config.net.bind, config.net.port);
    let handle = leasehold_server::start(config, Arc::new(SystemClock::new())).map_err(|e| {
        match e.kind() {
            std::io::ErrorKind::InvalidData => format!("cannot load the data: {e}"),
            // A setting at fault (a TLS file, a topology): its message.
            std::io::ErrorKind::InvalidInput => e.to_string(),
            // The TLS listener's bind error names its own address.
            _ if e.to_string().starts_with("cannot listen on") => e.to_string(),
            _ => format!("cannot listen on {addr}: {e}"),
        }
    })?;
    let shared = handle.shared.clone();
    // Signals are awaited on their own small runtime so the shard threads stay
    // free of anything but their own work.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut poll = tokio::time::interval(std::time::Duration::from_millis(100));
        loop {
            let why = tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
                _ = poll.tick() => match shared.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
                    true => break,
                    false => continue,
                },
            };
            tracing::info!("{why} received, scheduling shutdown...");
            // Every command already read runs and its reply is written
            // first, so the snapshot holds all that was acknowledged; a
            // failed snapshot calls the shutdown off (the loop goes on).
            handle.request_shutdown();
        }
        Ok::<_, std::io::Error>(())
    })?;
    handle.shutdown();
    tracing::info!("Leasehold is now ready to exit, bye bye...");
    Ok(())
}
