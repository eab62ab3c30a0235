//! How a source is opened: inert settings, shared by `process`, the daemon's
//! configuration (which deserialises [`RtspTransport`] as written in TOML)
//! and the source itself.

use serde::{Deserialize, Serialize};

/// RTSP jitter buffer when none is configured.
pub const DEFAULT_LATENCY_MS: u32 = 200;

/// How a source is opened. `SourceSettings::new(uri)` gives the defaults;
/// whether the source is live is the caller's to say (normally
/// [`crate::video::uri::SourceUri::live_by_default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSettings {
    /// file:///path, a bare path, http(s)://, rtsp(s)://, v4l2:///dev/videoN,
    /// test://PATTERN?width=W&height=H&fps=N[&num-buffers=N] (PATTERN: smpte, ball, ...).
    pub uri: String,
    /// The source keeps producing whether or not frames are taken (a camera), so the
    /// handler must not block. For file and http sources `live = true` paces frames
    /// at the clip's frame rate; test sources then run on the clock.
    pub live: bool,
    /// RTSP jitter-buffer size: more survives a bad network, less is fresher.
    pub latency_ms: u32,
    pub rtsp_transport: RtspTransport,
    /// Let decodebin use hardware decoders (see `source/decoders.rs` for how).
    pub prefer_hardware: bool,
}

impl SourceSettings {
    pub fn new(uri: impl Into<String>) -> Self {
        SourceSettings {
            uri: uri.into(),
            live: false,
            latency_ms: DEFAULT_LATENCY_MS,
            rtsp_transport: RtspTransport::default(),
            prefer_hardware: true,
        }
    }
}

/// How RTSP media travels. Written `tcp`, `udp` or `auto` in configs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum RtspTransport {
    /// RTP interleaved in the RTSP connection: survives NAT and firewalls,
    /// which is what a camera on another network needs.
    #[default]
    Tcp,
    Udp,
    /// UDP first, TCP when no UDP data comes within 5 s.
    Auto,
}

impl RtspTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            RtspTransport::Tcp => "tcp",
            RtspTransport::Udp => "udp",
            RtspTransport::Auto => "auto",
        }
    }
}

impl From<RtspTransport> for &'static str {
    fn from(t: RtspTransport) -> &'static str {
        t.as_str()
    }
}

/// An `rtsp_transport` other than tcp, udp or auto.
#[derive(Debug, thiserror::Error)]
#[error("unknown RTSP transport '{0}' (expected tcp, udp or auto)")]
pub struct UnknownTransport(pub String);

impl TryFrom<String> for RtspTransport {
    type Error = UnknownTransport;
    fn try_from(s: String) -> Result<Self, UnknownTransport> {
        [RtspTransport::Tcp, RtspTransport::Udp, RtspTransport::Auto]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or(UnknownTransport(s))
    }
}
