mod cli;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Road segmentation of dashcam and road-camera video with SegFormer.
#[derive(Parser, Debug)]
#[command(name = "roadseg", version, about)]
struct Cli {
    /// Log lines as text or as JSON objects (one per line, for Loki /
    /// Elasticsearch); auto = text. Also ROADSEG_LOG_FORMAT. Levels come
    /// from ROADSEG_LOG, else RUST_LOG, else info.
    #[arg(long, global = true, value_enum, env = "ROADSEG_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// sysexits' EX_CONFIG: systemd's `RestartPreventExitStatus=78` keeps a
/// daemon with a bad config from restarting in a loop.
const EXIT_CONFIG: u8 = 78;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("ROADSEG_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        // Span fields flattened so each line carries e.g. "stream" at the top level.
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}

/// Whether `err` is (caused by) a bad configuration, as opposed to a
/// runtime failure.
fn is_config_error(err: &anyhow::Error) -> bool {
    #[cfg(feature = "video")]
    if err.chain().any(|e| e.is::<roadseg::daemon::config::ConfigError>()) {
        return true;
    }
    let _ = err;
    false
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
    let cli = Cli::parse();
    init_logging(cli.log_format);
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
            if is_config_error(&e) { std::process::ExitCode::from(EXIT_CONFIG) } else { std::process::ExitCode::FAILURE }
        }
    }
}
