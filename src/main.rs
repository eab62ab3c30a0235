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
    /// On failure, print the error's whole cause chain, one cause a line
    /// (by default: one line, each cause said once).
    #[arg(short, long, global = true)]
    verbose: bool,
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

/// `err` and its causes on one line, `outer: inner: ...`, leaving out a
/// cause whose text the line already holds (most messages quote their
/// cause, which is also kept as their `source()`).
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// `err` and every cause in its chain, one a line.
fn cause_chain(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    text
}

/// Whether `err` is (caused by) a bad configuration, as opposed to a
/// runtime failure.
fn is_config_error(err: &anyhow::Error) -> bool {
    #[cfg(feature = "video")]
    if err.chain().any(|e| {
        e.is::<roadseg::daemon::config::ConfigError>()
            || e.downcast_ref::<roadseg::daemon::run::DaemonError>().is_some_and(|d| d.is_config())
    }) {
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
    #[cfg(feature = "video")]
    roadseg::video::headless::quiet_headless_gl();
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
            let shown = if cli.verbose { cause_chain(&e) } else { one_line(&e) };
            eprintln!("roadseg: error: {shown}");
            if let Some(hub) = e.chain().find_map(|c| c.downcast_ref::<roadseg::hub::HubError>()) {
                // A wrong name (78) differs from a Hub that cannot be reached (69): systemd retries only the second.
                std::process::ExitCode::from(hub.exit_code())
            } else if is_config_error(&e) {
                std::process::ExitCode::from(EXIT_CONFIG)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}
