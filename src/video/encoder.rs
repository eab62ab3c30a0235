//! Picks the H.264 encoder at runtime: a hardware one when present and usable,
//! else x264enc, else openh264enc. The candidates and their settings live in
//! `pipelines/encoders.txt`, most preferred first.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::prelude::*;

use super::frame::VideoInfo;
use super::launch::{self, BusEnd};

const ENCODERS: &str = include_str!("../../pipelines/encoders.txt");
const PROBE: &str = include_str!("../../pipelines/encoder-probe.txt");

/// How long a hardware encoder may take to encode two frames before it counts as
/// unusable (a first CUDA/VA context can take a second or two to open).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the caller wants from the encoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderSettings {
    pub bitrate_kbps: u32,
    /// Distance between keyframes: a file can only be cut, and a late RTSP client
    /// can only start, at a keyframe.
    pub keyframe_interval: Duration,
    /// Skip hardware encoders even when present (e.g. the GPU is busy with inference).
    pub force_software: bool,
}

impl Default for EncoderSettings {
    fn default() -> Self {
        EncoderSettings { bitrate_kbps: 4000, keyframe_interval: Duration::from_secs(2), force_software: false }
    }
}

/// The encoder picked for one stream, as a gst-launch fragment that takes raw
/// video from `videoconvert` and gives H.264 to `h264parse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderChoice {
    name: String,
    hardware: bool,
    description: String,
}

impl EncoderChoice {
    /// The element factory name, for logs ("x264enc").
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_hardware(&self) -> bool {
        self.hardware
    }

    /// e.g. `video/x-raw,format=I420 ! x264enc bitrate=4000 ...`
    pub fn description(&self) -> &str {
        &self.description
    }

    /// No encoder: the source's own video goes through `parser` into the muxer.
    pub(crate) fn remux(parser: &str) -> EncoderChoice {
        EncoderChoice { name: parser.to_string(), hardware: false, description: String::new() }
    }

    /// The source's own video is remuxed; nothing is encoded.
    pub fn is_remux(&self) -> bool {
        self.description.is_empty()
    }
}

impl fmt::Display for EncoderChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_remux() {
            return write!(f, "none (the source's own video, remuxed by {})", self.name);
        }
        write!(f, "{} ({})", self.name, if self.hardware { "hardware" } else { "software" })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error(
        "no usable H.264 encoder: install gstreamer1.0-plugins-ugly (x264enc) or gstreamer1.0-plugins-bad with openh264 (openh264enc)"
    )]
    NoEncoder,
    #[error("cannot initialise GStreamer: {0}")]
    Init(#[from] glib::Error),
}

/// The first usable encoder for `info`-sized frames. Hardware candidates must
/// encode two test frames first (the result is remembered per size), so an
/// installed driver without a working device falls through to software.
pub fn choose(settings: &EncoderSettings, info: &VideoInfo) -> Result<EncoderChoice, EncoderError> {
    gst::init()?;
    for candidate in candidates(settings, info) {
        if settings.force_software && candidate.hardware {
            continue;
        }
        if gst::ElementFactory::find(&candidate.name).is_none() {
            continue;
        }
        if candidate.hardware && !usable(&candidate, info) {
            tracing::info!(encoder = %candidate.name, "hardware encoder present but not usable; trying the next one");
            continue;
        }
        return Ok(candidate);
    }
    Err(EncoderError::NoEncoder)
}

/// The first software encoder: the fallback when a hardware pipeline fails to start.
pub fn software(settings: &EncoderSettings, info: &VideoInfo) -> Result<EncoderChoice, EncoderError> {
    choose(&EncoderSettings { force_software: true, ..settings.clone() }, info)
}

/// Keyframe interval in frames (at the fallback rate when the rate is unknown).
fn gop_frames(settings: &EncoderSettings, info: &VideoInfo) -> u32 {
    let (num, den) = info.frame_rate();
    let fps = f64::from(num) / f64::from(den);
    (settings.keyframe_interval.as_secs_f64() * fps).round().max(1.0) as u32
}

fn candidates(settings: &EncoderSettings, info: &VideoInfo) -> Vec<EncoderChoice> {
    let gop = gop_frames(settings, info).to_string();
    let kbps = settings.bitrate_kbps.max(1).to_string();
    let bps = (settings.bitrate_kbps.max(1) as u64 * 1000).min(u32::MAX as u64).to_string();
    let vars = [("gop", gop.as_str()), ("kbps", kbps.as_str()), ("bps", bps.as_str())];
    launch::fill(ENCODERS, &[])
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once(char::is_whitespace)?;
            let (kind, description) = rest.trim_start().split_once(char::is_whitespace)?;
            let description = launch::fill(description.trim(), &vars);
            Some(EncoderChoice { name: name.to_string(), hardware: kind == "hw", description })
        })
        .collect()
}

fn usable(candidate: &EncoderChoice, info: &VideoInfo) -> bool {
    /// (encoder, width, height) -> usable
    type Probed = Mutex<HashMap<(String, u32, u32), bool>>;
    static PROBED: OnceLock<Probed> = OnceLock::new();
    let probed = PROBED.get_or_init(Default::default);
    let key = (candidate.name.clone(), info.width, info.height);
    if let Some(ok) = probed.lock().ok().and_then(|m| m.get(&key).copied()) {
        return ok;
    }
    // Probed outside the lock: two threads may probe the same encoder once each,
    // which is harmless, while a lock held for seconds would stall every sink.
    let ok = probe(candidate, info);
    if let Ok(mut m) = probed.lock() {
        m.insert(key, ok);
    }
    ok
}

fn probe(candidate: &EncoderChoice, info: &VideoInfo) -> bool {
    let (w, h) = (info.width.max(16).to_string(), info.height.max(16).to_string());
    let (num, den) = info.frame_rate();
    let fps = format!("{num}/{den}");
    let desc =
        launch::fill(PROBE, &[("width", &w), ("height", &h), ("fps", &fps), ("encoder", candidate.description())]);
    let Ok(pipeline) = launch::launch(&desc) else {
        return false;
    };
    let ok = match (pipeline.set_state(gst::State::Playing), pipeline.bus()) {
        (Ok(_), Some(bus)) => match launch::wait_end(&bus, PROBE_TIMEOUT, |_| {}) {
            BusEnd::Eos => true,
            BusEnd::Error(f) => {
                tracing::info!(encoder = %candidate.name, "probe failed: {}", f.describe());
                false
            }
            BusEnd::Timeout => false,
        },
        _ => false,
    };
    let _ = pipeline.set_state(gst::State::Null);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_ordered_and_filled() {
        let info = VideoInfo { width: 320, height: 240, fps_num: 25, fps_den: 1, format: crate::frame::PixelFormat::Rgba };
        let c = candidates(&EncoderSettings::default(), &info);
        let names: Vec<_> = c.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["nvh264enc", "vah264enc", "vaapih264enc", "x264enc", "openh264enc"]);
        let x264 = &c[3];
        assert!(!x264.is_hardware());
        assert!(x264.description().contains("key-int-max=50"), "{}", x264.description());
        assert!(x264.description().contains("bitrate=4000"));
        assert!(c[4].description().contains("bitrate=4000000"));
        assert!(!c.iter().any(|c| c.description().contains('{')));
    }
}
