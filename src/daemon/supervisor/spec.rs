//! A configured stream as the stream builder takes it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::daemon::config::{RecordMode, StreamConfig};
use crate::video::output::StreamObserver;
use crate::video::stream::{FIRST_FRAME_WAIT, FileTarget, OutputSpec, StatsTarget, StreamSpec};

/// `cfg`'s stream with its outputs named for `named_for` (`{start}`).
pub(super) fn stream_spec(cfg: &StreamConfig, named_for: SystemTime, finish_timeout: Duration, observer: Arc<dyn StreamObserver>) -> StreamSpec {
    let (o, name) = (&cfg.output, cfg.name.as_str());
    let mut outputs = Vec::new();
    if let Some(pattern) = o.segment_location(name, named_for) {
        let target = FileTarget {
            path: pattern.into(),
            segment_seconds: Some(u32::try_from(o.segment_seconds).unwrap_or(u32::MAX)),
            bitrate_kbps: o.bitrate_kbps,
            wall_clock_names: o.wall_clock_names(),
            max_fps: o.record_fps,
            width: o.record_width,
        };
        outputs.push(match o.record {
            RecordMode::Source => OutputSpec::SourceFile(target),
            _ => OutputSpec::File(target),
        });
    }
    if let Some(mount) = o.rtsp_mount(name) {
        outputs.push(OutputSpec::Rtsp { mount, bitrate_kbps: o.bitrate_kbps });
    }
    let source = cfg.source_settings();
    StreamSpec {
        name: name.to_string(),
        first_frame_timeout: if source.live { silence(cfg) } else { FIRST_FRAME_WAIT },
        source,
        ring_capacity: cfg.ring_capacity,
        infer_fps: cfg.infer_fps,
        temporal: cfg.temporal(),
        outputs,
        stats: o.stats_path(name, named_for).map(|path| StatsTarget::Append { path, stream: name.to_string(), masks: o.masks_in_stats() }),
        // Masks cost a pass over each frame's class map: only when a line carries them.
        want_masks: o.masks_in_stats(),
        finish_timeout,
        observer,
    }
}

/// How long a live source may send nothing before it counts as lost (and
/// may take to send its first frame): long enough for the jitter buffer.
pub(super) fn silence(cfg: &StreamConfig) -> Duration {
    Duration::from_secs(5).max(Duration::from_millis(3 * u64::from(cfg.latency_ms)))
}
