//! The source's bus thread: turns EOS and ERROR into exactly one handler call,
//! with an error that says what went wrong in the user's terms.

use std::sync::Arc;

use gstreamer as gst;
use gstreamer::prelude::*;

use super::{FrameHandler, Shared, SourceError, SourceProblem};
use crate::video::launch::{Failure, describe_warning};
use crate::video::uri::Scheme;

/// Posted by `Source::stop` so the thread wakes without polling.
pub(super) const STOP: &str = "roadseg-source-stop";
/// Posted from uridecodebin's no-more-pads when none of its streams was video.
pub(super) const NO_VIDEO: &str = "roadseg-no-video";

pub(super) struct Watch {
    pub bus: gst::Bus,
    pub pipeline: gst::glib::WeakRef<gst::Pipeline>,
    pub uri: String,
    pub scheme: Scheme,
    pub handler: Arc<dyn FrameHandler>,
    pub shared: Arc<Shared>,
}

impl Watch {
    pub(super) fn run(self) {
        let mut warnings = WarningLog::default();
        loop {
            let Some(msg) = self.bus.timed_pop(gst::ClockTime::NONE) else {
                continue;
            };
            let end = match msg.view() {
                gst::MessageView::Eos(_) => Some(None),
                gst::MessageView::Error(e) => Some(Some(classify(&self.uri, self.scheme, &Failure::from_message(e)))),
                gst::MessageView::Application(a) => match a.structure().map(|s| s.name().as_str()) {
                    Some(STOP) => return,
                    Some(NO_VIDEO) => Some(Some(no_video(&self.uri, a.structure()))),
                    _ => None,
                },
                gst::MessageView::Warning(w) => {
                    self.handler.on_damaged_input();
                    warnings.log(&self.uri, &describe_warning(w));
                    None
                }
                // A live element joined or left: the pipeline must re-agree on latency.
                gst::MessageView::Latency(_) => {
                    if let Some(p) = self.pipeline.upgrade() {
                        let _ = p.recalculate_latency();
                    }
                    None
                }
                // The clock provider (e.g. an audio sink) went away: pick a new clock.
                gst::MessageView::ClockLost(_) => {
                    if let Some(p) = self.pipeline.upgrade() {
                        let _ = p.set_state(gst::State::Paused);
                        let _ = p.set_state(gst::State::Playing);
                    }
                    None
                }
                _ => None,
            };
            if let Some(end) = end {
                // Marked ended before the call so `wait_info` callers wake even if the
                // handler takes its time.
                self.shared.mark_ended();
                if !self.shared.is_stopping() {
                    match end {
                        None => self.handler.on_eos(),
                        Some(err) => {
                            tracing::debug!(source = %self.uri, "{err}");
                            self.handler.on_error(err)
                        }
                    }
                }
                return;
            }
        }
    }
}

/// A corrupted stream can warn on every packet: the first warning is logged,
/// then at most one line per [`WarningLog::EVERY`] saying how many came.
#[derive(Default)]
struct WarningLog {
    last: Option<std::time::Instant>,
    unlogged: u64,
}

impl WarningLog {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    fn log(&mut self, uri: &str, text: &str) {
        if self.last.is_some_and(|t| t.elapsed() < Self::EVERY) {
            self.unlogged += 1;
            return;
        }
        if self.unlogged > 0 {
            tracing::warn!(source = %uri, "{text} (and {} more warnings in the last {} s)", self.unlogged, Self::EVERY.as_secs());
        } else {
            tracing::warn!(source = %uri, "{text}");
        }
        self.last = Some(std::time::Instant::now());
        self.unlogged = 0;
    }
}

fn no_video(uri: &str, s: Option<&gst::StructureRef>) -> SourceError {
    let get = |f: &str| s.and_then(|s| s.get::<String>(f).ok()).unwrap_or_default();
    let undecodable = get("undecodable");
    if !undecodable.is_empty() {
        return SourceProblem::MissingPlugin.at(uri.into(), format!("no decoder for {undecodable}"));
    }
    let streams = get("streams");
    SourceError::NoVideo { uri: uri.into(), streams: if streams.is_empty() { "nothing".into() } else { streams } }
}

/// GStreamer's error domains mapped to what the user should check.
pub(super) fn classify(uri: &str, scheme: Scheme, f: &Failure) -> SourceError {
    use gst::{CoreError, ResourceError, StreamError};
    let (uri, detail) = (uri.to_string(), f.describe());
    let network = scheme.is_network();
    if let Some(e) = f.error.kind::<ResourceError>() {
        return match e {
            ResourceError::NotFound if scheme == Scheme::V4l2 => SourceProblem::CannotOpen.at(uri, detail),
            ResourceError::NotFound => SourceError::NotFound { uri },
            ResourceError::NotAuthorized => SourceProblem::Unauthorized.at(uri, detail),
            ResourceError::OpenRead | ResourceError::OpenReadWrite | ResourceError::Read | ResourceError::Busy
                if network =>
            {
                SourceProblem::Unreachable.at(uri, detail)
            }
            _ => SourceProblem::CannotOpen.at(uri, detail),
        };
    }
    // souphttpsrc (1.22) reports a refused or dropped connection only as its
    // streaming task failing, with no resource error of its own.
    if network && f.element == "source" && f.error.kind::<StreamError>() == Some(StreamError::Failed) {
        return SourceProblem::Unreachable.at(uri, format!("no data from the server ({detail})"));
    }
    if let Some(e) = f.error.kind::<StreamError>() {
        return match e {
            StreamError::TypeNotFound | StreamError::WrongType => SourceProblem::NotMedia.at(uri, detail),
            StreamError::CodecNotFound => SourceProblem::MissingPlugin.at(uri, detail),
            _ => SourceProblem::Stream.at(uri, detail),
        };
    }
    if let Some(CoreError::MissingPlugin) = f.error.kind::<CoreError>() {
        return SourceProblem::MissingPlugin.at(uri, detail);
    }
    SourceProblem::Stream.at(uri, detail)
}
