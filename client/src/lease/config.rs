//! The manager's settings and the check [`LeaseManager::new`] runs on them.
//!
//! [`LeaseManager::new`]: super::LeaseManager::new

use std::time::Duration;

use super::bucket::MAX_LEASE;

/// Lease manager settings.
///
/// The defaults: leases of 5 to 500 tokens sized
/// for 250 ms of a key's traffic, renewal when 20% of the last lease is
/// left, a sweep every 100 ms, unspent tokens returned after 2 s idle and
/// the key forgotten after 60 s.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Smallest lease (tokens). Small enough that a rare caller does not
    /// strand quota in one gateway.
    pub min_lease: u64,
    /// Largest lease (tokens); bounds over-admission at N x max_lease.
    pub max_lease: u64,
    /// Tokens asked for = observed qps x this (0.25 s: about 4 leases a second).
    pub lookahead: Duration,
    /// Renew when local tokens fall to this fraction of the last lease.
    pub low_watermark: f64,
    /// Time constant of the observed-rate average's decay.
    pub qps_decay: Duration,
    /// A key with no traffic for this long returns its unspent tokens.
    pub idle_after: Duration,
    /// A key idle this long, holding nothing, is forgotten.
    pub evict_after: Duration,
    /// How often the sweeper runs.
    pub sweep_interval: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            min_lease: 5,
            max_lease: 500,
            lookahead: Duration::from_millis(250),
            low_watermark: 0.2,
            qps_decay: Duration::from_secs(1),
            idle_after: Duration::from_secs(2),
            evict_after: Duration::from_secs(60),
            sweep_interval: Duration::from_millis(100),
        }
    }
}

impl LeaseConfig {
    /// Checks the settings a manager cannot work with: `min_lease` of at
    /// least 1 token and at most `max_lease`, `max_lease` at most 2^40 tokens
    /// (a key's local count has 42 bits) and `low_watermark` in [0, 1).
    ///
    /// # Errors
    /// The first setting out of range, as a message that starts with its
    /// name (`"min_lease: ..."`).
    pub fn validate(&self) -> Result<(), String> {
        if self.min_lease == 0 {
            return Err("min_lease: must be at least 1 token".into());
        }
        if self.min_lease > self.max_lease {
            return Err(format!(
                "min_lease: {} is above max_lease {}",
                self.min_lease, self.max_lease
            ));
        }
        if self.max_lease > MAX_LEASE {
            return Err(format!(
                "max_lease: {} is above the largest lease, 2^40 tokens",
                self.max_lease
            ));
        }
        if !(0.0..1.0).contains(&self.low_watermark) {
            return Err(format!(
                "low_watermark: {} is not a fraction in [0, 1)",
                self.low_watermark
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_lease_settings_are_refused_by_name() {
        assert_eq!(LeaseConfig::default().validate(), Ok(()));
        let bad = |f: fn(&mut LeaseConfig)| {
            let mut c = LeaseConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(bad(|c| c.min_lease = 0).starts_with("min_lease"));
        assert!(bad(|c| c.min_lease = 501).starts_with("min_lease: 501 is above max_lease 500"));
        assert!(bad(|c| c.max_lease = MAX_LEASE + 1).starts_with("max_lease"));
        assert!(bad(|c| c.low_watermark = 1.0).starts_with("low_watermark"));
        assert!(bad(|c| c.low_watermark = -0.1).starts_with("low_watermark"));
        assert!(bad(|c| c.low_watermark = f64::NAN).starts_with("low_watermark"));
    }
}
