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
    pub file: PathBuf,
}

pub fn run(args: RunArgs) -> Result<()> {
    roadseg::daemon::run::run(args.config.as_deref())
}

pub fn check_config(args: CheckConfigArgs) -> Result<()> {
    let summary = roadseg::daemon::run::check_config(&args.file)?;
    print!("{summary}");
    Ok(())
}
