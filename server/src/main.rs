//! `leasehold-server`: starts the server with flags named like redis-server's.

use std::sync::Arc;

use clap::Parser;
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

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Flags::parse().into_config()?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&config.log.level)?)
        .init();
    let addr = format!("{}:{}", config.net.bind, config.net.port);
    let handle = leasehold_server::start(config, Arc::new(SystemClock::new()))
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
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
            tokio::select! {
                _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT received, shutting down"); break }
                _ = term.recv() => { tracing::info!("SIGTERM received, shutting down"); break }
                _ = poll.tick() => if shared.shutting_down.load(std::sync::atomic::Ordering::SeqCst) { break },
            }
        }
        Ok::<_, std::io::Error>(())
    })?;
    handle.shutdown();
    tracing::info!("Leasehold is now ready to exit, bye bye...");
    Ok(())
}
