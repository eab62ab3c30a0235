//! Source URIs: the one place that says what kind of source a URI names
//! ([`Scheme::of`]), whether it is live unless told otherwise
//! ([`SourceUri::live_by_default`]) and how it is shown without its password
//! ([`SourceUri::redacted`]). [`SourceUri::parse`] checks just enough to
//! reject a bad `streams[i].uri` at load time rather than when GStreamer
//! first tries it (possibly hours later, on a reconnect). GStreamer still
//! gets the URI string exactly as written.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    File,
    Rtsp,
    Rtsps,
    Http,
    Https,
    V4l2,
    /// Built-in test source: `test://PATTERN?width=W&height=H&fps=F`.
    Test,
}

impl Scheme {
    pub const ALL: [Scheme; 7] = [Scheme::File, Scheme::Rtsp, Scheme::Rtsps, Scheme::Http, Scheme::Https, Scheme::V4l2, Scheme::Test];

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::File => "file",
            Scheme::Rtsp => "rtsp",
            Scheme::Rtsps => "rtsps",
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::V4l2 => "v4l2",
            Scheme::Test => "test",
        }
    }

    /// The scheme called `name`, in any case. `rtspt` and `rtsph` (RTSP
    /// forced over TCP or tunnelled in HTTP, which GStreamer understands) are RTSP.
    pub fn named(name: &str) -> Option<Scheme> {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "rtspt" | "rtsph" => Some(Scheme::Rtsp),
            _ => Scheme::ALL.into_iter().find(|s| s.as_str() == name),
        }
    }

    /// What kind of source `uri` names: its scheme, `File` for a bare path
    /// (sources take paths too), None for a scheme no source handles.
    pub fn of(uri: &str) -> Option<Scheme> {
        match uri.split_once("://") {
            Some((scheme, _)) => Scheme::named(scheme),
            None => Some(Scheme::File),
        }
    }

    /// Whether such a source paces itself and can drop out, so it is re-timed,
    /// never waited for and reconnected: everything but a file, which is read
    /// as fast as the pipeline goes and ends.
    pub fn is_live(self) -> bool {
        self != Scheme::File
    }

    /// Reached over the network (errors there are about hosts and ports).
    pub fn is_network(self) -> bool {
        matches!(self, Scheme::Rtsp | Scheme::Rtsps | Scheme::Http | Scheme::Https)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a stream URI was refused. Never shows a password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// `shown` has its password masked.
    #[error("'{shown}' contains whitespace or control characters (percent-encode spaces as %20)")]
    Whitespace { shown: String },
    #[error("'{uri}' is not a URI; expected {}", expected())]
    NotUri { uri: String },
    #[error("unsupported scheme '{scheme}://'; expected {}", expected())]
    UnsupportedScheme { scheme: String },
    #[error("file URIs need an absolute path, e.g. file:///videos/clip.mp4")]
    FilePath,
    #[error("v4l2 URIs name a device node, e.g. v4l2:///dev/video0")]
    V4l2Path,
    #[error("test source option {key}={value} is not a valid {key}")]
    TestOption { key: String, value: String },
    /// `host_port` is what follows the user info.
    #[error("unclosed '[' in host '{host_port}'")]
    UnclosedBracket { host_port: String },
    #[error("{scheme} URIs need a host, e.g. {scheme}://192.0.2.10/stream1")]
    NoHost { scheme: Scheme },
    /// The port is not echoed: in `user:password/path` (the `@host`
    /// forgotten) it would be the password.
    #[error("the port after '{host}:' is not a number in 1..=65535 (credentials go before an '@': user:password@host)")]
    BadPort { host: String },
}

/// A source URI split into parts. Percent escapes are kept as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceUri {
    pub scheme: Scheme,
    /// `[user[:password]@]host[:port]` for network sources, the pattern for
    /// `test://`, empty for `file://` and `v4l2://`.
    pub authority: String,
    pub path: String,
    /// `key=value` pairs in order (a bare `key` has an empty value).
    pub query: Vec<(String, String)>,
}

impl SourceUri {
    pub fn parse(uri: &str) -> Result<SourceUri, UriError> {
        if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(UriError::Whitespace { shown: Self::redacted(uri) });
        }
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| UriError::NotUri { uri: uri.to_string() })?;
        let scheme = Scheme::named(scheme).ok_or_else(|| UriError::UnsupportedScheme { scheme: scheme.to_string() })?;
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let query = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|kv| !kv.is_empty())
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (kv.to_string(), String::new()),
            })
            .collect();
        let parsed = SourceUri { scheme, authority: authority.to_string(), path: path.to_string(), query };
        parsed.check()?;
        Ok(parsed)
    }

    fn check(&self) -> Result<(), UriError> {
        match self.scheme {
            Scheme::File if !(self.authority.is_empty() || self.authority.eq_ignore_ascii_case("localhost")) || self.path.len() < 2 => {
                return Err(UriError::FilePath);
            }
            Scheme::V4l2 if !self.authority.is_empty() || self.path.len() < 2 => {
                return Err(UriError::V4l2Path);
            }
            Scheme::Test => {
                for (key, value) in &self.query {
                    let ok = match key.as_str() {
                        "width" | "height" => value.parse::<u32>().is_ok_and(|v| (16..=16384).contains(&v)),
                        "fps" => parse_fps(value).is_some(),
                        _ => true, // the test source reads its own options
                    };
                    if !ok {
                        return Err(UriError::TestOption { key: key.clone(), value: value.clone() });
                    }
                }
            }
            s if s.is_network() => check_host(s, &self.authority)?,
            _ => {}
        }
        Ok(())
    }

    /// `host[:port]` without credentials, for logs and summaries.
    pub fn host(&self) -> &str {
        self.authority.rsplit_once('@').map_or(&self.authority, |(_, h)| h)
    }

    pub fn query_value(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The frame rate the URI itself states (`test://…?fps=F`); None where
    /// only the source, once started, could say.
    pub fn stated_fps(&self) -> Option<f64> {
        (self.scheme == Scheme::Test).then(|| self.query_value("fps").and_then(parse_fps)).flatten()
    }

    /// Whether a stream from `uri` is live when its settings do not say (see
    /// [`Scheme::is_live`]). A scheme no source handles counts as live: it
    /// fails to start either way, and a live stream keeps retrying.
    pub fn live_by_default(uri: &str) -> bool {
        Scheme::of(uri.trim()).is_none_or(Scheme::is_live)
    }

    /// The URI with any password replaced by `***`, for logs.
    pub fn redacted(uri: &str) -> String {
        let Some((scheme, rest)) = uri.split_once("://") else { return uri.to_string() };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        match rest[..end].rsplit_once('@') {
            Some((userinfo, host)) => {
                let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                let masked = if userinfo.contains(':') { format!("{user}:***") } else { user.to_string() };
                format!("{scheme}://{masked}@{host}{}", &rest[end..])
            }
            None => uri.to_string(),
        }
    }
}

/// `text` (a message that quotes a config line or value, say) with every
/// `user:password@` in it shown as `user:***@`, URI or not, and every
/// `password = value` as `password = ***`.
pub fn redact_text(text: &str) -> String {
    text.split_inclusive('\n').map(redact_line).collect()
}

fn redact_line(line: &str) -> String {
    // A `password = ...` (or `"password" = ...`) key and value.
    let lower = line.to_ascii_lowercase();
    let mut masked = None;
    for (key, _) in lower.match_indices("password") {
        let after = &line[key + "password".len()..];
        let value = after.trim_start_matches(['"', '\'', ' ', '\t']);
        if let Some(value) = value.strip_prefix('=') {
            let eol = if line.ends_with('\n') { "\n" } else { "" };
            masked = Some(format!("{} ***{eol}", &line[..line.len() - value.len()]));
            break;
        }
    }
    // Then user info, also before such a key.
    let line = masked.as_deref().unwrap_or(line);
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find('@') {
        // The user info: from the last delimiter before the '@'.
        let start = rest[..at].rfind(|c: char| "/\"'`@".contains(c) || c.is_whitespace()).map_or(0, |i| i + 1);
        match rest[start..at].split_once(':') {
            Some((user, _)) => out.push_str(&format!("{}{user}:***@", &rest[..start])),
            None => out.push_str(&rest[..=at]),
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out
}

/// `25`, `29.97` or `30000/1001`.
fn parse_fps(v: &str) -> Option<f64> {
    let fps = match v.split_once('/') {
        Some((n, d)) => n.parse::<f64>().ok()? / d.parse::<f64>().ok().filter(|d| *d > 0.0)?,
        None => v.parse().ok()?,
    };
    (fps > 0.0 && fps <= 1000.0).then_some(fps)
}

fn check_host(scheme: Scheme, authority: &str) -> Result<(), UriError> {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| UriError::UnclosedBracket { host_port: host_port.to_string() })?;
        (host, after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(UriError::NoHost { scheme });
    }
    if let Some(port) = port
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(UriError::BadPort { host: host.to_string() });
    }
    Ok(())
}

fn expected() -> String {
    let all: Vec<String> = Scheme::ALL.iter().map(|s| format!("{s}://")).collect();
    all.join(", ")
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    #[test]
    fn redact_text_masks_user_info_and_password_values_only() {
        // Rule: messages quoting config text show no password, and keep everything else.
        let snippet = "8 | uri = \"rtsp://alice:pw1@cam:554/x\"\n  |     ^\n3 | password = \"pw2\n";
        let shown = redact_text(snippet);
        assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
        assert!(shown.contains("rtsp://alice:***@cam:554/x") && shown.contains("password = ***\n"), "{shown}");
        assert_eq!(redact_text("rtsp:'/alice:pw@cam/x"), "rtsp:'/alice:***@cam/x");
        let advice = "set rtsp.username and rtsp.password, or set rtsp.allow_anonymous = true";
        assert_eq!(redact_text(advice), advice);
        assert_eq!(redact_text("user@host and [::1]:8554"), "user@host and [::1]:8554");
        assert_eq!(redact_text("uri = \"rtsp://a:pw1@h password = pw2"), "uri = \"rtsp://a:***@h password = ***");
    }

    #[test]
    fn errors_do_not_echo_passwords() {
        // Rule: a URI error never repeats the password, even where the URI is malformed.
        let e = SourceUri::parse("rtsp://alice:pw-xyz@cam/x y").unwrap_err().to_string();
        assert!(!e.contains("pw-xyz") && e.contains("alice:***@cam"), "{e}");
        let e = SourceUri::parse("rtsp://alice:pw-xyz/x").unwrap_err().to_string();
        assert!(!e.contains("pw-xyz") && e.contains("port"), "{e}");
    }
}

#[cfg(test)]
mod classification_tests {
    use super::*;

    #[test]
    fn every_source_but_a_file_is_live_by_default() {
        // Rule: live-ness comes from the scheme alone: files (URIs or bare paths) are not live; cameras, network streams (http included) and test patterns are.
        for uri in ["file:///v.mp4", "/videos/v.mp4", "clip.mp4", "FILE:///v.mp4"] {
            assert!(!SourceUri::live_by_default(uri), "{uri}");
        }
        for uri in ["rtsp://h/s", "rtspt://h/s", "rtsps://h/s", "http://h/x.mp4", "https://h/x.m3u8", "v4l2:///dev/video0", "test://smpte", "gopher://h"] {
            assert!(SourceUri::live_by_default(uri), "{uri}");
        }
        assert_eq!(Scheme::of("RTSPH://h/s"), Some(Scheme::Rtsp));
        assert_eq!(Scheme::of("gopher://h"), None);
    }
}
