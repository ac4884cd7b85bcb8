//! Undoing and reversing decisions, and going to the ledger directly:
//! [`LeaseManager::put_back`] returns tokens that allowed decisions took to
//! the key's local count (a caller that decided several keys for one
//! request and must charge none of them when one is denied),
//! [`LeaseManager::return_to_ledger`] gives tokens back to the ledger
//! itself (a request that reports hits it did not use), and
//! [`LeaseManager::take_from_ledger`] takes tokens from the ledger with no
//! local bucket (one call a decision: for comparisons with services that
//! work that way).

use std::time::Duration;

use super::overrides::Route;
use super::{LeaseManager, ANY_SUB};
use crate::commands::Lease;
use crate::error::Error;
use crate::policy::PolicyId;

impl LeaseManager {
    /// Puts `tokens` back into `key`'s local count under policy `id`: tokens
    /// that decisions of this manager took for the key (outcome
    /// [`Allowed`](crate::Outcome::Allowed)) and that the caller undoes. The
    /// tokens stay leased from the ledger, so nothing is minted; they go
    /// back to the ledger with the key's other unspent tokens when it idles.
    /// A key the sweeper forgot meanwhile is created again and holds them.
    ///
    /// Putting back tokens that were never taken over-admits by that many
    /// (the count saturates at 2^42 tokens). Under a widened override the
    /// tokens go to the widened bucket; under a disabled one (whose
    /// decisions took none) nothing happens. For a policy spread over
    /// sub-keys, to a random sub-key: its tokens were leased all the same,
    /// and its ledger bucket caps what comes back at its share.
    pub fn put_back(&self, id: PolicyId, key: &[u8], tokens: u64) {
        if tokens == 0 {
            return;
        }
        let route = self.route(id);
        if let Route::Disabled(_) = route {
            return;
        }
        let state = route.state().pick(ANY_SUB);
        self.with_bucket(state, key, |b| b.hot.put_back(tokens));
    }

    /// `TOKENRETURN` of `tokens` to the ledger's bucket for `key` under
    /// policy `id` (the ledger caps the balance at the policy's burst);
    /// returns the ledger's whole tokens afterwards. One ledger call, under
    /// the lease deadline; the local count is not touched, but a local
    /// block of the key (set when the ledger had none) is lifted when the
    /// ledger has tokens after the return, so they can be leased again.
    ///
    /// Under a widened override, the widened bucket's; under a disabled
    /// one, no call, and the answer is the policy's burst. For a policy
    /// spread over sub-keys, a random sub-key's bucket (which caps the
    /// balance at its share).
    ///
    /// # Errors
    /// As [`Client::token_return`](crate::Client::token_return): transport
    /// errors, the breaker open, a server error.
    pub async fn return_to_ledger(
        &self,
        id: PolicyId,
        key: &[u8],
        tokens: u64,
    ) -> Result<u64, Error> {
        let route = self.route(id);
        if let Route::Disabled(state) = route {
            return Ok(state.policy.burst);
        }
        let state = route.state().pick(ANY_SUB);
        self.inner.ledger.returns.increment(1);
        let left = self
            .inner
            .client
            .token_return(&state.ledger_key(key), state.policy.bucket(), tokens)
            .await?;
        if left > 0 {
            // A key this manager does not hold has no block to lift.
            let hash = state.map.hash(key);
            let _ = state.map.try_with(hash, key, |b| b.cold().unblock());
        }
        Ok(left)
    }

    /// `TOKENLEASE` of exactly `tokens` (all or nothing) from the ledger's
    /// bucket for `key` under policy `id`, leaving the local count alone:
    /// one ledger call under the lease deadline. `granted` is `tokens` or 0.
    /// Under a widened override, from the widened bucket; under a disabled
    /// one, no call: all `tokens` granted, `remaining` the policy's burst.
    /// For a policy spread over sub-keys, from a random sub-key's bucket
    /// (as for `return_to_ledger`).
    ///
    /// # Errors
    /// As [`Client::token_lease`](crate::Client::token_lease).
    pub async fn take_from_ledger(
        &self,
        id: PolicyId,
        key: &[u8],
        tokens: u64,
    ) -> Result<Lease, Error> {
        let route = self.route(id);
        if let Route::Disabled(state) = route {
            return Ok(Lease {
                granted: tokens,
                remaining: state.policy.burst,
                retry_after: Some(Duration::ZERO),
                reset_after: Duration::ZERO,
            });
        }
        let state = route.state().pick(ANY_SUB);
        self.inner.ledger.leases.increment(1);
        self.inner
            .client
            .token_lease(
                &state.ledger_key(key),
                state.policy.bucket(),
                tokens,
                tokens,
            )
            .await
    }
}
