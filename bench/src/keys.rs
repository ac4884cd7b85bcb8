//! Key distributions: which key index each request uses.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution as _, Uniform, Zipf};

/// How key indexes in `[0, keyspace)` are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf with the given exponent: key 0 is the hottest (`zipf:0.99`).
    Zipf(f64),
    /// 0, 1, 2, ... shared by all connections, wrapping at the keyspace
    /// (fills every key exactly once when requests = keyspace).
    Sequential,
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "sequential" => Ok(Distribution::Sequential),
            _ => {
                let e = s.strip_prefix("zipf:").ok_or_else(|| {
                    format!("unknown distribution {s:?} (uniform, sequential, zipf:<exponent>)")
                })?;
                let e: f64 = e.parse().map_err(|_| format!("bad Zipf exponent {e:?}"))?;
                if !(e.is_finite() && e > 0.0) {
                    return Err(format!("Zipf exponent must be > 0, got {e}"));
                }
                Ok(Distribution::Zipf(e))
            }
        }
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Zipf(e) => write!(f, "zipf:{e}"),
            Distribution::Sequential => write!(f, "sequential"),
        }
    }
}

/// Draws key indexes for one connection.
#[derive(Debug)]
pub struct KeyGen {
    rng: SmallRng,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Uniform(Uniform<u64>),
    Zipf(Zipf<f64>),
    Sequential { next: Arc<AtomicU64>, keyspace: u64 },
}

impl KeyGen {
    /// A generator over `[0, keyspace)`; `seed` makes runs repeatable and
    /// differs per connection; `shared` is the sequential cursor all
    /// connections of a run share.
    ///
    /// # Panics
    /// If `keyspace` is 0.
    pub fn new(dist: Distribution, keyspace: u64, seed: u64, shared: Arc<AtomicU64>) -> KeyGen {
        assert!(keyspace > 0, "keyspace must be at least 1");
        let kind = match dist {
            Distribution::Uniform => {
                Kind::Uniform(Uniform::new(0, keyspace).expect("non-empty range"))
            }
            Distribution::Zipf(e) => {
                Kind::Zipf(Zipf::new(keyspace as f64, e).expect("valid Zipf parameters"))
            }
            Distribution::Sequential => Kind::Sequential {
                next: shared,
                keyspace,
            },
        };
        KeyGen {
            rng: SmallRng::seed_from_u64(seed),
            kind,
        }
    }

    /// The next key index, in `[0, keyspace)`.
    #[inline]
    pub fn next_key(&mut self) -> u64 {
        match &self.kind {
            Kind::Uniform(u) => u.sample(&mut self.rng),
            // Zipf yields ranks 1..=n as floats.
            Kind::Zipf(z) => z.sample(&mut self.rng) as u64 - 1,
            Kind::Sequential { next, keyspace } => next.fetch_add(1, Ordering::Relaxed) % keyspace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(d: Distribution, n: u64) -> KeyGen {
        KeyGen::new(d, n, 1, Arc::new(AtomicU64::new(0)))
    }

    #[test]
    fn parse_and_display() {
        assert_eq!(
            "uniform".parse::<Distribution>().unwrap(),
            Distribution::Uniform
        );
        assert_eq!(
            "zipf:0.99".parse::<Distribution>().unwrap(),
            Distribution::Zipf(0.99)
        );
        assert_eq!(Distribution::Zipf(0.99).to_string(), "zipf:0.99");
        assert!("zipf:0".parse::<Distribution>().is_err());
        assert!("zipf:x".parse::<Distribution>().is_err());
        assert!("gauss".parse::<Distribution>().is_err());
    }

    #[test]
    fn zipf_stays_in_bounds_and_favours_key_zero() {
        for n in [1u64, 2, 10, 100_000] {
            let mut g = gen(Distribution::Zipf(0.99), n);
            let mut zeros = 0;
            for _ in 0..20_000 {
                let k = g.next_key();
                assert!(k < n, "{k} >= {n}");
                zeros += (k == 0) as u32;
            }
            if n == 100_000 {
                // P(rank 1) = 1 / H(n, 0.99), about 1/12.5 for n = 100k.
                assert!(
                    (1_000..2_400).contains(&zeros),
                    "key 0 drawn {zeros} times in 20000"
                );
            }
        }
    }

    #[test]
    fn uniform_stays_in_bounds_and_covers() {
        let mut g = gen(Distribution::Uniform, 10);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[g.next_key() as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }

    #[test]
    fn sequential_is_shared_and_wraps() {
        let shared = Arc::new(AtomicU64::new(0));
        let mut a = KeyGen::new(Distribution::Sequential, 3, 1, shared.clone());
        let mut b = KeyGen::new(Distribution::Sequential, 3, 2, shared);
        let drawn: Vec<u64> = (0..4).flat_map(|_| [a.next_key(), b.next_key()]).collect();
        assert_eq!(drawn, [0, 1, 2, 0, 1, 2, 0, 1]);
    }
}
