//! Pinned limits: the parameters an operator fixes for every key under a
//! prefix, so that a caller cannot widen its own limit.
//!
//! Rate-limit commands carry their parameters with every call, so without a
//! pin whoever can call `TOKENRETURN key 1000000 1 60000 500000` on a bucket
//! of capacity 10 can then lease 500,000 tokens. A pin names a key prefix and
//! the one policy its keys accept; a call on such a key with any other
//! parameters (or another algorithm) is refused before it touches the state.
//! The longest matching prefix decides.
//!
//! Two sets exist: pins from the configuration (`rate-limit-pins`, fixed for
//! the process's life, the same on every node that shares the file) and pins
//! set at run time (`LH.PIN`, replicated and persisted like any write). A
//! run-time pin cannot replace or remove a configured one.
//!
//! Written as the words `<prefix> TOKENBUCKET <capacity> <rate> <period_ms>`,
//! `<prefix> SLIDINGWINDOW <limit> <window_ms>` or `<prefix> GCRA
//! <max_burst> <count_per_period> <period_ms>`, in `LH.PIN` and in the
//! configuration alike.

use super::{gcra, sliding_window, token_bucket};

/// The one policy a pinned prefix accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// TOKENLEASE and TOKENRETURN with exactly these parameters.
    TokenBucket(token_bucket::Policy),
    /// SLIDINGWINDOW with exactly these parameters.
    SlidingWindow(sliding_window::Policy),
    /// CL.THROTTLE and GCRA with this burst and emission interval, however
    /// written (`CL.THROTTLE k 15 30 60` equals `GCRA 15 30 60000`).
    Gcra(gcra::Policy),
}

impl Pinned {
    /// Whether a call's policy is this one.
    pub fn accepts(&self, call: &Pinned) -> bool {
        match (self, call) {
            (Pinned::Gcra(a), Pinned::Gcra(b)) => {
                // Same emission interval T = interval / units_per_ms ms.
                a.max_burst == b.max_burst
                    && a.interval.checked_mul(b.units_per_ms as u128)
                        == b.interval.checked_mul(a.units_per_ms as u128)
            }
            (a, b) => a == b,
        }
    }

    /// The words after the prefix, as [`parse`] reads them.
    pub fn words(&self) -> Vec<String> {
        match *self {
            Pinned::TokenBucket(p) => vec![
                "TOKENBUCKET".into(),
                p.capacity.to_string(),
                p.rate.to_string(),
                p.period_ms.to_string(),
            ],
            Pinned::SlidingWindow(p) => vec![
                "SLIDINGWINDOW".into(),
                p.limit.to_string(),
                p.window_ms.to_string(),
            ],
            Pinned::Gcra(p) => vec![
                "GCRA".into(),
                p.max_burst.to_string(),
                p.units_per_ms.to_string(),
                p.interval.to_string(),
            ],
        }
    }
}

/// One pin: a key prefix and its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Keys starting with these bytes are pinned (empty: every key).
    pub prefix: Vec<u8>,
    /// The policy they accept.
    pub policy: Pinned,
}

/// Why words do not make a pin (the text of the error reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinError(pub String);

/// Reads a pin from its words: a prefix, a kind (any case) and the kind's
/// integers, each at least 1 (`max_burst` at least 0).
///
/// # Errors
/// A [`PinError`] naming what is wrong: an unknown kind, the wrong number of
/// integers, one not an integer or out of range.
pub fn parse(words: &[&[u8]]) -> Result<Pin, PinError> {
    let err = |m: &str| PinError(m.to_string());
    let (prefix, kind, nums) = match words {
        [prefix, kind, nums @ ..] => (prefix, kind, nums),
        _ => return Err(err("a pin is <prefix> <kind> <parameters...>")),
    };
    let kind = String::from_utf8_lossy(kind).to_ascii_uppercase();
    let want = match kind.as_str() {
        "TOKENBUCKET" | "GCRA" => 3,
        "SLIDINGWINDOW" => 2,
        _ => return Err(err("unknown pin kind (TOKENBUCKET, SLIDINGWINDOW or GCRA)")),
    };
    if nums.len() != want {
        return Err(PinError(format!(
            "{kind} pins take {want} integer parameters"
        )));
    }
    let mut n = [0u64; 3];
    for (i, w) in nums.iter().enumerate() {
        let v = std::str::from_utf8(w)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&v| v <= i64::MAX as u64)
            .ok_or_else(|| err("pin parameters must be non-negative integers"))?;
        let may_be_zero = kind == "GCRA" && i == 0;
        if v == 0 && !may_be_zero {
            return Err(err("pin parameters must be positive"));
        }
        n[i] = v;
    }
    let policy = match kind.as_str() {
        "TOKENBUCKET" => Pinned::TokenBucket(token_bucket::Policy {
            capacity: n[0],
            rate: n[1],
            period_ms: n[2],
        }),
        "SLIDINGWINDOW" => Pinned::SlidingWindow(sliding_window::Policy {
            limit: n[0],
            window_ms: n[1],
        }),
        _ => {
            let p = gcra::Policy {
                units_per_ms: n[1],
                interval: n[2] as u128,
                max_burst: n[0],
            };
            p.dvt()
                .ok_or_else(|| err("pin parameters exceed the supported time range"))?;
            Pinned::Gcra(p)
        }
    };
    Ok(Pin {
        prefix: prefix.to_vec(),
        policy,
    })
}

/// Reads the configuration's list: pins separated by `;`, each as words
/// separated by spaces (a prefix holds no space or `;` there).
///
/// # Errors
/// The first bad pin's [`PinError`], with its position.
pub fn parse_list(text: &str) -> Result<Vec<Pin>, PinError> {
    text.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
        .map(|(i, p)| {
            let words: Vec<&[u8]> = p.split_whitespace().map(str::as_bytes).collect();
            parse(&words).map_err(|e| PinError(format!("pin {} ('{p}'): {}", i + 1, e.0)))
        })
        .collect()
}

/// A call refused by a pin: the key's prefix and what it is pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The matching prefix.
    pub prefix: Vec<u8>,
    /// The policy it accepts.
    pub policy: Pinned,
}

/// Why a run-time pin change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeError {
    /// The prefix is pinned by the configuration.
    Configured,
}

/// A shard's pins: the configured ones and the run-time ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    configured: Vec<Pin>,
    runtime: Vec<Pin>,
}

impl Pins {
    /// Pins with `configured` fixed.
    pub fn new(configured: Vec<Pin>) -> Pins {
        Pins {
            configured,
            runtime: Vec::new(),
        }
    }

    /// Whether no pin exists (the common case: one test per call).
    pub fn is_empty(&self) -> bool {
        self.configured.is_empty() && self.runtime.is_empty()
    }

    /// The pin with the longest prefix of `key`, if any.
    pub fn for_key(&self, key: &[u8]) -> Option<&Pin> {
        self.configured
            .iter()
            .chain(&self.runtime)
            .filter(|p| key.starts_with(&p.prefix))
            .max_by_key(|p| p.prefix.len())
    }

    /// Checks a call on `key` with policy `call`.
    ///
    /// # Errors
    /// [`Refused`] when the key's pin accepts another policy.
    pub fn check(&self, key: &[u8], call: &Pinned) -> Result<(), Refused> {
        if self.is_empty() {
            return Ok(());
        }
        match self.for_key(key) {
            Some(pin) if !pin.policy.accepts(call) => Err(Refused {
                prefix: pin.prefix.clone(),
                policy: pin.policy,
            }),
            _ => Ok(()),
        }
    }

    /// Sets a run-time pin (replacing one with the same prefix).
    ///
    /// # Errors
    /// [`ChangeError::Configured`] when the configuration pins that prefix.
    pub fn set(&mut self, pin: Pin) -> Result<(), ChangeError> {
        if self.configured.iter().any(|p| p.prefix == pin.prefix) {
            return Err(ChangeError::Configured);
        }
        match self.runtime.iter_mut().find(|p| p.prefix == pin.prefix) {
            Some(p) => *p = pin,
            None => self.runtime.push(pin),
        }
        Ok(())
    }

    /// Removes the run-time pin of `prefix`; whether there was one.
    ///
    /// # Errors
    /// [`ChangeError::Configured`] when the configuration pins that prefix.
    pub fn remove(&mut self, prefix: &[u8]) -> Result<bool, ChangeError> {
        if self.configured.iter().any(|p| p.prefix == prefix) {
            return Err(ChangeError::Configured);
        }
        let before = self.runtime.len();
        self.runtime.retain(|p| p.prefix != prefix);
        Ok(self.runtime.len() < before)
    }

    /// Removes every run-time pin (a full sync's payload starts so).
    pub fn clear_runtime(&mut self) {
        self.runtime.clear();
    }

    /// The run-time pins, in the order they were set.
    pub fn runtime(&self) -> &[Pin] {
        &self.runtime
    }

    /// Every pin with whether it is configured, configured ones first.
    pub fn all(&self) -> impl Iterator<Item = (&Pin, bool)> {
        let configured = self.configured.iter().map(|p| (p, true));
        configured.chain(self.runtime.iter().map(|p| (p, false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(text: &str) -> Pin {
        let words: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
        parse(&words).unwrap()
    }

    fn bucket(capacity: u64, rate: u64, period_ms: u64) -> Pinned {
        Pinned::TokenBucket(token_bucket::Policy {
            capacity,
            rate,
            period_ms,
        })
    }

    #[test]
    fn the_longest_prefix_decides_and_other_parameters_are_refused() {
        let mut pins = Pins::new(vec![pin("rl: TOKENBUCKET 10 1 1000")]);
        pins.set(pin("rl:vip: TOKENBUCKET 100 10 1000")).unwrap();
        assert_eq!(pins.check(b"rl:a", &bucket(10, 1, 1000)), Ok(()));
        let refused = pins
            .check(b"rl:a", &bucket(1_000_000, 1, 60_000))
            .unwrap_err();
        assert_eq!(refused.prefix, b"rl:");
        assert_eq!(refused.policy, bucket(10, 1, 1000));
        assert_eq!(pins.check(b"rl:vip:a", &bucket(100, 10, 1000)), Ok(()));
        assert!(pins.check(b"rl:vip:a", &bucket(10, 1, 1000)).is_err());
        assert_eq!(pins.check(b"other", &bucket(1, 1, 1)), Ok(()));
        let window = Pinned::SlidingWindow(sliding_window::Policy {
            limit: 10,
            window_ms: 1000,
        });
        assert!(pins.check(b"rl:a", &window).is_err(), "another algorithm");
    }

    #[test]
    fn gcra_pins_compare_the_emission_interval_however_written() {
        let pins = Pins::new(vec![pin("g: GCRA 15 30 60000")]);
        let cell = Pinned::Gcra(gcra::cell_policy(15, 30, 60));
        let redis = Pinned::Gcra(gcra::gcra_policy(15, 30, 60_000_000).unwrap());
        assert_eq!(pins.check(b"g:1", &cell), Ok(()));
        assert_eq!(pins.check(b"g:1", &redis), Ok(()));
        let wider = Pinned::Gcra(gcra::cell_policy(15, 30, 30));
        assert!(pins.check(b"g:1", &wider).is_err());
        let burstier = Pinned::Gcra(gcra::cell_policy(16, 30, 60));
        assert!(pins.check(b"g:1", &burstier).is_err());
    }

    #[test]
    fn configured_pins_cannot_be_changed_at_run_time() {
        let mut pins = Pins::new(vec![pin("rl: TOKENBUCKET 10 1 1000")]);
        assert_eq!(
            pins.set(pin("rl: TOKENBUCKET 99 1 1000")),
            Err(ChangeError::Configured)
        );
        assert_eq!(pins.remove(b"rl:"), Err(ChangeError::Configured));
        pins.set(pin("x: SLIDINGWINDOW 5 1000")).unwrap();
        pins.set(pin("x: SLIDINGWINDOW 6 1000")).unwrap();
        assert_eq!(pins.runtime().len(), 1, "same prefix replaced");
        assert_eq!(pins.remove(b"x:"), Ok(true));
        assert_eq!(pins.remove(b"x:"), Ok(false));
        pins.set(pin("y: GCRA 0 1 1000")).unwrap();
        pins.clear_runtime();
        assert_eq!(pins.all().count(), 1);
    }

    #[test]
    fn words_round_trip_and_bad_words_say_why() {
        for text in [
            "rl: TOKENBUCKET 10 1 1000",
            "w SLIDINGWINDOW 5 60000",
            "g GCRA 0 30 60000",
        ] {
            let p = pin(text);
            let mut words = vec![String::from_utf8(p.prefix.clone()).unwrap()];
            words.extend(p.policy.words());
            assert_eq!(words.join(" "), text);
        }
        let bad = |t: &str| {
            let words: Vec<&[u8]> = t.split(' ').map(str::as_bytes).collect();
            parse(&words).unwrap_err().0
        };
        assert_eq!(
            bad("rl: LEAKY 1 2"),
            "unknown pin kind (TOKENBUCKET, SLIDINGWINDOW or GCRA)"
        );
        assert_eq!(
            bad("rl: TOKENBUCKET 10 1"),
            "TOKENBUCKET pins take 3 integer parameters"
        );
        assert_eq!(
            bad("rl: SLIDINGWINDOW 0 10"),
            "pin parameters must be positive"
        );
        assert_eq!(
            bad("rl: GCRA 1 x 10"),
            "pin parameters must be non-negative integers"
        );
        assert_eq!(bad("rl:"), "a pin is <prefix> <kind> <parameters...>");
        assert_eq!(
            parse_list("a TOKENBUCKET 1 1 1; b GCRA 1 1").unwrap_err().0,
            "pin 2 ('b GCRA 1 1'): GCRA pins take 3 integer parameters"
        );
        assert_eq!(parse_list(" a TOKENBUCKET 1 1 1 ; ").unwrap().len(), 1);
        assert_eq!(parse_list("").unwrap(), vec![]);
    }
}
