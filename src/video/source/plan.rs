//! From a source URI to the pipeline description that decodes it.

use std::path::Path;

use gstreamer::glib;

use super::{SourceError, SourceSettings};
use crate::video::launch::{fill, quote};
use crate::video::uri::{Scheme, SourceUri};

const URI: &str = include_str!("../../../pipelines/source-uri.txt");
const TEST: &str = include_str!("../../../pipelines/source-test.txt");
const V4L2: &str = include_str!("../../../pipelines/source-v4l2.txt");

/// Why a `test://` URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TestUriError {
    /// `shown` stops short of any `user:password@`.
    #[error("bad pattern {shown:?} (a videotestsrc pattern name such as smpte or ball; no user:password@)")]
    Pattern { shown: String },
    #[error("query item {0:?} is not key=value")]
    NotKeyValue(String),
    #[error("{key}={value:?} is not a positive number")]
    NotPositive { key: String, value: String },
    #[error("unknown query key {0:?} (width, height, fps, num-buffers)")]
    UnknownKey(String),
}

/// Whether uridecodebin is in the pipeline for `scheme` and its pads are linked in code.
pub(super) fn dynamic(scheme: Scheme) -> bool {
    !matches!(scheme, Scheme::V4l2 | Scheme::Test)
}

pub(super) struct Plan {
    pub scheme: Scheme,
    pub description: String,
    /// The URI as it may appear in logs and errors: credentials masked.
    pub shown: String,
}

pub(super) fn plan(settings: &SourceSettings) -> Result<Plan, SourceError> {
    let raw = settings.uri.trim();
    let shown = SourceUri::redacted(raw);
    if raw.contains('\0') {
        // glib's path and URI conversions panic on NUL.
        return Err(SourceError::BadUri { uri: shown.escape_default().to_string(), reason: "contains a NUL byte".into() });
    }
    let Some((_, rest)) = raw.split_once("://") else {
        return plan_path(raw, &shown, settings);
    };
    let scheme = Scheme::of(raw).ok_or_else(|| SourceError::UnsupportedScheme { uri: shown.clone() })?;
    let bad = |reason: &str| SourceError::BadUri { uri: shown.clone(), reason: reason.into() };
    let sync = if settings.live { "true" } else { "false" };
    let description = match scheme {
        Scheme::File => {
            // glib's message quotes the URI: show it masked.
            let (path, _) = glib::filename_from_uri(raw).map_err(|e| bad(&e.message().replace(raw, &shown)))?;
            if !path.exists() {
                return Err(SourceError::NotFound { uri: shown });
            }
            warn_of_late_edit(&path, &shown);
            fill(URI, &[("uri", &quote(raw)), ("sync", sync)])
        }
        Scheme::Http | Scheme::Https => fill(URI, &[("uri", &quote(raw)), ("sync", sync)]),
        // Frames go out as they arrive: a network camera already paces them.
        Scheme::Rtsp | Scheme::Rtsps => fill(URI, &[("uri", &quote(raw)), ("sync", "false")]),
        Scheme::V4l2 => {
            if !rest.starts_with('/') {
                return Err(bad("expected v4l2:///dev/videoN"));
            }
            fill(V4L2, &[("device", &quote(rest))])
        }
        Scheme::Test => {
            test_description(rest, settings.live).map_err(|source| SourceError::BadTestUri { uri: shown.clone(), source })?
        }
    };
    Ok(Plan { scheme, description, shown })
}

/// A predicted loss under this is a frame or less.
const LOST_TAIL_S: f64 = 0.05;

/// Says up front when GStreamer 1.22's qtdemux will leave the end of this
/// MP4 unread (a trim without re-encoding, whose edit list starts the video
/// seconds into its track; `mp4_edit`): a daemon's file stream would
/// otherwise lose it without a word. Of the 16 clips in ../shared, 6 start
/// over a second into the track; only the 2 predicted to lose 2.4 s lose
/// anything, and only they are warned of.
fn warn_of_late_edit(path: &Path, shown: &str) {
    let Some(edit) = super::mp4_edit::video_edit(path) else { return };
    let Some(cut) = edit.predicted_cut_s.filter(|c| *c >= LOST_TAIL_S) else { return };
    let start = edit.start_s;
    tracing::warn!(
        uri = %shown,
        "the video starts {start:.2} s into its track (an edit list, as a trim without re-encoding writes), and GStreamer 1.22's MP4 demuxer stops such a file early: the last {cut:.1} s may not be read (this is {}); re-encode it (ffmpeg -i IN -c:v libx264 -crf 18 OUT.mp4) to read every frame",
        gstreamer::version_string()
    );
}

/// A bare path is taken as a file, so `roadseg run clip.mp4` works.
fn plan_path(raw: &str, shown: &str, settings: &SourceSettings) -> Result<Plan, SourceError> {
    if raw.is_empty() {
        return Err(SourceError::BadUri { uri: shown.into(), reason: "empty".into() });
    }
    let path = Path::new(raw);
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let uri = glib::filename_to_uri(&abs, None)
        .map_err(|e| SourceError::BadUri { uri: shown.into(), reason: e.message().into() })?;
    plan(&SourceSettings { uri: uri.to_string(), ..settings.clone() })
}

/// `test://smpte?width=640&height=480&fps=25&num-buffers=100`
fn test_description(rest: &str, live: bool) -> Result<String, TestUriError> {
    let (pattern, query) = rest.split_once('?').unwrap_or((rest, ""));
    let pattern = pattern.trim_end_matches('/');
    let pattern = if pattern.is_empty() { "smpte" } else { pattern };
    // Only a pattern nick can go into the description, nothing that could add elements.
    if !pattern.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        // Not echoed past an '@': that part reads as user:password.
        let shown = pattern.rsplit_once('@').map_or(pattern, |(_, p)| p);
        return Err(TestUriError::Pattern { shown: shown.to_string() });
    }
    let (mut width, mut height, mut fps, mut num_buffers) = (640u32, 480u32, "25/1".to_string(), -1i64);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| TestUriError::NotKeyValue(pair.to_string()))?;
        let num = |v: &str| {
            v.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| TestUriError::NotPositive { key: k.to_string(), value: v.to_string() })
        };
        match k {
            "width" => width = num(v)?,
            "height" => height = num(v)?,
            "fps" => {
                fps = match v.split_once('/') {
                    Some((n, d)) => format!("{}/{}", num(n)?, num(d)?),
                    None => format!("{}/1", num(v)?),
                }
            }
            "num-buffers" => num_buffers = num(v)? as i64,
            _ => return Err(TestUriError::UnknownKey(k.to_string())),
        }
    }
    Ok(fill(
        TEST,
        &[
            ("live", if live { "true" } else { "false" }),
            ("pattern", pattern),
            ("num_buffers", &num_buffers.to_string()),
            ("width", &width.to_string()),
            ("height", &height.to_string()),
            ("fps", &fps),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_uris_are_checked() {
        assert!(test_description("ball?width=64&height=48&fps=30000/1001", true).unwrap().contains("30000/1001"));
        assert!(test_description("smpte ! filesink", true).is_err());
        assert!(test_description("smpte?width=0", true).is_err());
        assert!(test_description("smpte?colour=red", true).is_err());
    }
}
