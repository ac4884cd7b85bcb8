//! `leasehold-bench`: a RESP load generator (the default) and `compare`, which
//! runs the workloads against Redis 7 and Leasehold and writes a table.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leasehold_bench::cli::{self, RunArgs};
use leasehold_bench::compare::{self, CompareArgs};

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-bench",
    version,
    about = "RESP load generator; `compare` runs Redis 7 and Leasehold side by side",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Runs every workload against Redis and Leasehold in alternation and
    /// writes docs/benchmarks.md.
    Compare(CompareArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.sub {
        Some(Sub::Compare(args)) => compare::main(&args).map(|()| ExitCode::SUCCESS),
        None => run(&cli.run),
    };
    result.unwrap_or_else(|e| {
        eprintln!("leasehold-bench: {e}");
        ExitCode::from(2)
    })
}

fn run(args: &RunArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let report = cli::run(args)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    if report.errors > 0 && !args.allow_errors {
        eprintln!(
            "leasehold-bench: {} error replies (pass --allow-errors to accept them)",
            report.errors
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
