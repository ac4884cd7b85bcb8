//! A real Leasehold server in process on 127.0.0.1, for the tests that need
//! the ledger itself (pub/sub, cluster mode) rather than the fake.

use std::sync::Arc;

use leasehold_server::config::Config;
use leasehold_server::ServerHandle;

/// A server on a port the system picks (`addr` says which), 2 threads, no
/// snapshots, its files in a scratch directory; a cluster node (no
/// topology yet) when `cluster`.
pub fn server(cluster: bool) -> ServerHandle {
    server_with(|c| c.cluster.enabled = cluster)
}

/// [`server`] (not a cluster node) with `change` made to its settings.
pub fn server_with(change: impl FnOnce(&mut Config)) -> ServerHandle {
    let mut c = Config::default();
    c.net.bind = "127.0.0.1".into();
    c.net.port = 0;
    c.shards.threads = 2;
    c.persistence.save = String::new();
    c.persistence.dir = leasehold_testkit::scratch_dir().display().to_string();
    change(&mut c);
    leasehold_server::start(c, Arc::new(leasehold_server::clock::SystemClock::new()))
        .expect("a server on 127.0.0.1")
}
