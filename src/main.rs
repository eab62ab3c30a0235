mod cli;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Road segmentation of dashcam and road-camera video with SegFormer.
#[derive(Parser, Debug)]
#[command(name = "roadseg", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Segment images (or ready-made pixel values) and write logits, class maps, overlays.
    Infer(cli::infer::InferArgs),
    /// Per-class IoU and mIoU on a labelled image folder.
    Eval(cli::eval::EvalArgs),
    /// Time full frames (preprocess + model + postprocess) and print one JSON line.
    Bench(cli::bench::BenchArgs),
    /// Segment a video file (or URI) into an annotated MP4, every frame in order.
    #[cfg(feature = "video")]
    Process(cli::process::ProcessArgs),
    /// Render a deterministic synthetic drive (MP4 + ground-truth road masks).
    #[cfg(feature = "video")]
    Synth(cli::synth::SynthArgs),
    /// Run the daemon: every configured stream, until SIGTERM (SIGHUP reloads).
    #[cfg(feature = "video")]
    Run(cli::run::RunArgs),
    /// Check a daemon configuration file (and the model folder) and describe it.
    #[cfg(feature = "video")]
    CheckConfig(cli::run::CheckConfigArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("ROADSEG_LOG").unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Infer(a) => cli::infer::run(a),
        Command::Eval(a) => cli::eval::run(a),
        Command::Bench(a) => cli::bench::run(a),
        #[cfg(feature = "video")]
        Command::Process(a) => cli::process::run(a),
        #[cfg(feature = "video")]
        Command::Run(a) => cli::run::run(a),
        #[cfg(feature = "video")]
        Command::CheckConfig(a) => cli::run::check_config(a),
        #[cfg(feature = "video")]
        Command::Synth(a) => cli::synth::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roadseg: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
