//! Download progress: a bar on a terminal, log lines otherwise (a daemon's
//! journal gets a line every few seconds, not a redraw per chunk).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const REDRAW: Duration = Duration::from_millis(200);
const LOG_EVERY: Duration = Duration::from_secs(10);

pub(super) struct Progress {
    file: String,
    model: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_shown: Instant,
    terminal: bool,
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

impl Progress {
    pub fn new(file: &str, model: &str, total: Option<u64>) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let size = total.map_or("size unknown".to_string(), mb);
        tracing::info!("downloading {file} ({size}) of {model} from the Hugging Face Hub");
        let now = Instant::now();
        Progress { file: file.into(), model: model.into(), total, done: 0, started: now, last_shown: now, terminal }
    }

    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        let every = if self.terminal { REDRAW } else { LOG_EVERY };
        if self.last_shown.elapsed() >= every {
            self.last_shown = Instant::now();
            self.show();
        }
    }

    /// How much has arrived, for messages: `12.3 of 27.4 MB`.
    pub fn amount(&self) -> String {
        match self.total {
            Some(t) => format!("{} of {}", mb(self.done), mb(t)),
            None => mb(self.done),
        }
    }

    fn rate(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        format!("{}/s", mb((self.done as f64 / secs) as u64))
    }

    fn show(&self) {
        let percent = self.total.filter(|&t| t > 0).map(|t| 100.0 * self.done as f64 / t as f64);
        if self.terminal {
            const WIDTH: usize = 30;
            let filled = percent.map_or(0, |p| ((p / 100.0) * WIDTH as f64) as usize).min(WIDTH);
            let bar = format!("{}{}", "#".repeat(filled), "-".repeat(WIDTH - filled));
            let pct = percent.map_or(String::new(), |p| format!("{p:5.1}% "));
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{} [{bar}] {pct}{}  {}   ", self.file, self.amount(), self.rate());
            let _ = err.flush();
        } else {
            let pct = percent.map_or(String::new(), |p| format!(" ({p:.0}%)"));
            tracing::info!("{}: {}{pct} at {}", self.file, self.amount(), self.rate());
        }
    }

    pub fn finish(&mut self) {
        if self.terminal {
            self.show();
            let _ = writeln!(std::io::stderr());
        }
        tracing::info!("downloaded {} of {} ({} in {:.1} s)", self.file, self.model, mb(self.done), self.started.elapsed().as_secs_f64());
    }

    /// Ends the bar's line so the error that follows starts on its own.
    pub fn abandon(&mut self) {
        if self.terminal {
            let _ = writeln!(std::io::stderr());
        }
    }
}
