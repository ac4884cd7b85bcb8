//! Compare mode (in progress).

/// Flags of `leasehold-bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {}

/// Runs the comparison.
///
/// # Errors
/// Any failure.
pub fn main(_args: &CompareArgs) -> Result<(), Box<dyn std::error::Error>> {
    Ok(())
}
