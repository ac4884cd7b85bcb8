//! Keys to Redis Cluster hash slots, as the cluster client routes them
//! (the codec crate's [`leasehold_protocol::slot`]).

pub use leasehold_protocol::slot::{crc16, key_slot, SLOTS};
