//! `roadseg run` and `roadseg check-config`: thin wrappers over `roadseg::daemon::run`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file (TOML), layered over /etc/roadseg/roadseg.toml and
    /// under ROADSEG__SECTION__KEY environment variables.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CheckConfigArgs {
    /// Configuration file (TOML) to check, as `run --config FILE` would read it.
    #[arg(required_unless_present = "config")]
    pub file: Option<PathBuf>,
    /// The same file, spelt as for `run`.
    #[arg(long, short, conflicts_with = "file")]
    pub config: Option<PathBuf>,
    /// Skip timing the model on the CPU (a second or two) for the summary's
    /// `CPU load:` line, which sets the streams' frame rates against it.
    #[arg(long)]
    pub no_estimate: bool,
}

pub fn run(args: RunArgs) -> Result<()> {
    Ok(roadseg::daemon::run::run(args.config.as_deref())?)
}

pub fn check_config(args: CheckConfigArgs) -> Result<()> {
    let file = args.file.or(args.config).expect("clap requires one of them");
    let summary = roadseg::daemon::run::check_config(&file, !args.no_estimate)?;
    print!("{summary}");
    Ok(())
}
