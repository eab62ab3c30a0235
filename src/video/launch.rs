//! Plumbing shared by the GStreamer edges: filling the `pipelines/*.txt`
//! descriptions, building them, and waiting on a bus with a deadline.

use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;

/// What GStreamer's own calls fail with, shared by the file sink, the source
/// and the RTSP server: each wraps it in a `Gst` variant and words it for
/// itself (see [`GstPhrases`]). Displays as the GStreamer error alone.
#[derive(Debug, thiserror::Error)]
pub enum GstError {
    /// A description that does not build (or GStreamer not initialising).
    #[error(transparent)]
    Launch(#[from] glib::Error),
    /// A GStreamer call that failed (a missing element or pad, a thread).
    #[error(transparent)]
    Call(#[from] glib::BoolError),
    /// A pipeline that would not change state (start).
    #[error(transparent)]
    StateChange(#[from] gst::StateChangeError),
}

/// How one part words a [`GstError`]: `"{launch}: {error}"` and so on.
pub(crate) struct GstPhrases {
    pub launch: &'static str,
    pub call: &'static str,
    pub state_change: &'static str,
}

impl GstError {
    /// The error as `phrases` word it, e.g. "cannot build the source pipeline: ...".
    pub(crate) fn worded(&self, phrases: &GstPhrases) -> String {
        match self {
            GstError::Launch(e) => format!("{}: {e}", phrases.launch),
            GstError::Call(e) => format!("{}: {e}", phrases.call),
            GstError::StateChange(e) => format!("{}: {e}", phrases.state_change),
        }
    }
}

/// For an error enum with a `Gst(GstError)` variant worded with `GST_PHRASES`:
/// that constant, from the three phrases (see [`GstPhrases`]), and `From` each
/// of GStreamer's error types, so `?` works on GStreamer calls directly.
macro_rules! gst_errors {
    ($t:ty, launch: $launch:literal, call: $call:literal, state_change: $state_change:literal) => {
        const GST_PHRASES: $crate::video::launch::GstPhrases =
            $crate::video::launch::GstPhrases { launch: $launch, call: $call, state_change: $state_change };
        impl From<gstreamer::glib::Error> for $t {
            fn from(e: gstreamer::glib::Error) -> Self {
                Self::Gst(e.into())
            }
        }
        impl From<gstreamer::glib::BoolError> for $t {
            fn from(e: gstreamer::glib::BoolError) -> Self {
                Self::Gst(e.into())
            }
        }
        impl From<gstreamer::StateChangeError> for $t {
            fn from(e: gstreamer::StateChangeError) -> Self {
                Self::Gst(e.into())
            }
        }
    };
}
pub(crate) use gst_errors;

/// Fills `{name}` placeholders of a `pipelines/*.txt` description. Lines starting
/// with `#` are notes for the reader; gst-launch syntax has no comments, so they go.
pub(crate) fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out: String = template.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    for (name, value) in vars {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// A user-supplied string as one quoted gst-launch value, so a path or URI with
/// spaces, `!` or quotes cannot change the shape of the pipeline.
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// Builds a description into a pipeline. FATAL_ERRORS: a missing element or a bad
/// property fails here instead of leaving a half-built pipeline that fails later.
pub(crate) fn launch(desc: &str) -> Result<gst::Pipeline, glib::Error> {
    let ctx = &mut gst::ParseContext::new();
    let element = gst::parse::launch_full(desc, Some(ctx), gst::ParseFlags::FATAL_ERRORS)?;
    match element.downcast::<gst::Pipeline>() {
        Ok(p) => Ok(p),
        Err(e) => {
            // A lone element: wrap it so every caller gets a pipeline with a bus.
            let p = gst::Pipeline::new();
            p.add(&e).map_err(|b| glib::Error::new(gst::CoreError::Failed, &b.to_string()))?;
            Ok(p)
        }
    }
}

/// An ERROR message, owned: which element, GStreamer's error, and the debug text
/// it adds (often the only place the real cause, e.g. errno, appears).
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub element: String,
    pub error: glib::Error,
    pub debug: String,
}

impl Failure {
    pub(crate) fn from_message(e: &gst::message::Error) -> Self {
        let element = e.src().map(|s| s.name().to_string()).unwrap_or_else(|| "pipeline".into());
        Failure { element, error: e.error(), debug: cause(e.debug().as_deref()) }
    }

    /// "element: message (cause)", for error messages.
    pub(crate) fn describe(&self) -> String {
        if self.debug.is_empty() {
            format!("{}: {}", self.element, self.error.message())
        } else {
            format!("{}: {} ({})", self.element, self.error.message(), self.debug)
        }
    }
}

/// The cause in a message's debug text: it opens with a source-file location
/// ("../gstfoo.c(123): func (): /GstPipeline:p0/...:") and the cause, when there
/// is one, follows on the next line.
fn cause(debug: Option<&str>) -> String {
    let last = debug.and_then(|d| d.lines().last()).unwrap_or("").trim();
    if last.contains("(): /") {
        return String::new();
    }
    // Some causes carry whole caps strings (codec_data and all): keep the gist.
    match last.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &last[..cut]),
        None => last.to_string(),
    }
}

/// A WARNING message as one line, for logs.
pub(crate) fn describe_warning(w: &gst::message::Warning) -> String {
    let element = w.src().map(|s| s.name().to_string()).unwrap_or_else(|| "pipeline".into());
    format!("{element}: {} ({})", w.error().message(), cause(w.debug().as_deref()))
}

/// How a wait on a bus ended.
pub(crate) enum BusEnd {
    Eos,
    Error(Failure),
    Timeout,
}

/// Waits for EOS or the first ERROR, handing every other message to `other`
/// (e.g. splitmuxsink's fragment-closed notes).
pub(crate) fn wait_end(bus: &gst::Bus, timeout: Duration, mut other: impl FnMut(&gst::MessageRef)) -> BusEnd {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return BusEnd::Timeout;
        }
        let Some(msg) = bus.timed_pop(gst::ClockTime::from_nseconds(left.as_nanos() as u64)) else {
            return BusEnd::Timeout;
        };
        match msg.view() {
            gst::MessageView::Eos(_) => return BusEnd::Eos,
            gst::MessageView::Error(e) => return BusEnd::Error(Failure::from_message(e)),
            _ => other(&msg),
        }
    }
}
