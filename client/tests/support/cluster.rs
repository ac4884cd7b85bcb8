//! Three real Leasehold nodes in cluster mode, in process on 127.0.0.1
//! (three groups of one primary each, their topology pushed with
//! `LH.TOPOLOGY SET`), and a cluster client seeded with the first.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_client::slot::key_slot;
use leasehold_client::{Client, ClientConfig};
use leasehold_server::ServerHandle;
use leasehold_testkit::{cluster_topology as topology, publish_topology as publish};

/// The three groups' slot ranges at version 1.
pub const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

pub struct Cluster {
    pub nodes: Vec<ServerHandle>,
    pub ports: Vec<u16>,
}

/// Three nodes owning [`RANGES`] at topology version 1.
pub fn cluster() -> Cluster {
    let nodes: Vec<ServerHandle> = (0..3).map(|_| super::server::server(true)).collect();
    let ports: Vec<u16> = nodes.iter().map(|n| n.addr.port()).collect();
    publish(
        &ports,
        1,
        &topology(
            1,
            &ports,
            &["\"0-5460\"", "\"5461-10922\"", "\"10923-16383\""],
        ),
    );
    Cluster { nodes, ports }
}

impl Cluster {
    pub fn addr(&self, group: usize) -> SocketAddr {
        self.nodes[group].addr
    }

    /// A client seeded with node 0 only.
    pub fn client(&self) -> Client {
        let mut config = ClientConfig::cluster(vec![self.addr(0)]);
        // A debug build on a shared 2-core machine.
        config.lease_deadline = Duration::from_millis(100);
        config.call_deadline = Duration::from_millis(500);
        Client::new(config)
    }

    /// The group whose range holds `slot`.
    pub fn group_of(slot: u16) -> usize {
        RANGES
            .iter()
            .position(|&(a, b)| (a..=b).contains(&slot))
            .expect("every slot is in a range")
    }
}

/// A key (`<prefix><n>`) whose hash slot is in `first..=last`.
pub fn key_in(prefix: &str, (first, last): (u16, u16)) -> String {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| (first..=last).contains(&key_slot(k.as_bytes())))
        .unwrap()
}
